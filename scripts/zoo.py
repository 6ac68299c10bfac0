"""Run every xlarun feature on every program of examples/zoo and print the table (programs x features).

    PYTHONPATH=src .venv/bin/python scripts/zoo.py [--only NAME ...] [--json bench/zoo-results.json]

Each program is captured twice into a fresh store (run A and run B, for diff); then on run A's step module:
modules (the program's own step listed first), show (its pass timeline), replay, render, diff (A vs B),
bisect (no culprit expected: the programs are stable), bundle -> import -> replay, and report.
A cell is `ok`, `refused` (a documented refusal, said in one line), `FAIL` (with the command's last error line in the
JSON), or `-` (skipped: an earlier step failed).
The results go to a JSON file; the markdown table (for the README) is printed and made from that file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "examples" / "zoo"

# program folder -> the name of its own step (what `modules` must list first)
STEPS = {
    "flax_nnx": "train_step",
    "equinox": "equinox_step",
    "keras_jax": "train_step",
    "tf2_conv": "conv_train_step",
    "tf1_autojit": "cluster",
    "scan_remat": "scan_step",
    "bf16": "bf16_step",
    "sharded": "sharded_step",
    "logexp": "logexp",
}
#: Programs whose bisection has a known answer other than "nothing moves": a culprit that is true (bf16 dots
#: compile on CPU only through float-normalization-bf16, whose excess precision moves the step's numbers: bisect
#: names it as a pass that must stay on), or a documented refusal (("refused", words of its one-line message)).
#: The sharded program is bisected on its 8 devices: nothing moves.
EXPECTED_BISECT = {
    "bf16": ("culprit", "float-normalization-bf16"),
}
FEATURES = ["capture", "modules", "show", "replay", "render", "diff", "bisect", "bundle/import/replay", "report"]
LIBRARIES = ["jax", "jaxlib", "flax", "optax", "equinox", "keras", "tensorflow"]


def versions() -> dict[str, str]:
    found = {}
    for lib in LIBRARIES:
        found[lib] = "missing"
        for dist in (lib, f"{lib}-cpu"):
            try:
                found[lib] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


class Runner:
    def __init__(self, store: Path, timeout: float):
        self.store = store
        self.timeout = timeout

    def xlarun(self, *args: str) -> tuple[int, str, str]:
        env = dict(os.environ, XLARUN_STORE=str(self.store), COLUMNS="200")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-m", "xlarun", *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=self.timeout, cwd=self.store.parent)
        except subprocess.TimeoutExpired:
            return 124, "", f"timed out after {self.timeout:.0f}s"
        return proc.returncode, proc.stdout, proc.stderr


def last_line(*texts: str) -> str:
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def cell(ok: bool, rc: int, out: str, err: str, note: str = "") -> dict:
    return {"ok": ok, "rc": rc, "note": note or last_line(out if ok else err or out, "" if ok else out)}


def run_program(name: str, runner: Runner, work: Path) -> dict:
    spec = ZOO / name / "spec.yaml"
    want = STEPS[name]
    cells: dict[str, dict] = {}
    t0 = time.monotonic()
    runs = []
    for _ in range(2):
        rc, out, err = runner.xlarun("capture", str(spec), "--json", "-q", "--top", "0")
        try:
            result = json.loads(out)
        except ValueError:
            result = {}
        if rc != 0 or result.get("status") != "succeeded":
            cells["capture"] = cell(False, rc, out, err)
            return {"cells": cells, "seconds": round(time.monotonic() - t0, 1)}
        runs.append(result["run_id"])
    cells["capture"] = {"ok": True, "rc": 0, "note": f"runs {runs[0]} {runs[1]}"}
    run_a, run_b = runs

    rc, out, err = runner.xlarun("modules", run_a, "--json")
    modules = json.loads(out)["modules"] if rc == 0 else []
    names = [m["name"] for m in modules]
    first = names[0] if names else ""
    cells["modules"] = {"ok": want in first, "rc": rc, "note": f"first {first!r} of {len(names)}; want {want!r}"}
    step = next((n for n in names if want in n), first)
    if not step:
        return {"cells": cells, "seconds": round(time.monotonic() - t0, 1)}
    ref = f"{run_a}/{step}"

    rc, out, err = runner.xlarun("show", ref)
    cells["show"] = cell(rc == 0 and "pass" in out.lower(), rc, out, err)

    rc, out, err = runner.xlarun("replay", ref)
    compared = next((line.strip() for line in out.splitlines() if "compared" in line), "")
    verdict = next((line.strip() for line in out.splitlines() if line.strip().startswith(("match", "mismatch"))), "")
    cells["replay"] = cell(rc == 0, rc, out, err, note=f"{verdict or last_line(out)}; {compared}" if rc == 0 else "")

    svg = work / f"{name}.svg"
    rc, out, err = runner.xlarun("render", ref, "-o", str(svg))
    cells["render"] = cell(rc == 0 and svg.is_file() and svg.stat().st_size > 0, rc, out, err)

    rc, out, err = runner.xlarun("diff", ref, f"{run_b}/{step}", "--summary")
    cells["diff"] = cell(rc in (0, 1), rc, out, err)

    rc, out, err = runner.xlarun("bisect", ref, "-q")
    expected = EXPECTED_BISECT.get(name)
    if expected and expected[0] == "culprit":
        cells["bisect"] = cell(
            rc == 1 and f"culprit       {expected[1]}" in out, rc, out, err, f"culprit {expected[1]}, as expected"
        )
    elif expected:
        cells["bisect"] = cell(False, rc, out, err) | {"refused": rc == 2 and expected[1] in err}
    else:
        cells["bisect"] = cell(rc in (0, 1) and "culprit" not in out.lower().replace("no culprit", ""), rc, out, err)

    bundle = work / f"{name}.zip"
    rc, out, err = runner.xlarun("bundle", ref, "-o", str(bundle))
    if rc == 0:
        rc, out, err = runner.xlarun("import", str(bundle), "--name", f"imported-{name}", "--json")
        if rc == 0:
            imported = json.loads(out).get("run_id", f"imported-{name}")
            rc, out, err = runner.xlarun("replay", f"{imported}/{step}")
    cells["bundle/import/replay"] = cell(rc == 0, rc, out, err)

    rc, out, err = runner.xlarun("report", run_a, "-o", str(work / f"report-{name}"), "--no-graphs", "-q")
    cells["report"] = cell(rc == 0 and (work / f"report-{name}" / "index.html").is_file(), rc, out, err)
    return {"cells": cells, "step": step, "seconds": round(time.monotonic() - t0, 1)}


def _shown(result: dict) -> str:
    return "ok" if result["ok"] else ("refused" if result.get("refused") else "FAIL")


def table(results: dict) -> str:
    vers = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    lines = [f"Zoo ({results['date']}; {vers})", "", "| program | " + " | ".join(FEATURES) + " |"]
    lines.append("|" + "---|" * (len(FEATURES) + 1))
    for name, prog in results["programs"].items():
        row = [_shown(prog["cells"][f]) if f in prog["cells"] else "-" for f in FEATURES]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="Only these programs (folder names under examples/zoo).")
    parser.add_argument("--json", default=str(ROOT / "bench" / "zoo-results.json"), help="Where to write the results.")
    parser.add_argument("--timeout", type=float, default=300, help="Seconds one xlarun command may take.")
    parser.add_argument("--table-only", action="store_true", help="Print the table from --json without running.")
    args = parser.parse_args()
    out = Path(args.json)
    if args.table_only:
        print(table(json.loads(out.read_text())))
        return 0
    names = args.only or list(STEPS)
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        print(f"zoo: unknown program(s) {', '.join(unknown)}; known: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    results = {"date": time.strftime("%Y-%m-%d"), "versions": versions(), "programs": {}}
    with tempfile.TemporaryDirectory(prefix="xlarun-zoo-") as tmp:
        runner = Runner(Path(tmp) / "store", args.timeout)
        for name in names:
            print(f"zoo: {name} ...", file=sys.stderr, flush=True)
            results["programs"][name] = run_program(name, runner, Path(tmp))
            bad = [f for f, c in results["programs"][name]["cells"].items() if not c["ok"]]
            print(f"zoo: {name} done in {results['programs'][name]['seconds']}s; failing: {bad or 'none'}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    return 0 if all(c["ok"] for p in results["programs"].values() for c in p["cells"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
