"""Capture overhead: ``xlarun capture SPEC`` against running the same script directly, with the
environment ``xlarun flags SPEC --out DIR`` prints, interleaved so drift hits both alike.

Two jobs: the large workload (its capture is what the archive benchmark archives), and a trivial job that
writes one small module dump as XLA would (:data:`TRIVIAL_JOB`), whose capture minus its direct run is
xlarun's *fixed cost* (targets: at most 0.20 s, and at most 1.3x the CPU of a process that imports typer and
validates a pydantic model). The fixed cost is measured on the trivial job because on the large one it is the difference of two 30 s medians that each vary by seconds between repeats: a
fraction of a second there is noise, while a trivial job's runs vary by milliseconds, and what xlarun adds
beyond the job (start-up, the spec, the launch, archiving and indexing a module, the commit) is the same."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .timing import TYPER_AND_PYDANTIC_START, Timing, cli_env, ratio, run_command, xlarun_argv
from .workloads import SCRIPT, WorkloadSize

#: The trivial job: no framework imported, one module dumped before and after optimizations where
#: XLA_FLAGS' --xla_dump_to says, as XLA names and writes them (so the capture has something to archive and index).
TRIVIAL_JOB = '''"""A job that only writes what XLA would dump for one tiny module."""
import os, re
folder = re.search(r"--xla_dump_to=(\\S+)", os.environ.get("XLA_FLAGS", "")).group(1)
os.makedirs(folder, exist_ok=True)
hlo = """HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

ENTRY main.3 {
  Arg_0.1 = f32[8]{0} parameter(0)
  ROOT tanh.2 = f32[8]{0} tanh(Arg_0.1), metadata={op_name="jit(f)/tanh" source_file="trivial.py" source_line=3}
}
"""
for stage in ("before_optimizations", "cpu_after_optimizations"):
    with open(os.path.join(folder, f"module_0000.jit_f.{stage}.txt"), "w") as out:
        out.write(hlo)
'''


@dataclass
class CaptureOutputs:
    """What the capture benchmark leaves for the others: a raw dump folder and a store holding its capture."""

    raw_dump: Path
    store: Path
    results: dict


def direct_env(spec: Path, out_dir: Path) -> dict[str, str]:
    """The environment a capture would give the job, with outputs under ``out_dir`` (from ``xlarun flags --json``)."""
    proc = subprocess.run(
        [*xlarun_argv(), "flags", str(spec), "--out", str(out_dir), "--json"], capture_output=True, text=True, check=True
    )
    delta = json.loads(proc.stdout)["env"]
    env = dict(os.environ)
    for key, value in delta.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _direct_run(spec: Path, size: WorkloadSize, out_dir: Path) -> float:
    env = direct_env(spec, out_dir)
    (out_dir / "dump").mkdir(parents=True, exist_ok=True)
    return run_command([sys.executable, str(SCRIPT), *size.script_args()], env=env, cwd=spec.parent)


def _captured_run(spec: Path, store: Path, env: dict[str, str] | None = None) -> float:
    return run_command([*xlarun_argv(), "capture", str(spec), "--store", str(store), "--quiet", "--top", "0"], env=env)


def measure_capture_overhead(spec: Path, size: WorkloadSize, workdir: Path, repeats: int) -> CaptureOutputs:
    """Time both ways ``repeats`` times, alternating which goes first; keep the first raw dump and store."""
    direct, captured = [], []
    for i in range(repeats):
        out_dir, store = workdir / f"direct-{i}", workdir / f"capture-store-{i}"
        order = [("direct", out_dir), ("capture", store)]
        if i % 2:
            order.reverse()
        for kind, target in order:
            if kind == "direct":
                direct.append(_direct_run(spec, size, target))
            else:
                captured.append(_captured_run(spec, target))
        if i:  # one of each is enough to keep
            shutil.rmtree(out_dir, ignore_errors=True)
            shutil.rmtree(store, ignore_errors=True)
    t_direct, t_capture = Timing(direct), Timing(captured)
    results = {
        "direct": t_direct.to_dict(),
        "capture": t_capture.to_dict(),
        "ratio": round(ratio(t_capture.median, t_direct.median), 4),
        "overhead_s": round(t_capture.median - t_direct.median, 4),
    }
    return CaptureOutputs(raw_dump=workdir / "direct-0" / "dump", store=workdir / "capture-store-0", results=results)


def trivial_spec(folder: Path) -> Path:
    """The trivial job and a spec capturing it (text dumps only); returns the spec's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trivial_job.py").write_text(TRIVIAL_JOB)
    spec = {
        "name": "bench-trivial",
        "script": "trivial_job.py",
        "framework": "jax",
        "timeout": "5m",
        "dump": {"formats": ["text"]},
    }
    path = folder / "trivial.yaml"
    path.write_text(json.dumps(spec, indent=2) + "\n")  # JSON is YAML
    return path


def run_timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """Run a command to completion; its wall time and the CPU time (user + system) of it and every process it
    waited for (the job, a probe), in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = run_command(argv, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure_fixed_cost(workdir: Path, repeats: int) -> dict:
    """The trivial job captured and run directly, ``repeats`` times each, alternating which goes first (one
    untimed round first: the bytecode cache and the page cache warm); the fixed cost is the difference of medians,
    in wall time and in CPU time. Beside them, the floor no capture can go under: ``python -c pass`` and the
    start-up of the stack xlarun is fixed to (typer, and a pydantic model validated), whole processes, so that
    ``floor_ratio_cpu`` (the fixed cost over that floor) compares one extra Python process with another.
    Everything runs with Python's bytecode cache on, as installed software runs (:func:`cli_env`)."""
    spec = trivial_spec(workdir / "trivial")
    cached = cli_env(workdir)
    out_dir, store = workdir / "trivial" / "direct", workdir / "trivial" / "store"  # emptied after each round
    env = direct_env(spec, out_dir)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = cached["PYTHONPYCACHEPREFIX"]
    capture_argv = [*xlarun_argv(), "capture", str(spec), "--store", str(store), "--quiet", "--top", "0"]
    sides: list[tuple[list[tuple[float, float]], Callable[[], tuple[float, float]]]] = [
        ([], partial(run_timed, [sys.executable, str(spec.parent / "trivial_job.py")], env=env, cwd=spec.parent)),
        ([], partial(run_timed, capture_argv, env=cached)),
        ([], partial(run_timed, [sys.executable, "-c", "pass"], env=cached)),
        ([], partial(run_timed, [sys.executable, "-c", TYPER_AND_PYDANTIC_START], env=cached)),
    ]
    for i in range(repeats + 1):
        for samples, timed in sides[:: -1 if i % 2 else 1]:
            took = timed()
            if i:
                samples.append(took)
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
    (direct, _), (captured, _), (bare, _), (stack, _) = sides
    walls = [Timing([w for w, _ in side]) for side in (direct, captured, bare, stack)]
    cpus = [Timing([c for _, c in side]) for side in (direct, captured, bare, stack)]
    t_direct, t_capture, t_bare, t_stack = walls
    c_direct, c_capture, _c_bare, c_stack = cpus
    fixed_cpu = c_capture.median - c_direct.median
    return {
        "direct": t_direct.to_dict(),
        "capture": t_capture.to_dict(),
        "fixed_cost_s": round(t_capture.median - t_direct.median, 4),
        "fixed_cost_cpu_s": round(fixed_cpu, 4),
        # what the stack xlarun is fixed to costs any CLI before its first line: the fixed cost cannot be less
        "python_c_pass": t_bare.to_dict(),
        "typer_and_pydantic": t_stack.to_dict(),
        "stack_floor_s": round(t_stack.median - t_bare.median, 4),
        "cpu": {
            name: timing.to_dict()
            for name, timing in zip(("direct", "capture", "python_c_pass", "typer_and_pydantic"), cpus, strict=True)
        },
        # the fixed cost (one extra process: xlarun's) over one process that imports typer and validates a model
        "floor_ratio_wall": round(ratio(t_capture.median - t_direct.median, t_stack.median), 3),
        "floor_ratio_cpu": round(ratio(fixed_cpu, c_stack.median), 3),
        "load_average": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.capture_overhead [--repeats N]``: capture's fixed cost beside its floor, printed as JSON."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="xlarun-fixed-cost-") as tmp:
        results = measure_fixed_cost(Path(tmp), args.repeats)
    print(json.dumps(results, indent=2))
    print(
        f"fixed cost {results['fixed_cost_s'] * 1000:.0f} ms wall, {results['fixed_cost_cpu_s'] * 1000:.0f} ms CPU; "
        f"floor (typer + pydantic) {results['typer_and_pydantic']['median_s'] * 1000:.0f} ms wall, "
        f"{results['cpu']['typer_and_pydantic']['median_s'] * 1000:.0f} ms CPU; ratio wall "
        f"{results['floor_ratio_wall']:.2f}x, CPU {results['floor_ratio_cpu']:.2f}x; load {results['load_average']}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
