"""``python -m bench.bisect``: a replay-mode bisection of the benchmark's pass-by-pass workload, binary
search against replaying every step (``--linear``), and a rerun-mode bisection of the bf16 example.

The workload (``workloads/transformer.py``, ``--size``, default medium: the training step of a two-block
transformer) is captured pass by pass with text dumps, large constants and snapshots, as ``xlarun bisect``
needs; its training step is then bisected both ways through the CLI, as a user runs it. Nothing is asserted:
the numbers go to stdout and ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .results_files import add_output_options, output_path, write_results
from .workloads import SIZES, write_spec

ROOT = Path(__file__).resolve().parent.parent


def _xlarun(store: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "XLARUN_STORE": str(store)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "xlarun", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, proc


def _json(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"xlarun {proc.args[3:]} gave no JSON (exit {proc.returncode}): {proc.stderr.strip()[-400:]}") from None


def _summary(seconds: float, data: dict) -> dict:
    return {
        "seconds": round(seconds, 2),
        "replays": data.get("replays"),
        "steps_measured": len(data.get("steps") or []),
        "timeline_steps": data.get("steps_total"),
        "verdict": data.get("verdict"),
        "culprit": data.get("culprit_pass"),
        "largest_abs_error": (data.get("largest") or {}).get("max_abs_error"),
    }


def measure(size: str, work: Path) -> dict:
    store = work / "store"
    spec = json.loads(write_spec(SIZES[size], work).read_text())
    spec["dump"].update({"formats": ["text"], "large_constants": True, "snapshots": True})
    spec["dump"].pop("pipeline_re", None)
    path = work / "bisect-spec.yaml"
    path.write_text(json.dumps(spec, indent=2))
    took, proc = _xlarun(store, "capture", str(path), "-q")
    if proc.returncode != 0:
        raise SystemExit(f"capture failed: {proc.stderr.strip()[-400:]}")
    _, listing = _xlarun(store, "modules", "--json")
    modules = _json(listing)["modules"]
    main = next(m for m in modules if "train_step" in m["name"])
    ref = f"{main['run_id']}/module_{main['module_id']:04d}"
    results = {
        "workload": spec["name"],
        "capture_s": round(took, 2),
        "module": main["name"],
        "pass_dumps": main.get("n_pass_dumps"),
    }
    for mode, extra in (("binary", []), ("linear", ["--linear"])):
        seconds, proc = _xlarun(store, "bisect", ref, "--json", "-q", *extra)
        results[mode] = _summary(seconds, _json(proc)) | {"exit": proc.returncode}
    results["ops"] = _instruction_search(store, ref)
    seconds, proc = _xlarun(
        store, "bisect", str(ROOT / "configs" / "bisect-bf16.yaml"), "--check", r"result (\S+)", "-j", "2", "--json", "-q"
    )
    data = _json(proc)
    results["rerun_bf16"] = {
        "seconds": round(seconds, 2),
        "reruns": data.get("reruns"),
        "culprit": data.get("culprit_pass"),
        "exit": proc.returncode,
    }
    return results


def _instruction_search(store: Path, ref: str) -> dict:
    """The instruction search bisect runs on a culprit step (``--ops``), timed on the step after the training
    step's first algsimp against the step before it: the same two replays with every value exposed."""
    from xlarun.bisect.bisect_options import BisectOptions
    from xlarun.bisect.first_move import find_first_move
    from xlarun.bisect.replayer import StepReplayer
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps
    from xlarun.store.facade import LocalStore

    opened = LocalStore.open(store)
    module = resolve_module(opened.index, ref)
    steps = pass_steps(module)
    index = next(i for i, s in enumerate(steps) if s.after_pass == "algsimp" and i > 0)
    replayer = StepReplayer(opened, module, BisectOptions(), {}, lambda _line: None)
    started = time.perf_counter()
    try:
        found = find_first_move(
            replayer.run_text, replayer.text(steps[index - 1].path), replayer.text(steps[index].path), 1e-5, 1e-5
        )
    finally:
        replayer.close()
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "step": steps[index].label,
        "values_compared": found.compared,
        "values_new": found.unpaired,
        "first_to_move": found.moved.name if found.moved else None,
        "first_past_tolerance": found.visible.name if found.visible else None,
        "notes": found.notes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bisect", description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="medium")
    add_output_options(parser, "bisect")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xlarun-bench-bisect-") as tmp:
        results = measure(args.size, Path(tmp))
    print(json.dumps(results, indent=2))
    print(f"written to {write_results(output_path(args, 'bisect'), results | {'size': args.size})}")


if __name__ == "__main__":
    main()
