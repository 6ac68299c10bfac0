"""Run every xlarun feature on every program of examples/zoo and print the table (programs x features).

    PYTHONPATH=src .venv/bin/python scripts/zoo.py [--only NAME ...] [--json bench/zoo-results.json]

Each program is captured twice into a fresh store (run A and run B, for diff); then on run A's step module:
modules (the program's own step listed first), show (its pass timeline), replay, render, diff (A vs B),
bisect (no culprit expected: the programs are stable), bundle -> import -> replay, and report.
A cell is `ok`, `refused` (a documented refusal, said in one line), `FAIL` (with the command's last error line in the
JSON), or `-` (skipped: an earlier step failed).
The results go to a JSON file; the markdown table (for the README) is printed and made from that file.

Measured (issue 33): each program is captured a third time with `profile: true` and without snapshots or per-pass
dumps (a snapshot is written at every execution, which would be timed with the step). From it: the step's time per
execution (`modules --by time`: its executions after the first, else the first), the share of that time its ops fill
(its ops' self times added up, per device, over the wall time XLA's runtime took to execute it, the
`ThunkExecutor::Execute` event around its ops, and over the wall time of the last call of the jitted step as jax's
profiler saw it from Python, `PjitFunction(STEP)`, both read from the trace here; a call during which something
compiled is not counted), and its peak memory (`memory`); for a JAX program,
the peak is held against jax's own `Compiled.memory_analysis()` of the step (scripts/zoo_memory_analysis.py):
arguments + outputs + temporaries - aliased. `--measure-only` redoes only this part, into the existing JSON.
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

import yaml

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
    "sharded_drift": "drift_step",
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
    # by number: a program may compile its step twice (sharded_drift: on 1 device and on 8), under one name
    number = f"module_{next(m['module_id'] for m in modules if m['name'] == step):04d}"
    ref = f"{run_a}/{number}"

    rc, out, err = runner.xlarun("show", ref)
    cells["show"] = cell(rc == 0 and "pass" in out.lower(), rc, out, err)

    rc, out, err = runner.xlarun("replay", ref)
    compared = next((line.strip() for line in out.splitlines() if "compared" in line), "")
    verdict = next((line.strip() for line in out.splitlines() if line.strip().startswith(("match", "mismatch"))), "")
    cells["replay"] = cell(rc == 0, rc, out, err, note=f"{verdict or last_line(out)}; {compared}" if rc == 0 else "")

    svg = work / f"{name}.svg"
    rc, out, err = runner.xlarun("render", ref, "-o", str(svg))
    cells["render"] = cell(rc == 0 and svg.is_file() and svg.stat().st_size > 0, rc, out, err)

    rc, out, err = runner.xlarun("diff", ref, f"{run_b}/{number}", "--summary")
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


def profiled_spec(name: str, work: Path) -> Path:
    """The program's spec with `profile: true`, without snapshots and per-pass dumps (they would be timed too)."""
    spec = yaml.safe_load((ZOO / name / "spec.yaml").read_text())
    spec["script"] = str(ZOO / name / spec["script"])
    spec["profile"] = True
    spec["dump"]["snapshots"] = False
    spec["dump"].pop("pass_re", None)
    out = work / f"{name}-profiled.yaml"
    out.write_text(yaml.safe_dump(spec))
    return out


def jax_memory_analysis(name: str, timeout: float) -> dict | None:
    """jax's `Compiled.memory_analysis()` of the program's step (None for a TF program, or when it cannot be had)."""
    spec = yaml.safe_load((ZOO / name / "spec.yaml").read_text())
    if spec.get("framework") != "jax":
        return None
    flags = " ".join(spec.get("dump", {}).get("extra_xla_flags", []))
    env = dict(os.environ, XLA_FLAGS=flags, KERAS_BACKEND="jax")
    cmd = [sys.executable, str(ROOT / "scripts" / "zoo_memory_analysis.py"), str(ZOO / name / spec["script"]), STEPS[name]]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    return None if "error" in found else found


def measure_program(name: str, runner: Runner, work: Path) -> dict:
    """The step's time per execution, ops' share of its wall time and peak memory, from a profiled capture."""
    rc, out, err = runner.xlarun("capture", str(profiled_spec(name, work)), "--json", "-q", "--top", "0")
    try:
        run = json.loads(out)["run_id"]
    except (ValueError, KeyError):
        return {"error": last_line(err, out)}
    rc, out, err = runner.xlarun("modules", run, "--by", "time", "--json")
    if rc != 0:
        return {"error": last_line(err, out), "run": run}
    timed = json.loads(out)["modules"]
    step = next((m for m in timed if STEPS[name] in m["name"]), None)
    if step is None:
        return {"error": f"no module named like {STEPS[name]!r} ran", "run": run}
    time_ = step["time"]
    rc, out, err = runner.xlarun("memory", step["ref"], "--json")
    memory = json.loads(out) if rc == 0 else {}
    devices = max(1, time_["devices"])
    # busy time per execution and device: the executions after the first (the first alone when it ran once)
    step_s = time_["steady_mean_ns"] / devices / 1e9
    call_s, execution_s = trace_walls(runner, run, STEPS[name], work)
    result = {
        "run": run,
        "module": step["name"],
        "executions": time_["executions"],
        "step_s": step_s,
        "first_s": time_["first_ns"] / devices / 1e9,
        "ops_fill": time_["busy_ns"] / devices / time_["wall_ns"] if time_["wall_ns"] else None,
        "call_s": call_s,
        "ops_over_call": step_s / call_s if call_s else None,
        "execution_s": execution_s,
        "ops_over_execution": step_s / execution_s if execution_s else None,
        "devices": devices,
        "peak_bytes": memory.get("peak_bytes"),
    }
    jax_says = jax_memory_analysis(name, runner.timeout)
    if jax_says is not None:
        expected = jax_says["arguments"] + jax_says["outputs"] + jax_says["temporaries"] - jax_says["aliased"]
        result["jax_memory_analysis"] = jax_says | {"peak_bytes": expected}
        result["peak_matches_jax"] = expected == memory.get("peak_bytes")
    return result


def trace_walls(runner: Runner, run: str, step: str, work: Path) -> tuple[float | None, float | None]:
    """Two wall times of the step, read from the archived trace with jax's ProfileData, independently of xlarun's
    index (None, None for a TF program, whose trace has neither):

    - the last call of the jitted step as jax's profiler saw it from Python (the host event `PjitFunction(STEP)`:
      dispatch, the execution and its wait; a call that compiled is left out);
    - the step's execution by XLA's CPU runtime: for each execution (`run_id`) and thread that ran its ops, the
      `ThunkExecutor::Execute` event that encloses them; the mean over the executions after the first (all of them
      when it ran once), so per device for a sharded step."""
    folder = work / f"export-{run}"
    rc, _, _ = runner.xlarun("export", run, str(folder))
    traces = sorted(folder.rglob("*.xplane.pb")) if rc == 0 else []
    if not traces:
        return None, None
    from jax.profiler import ProfileData

    events, ops = [], {}
    for trace in traces:
        for plane in ProfileData.from_file(str(trace)).planes:
            for line in plane.lines:
                for event in line.events:
                    start, end = event.start_ns, event.start_ns + event.duration_ns
                    events.append((event.name, start, end))
                    stats = dict(event.stats)
                    if stats.get("hlo_module") == f"jit_{step}" and "hlo_op" in stats:
                        ops.setdefault((stats.get("run_id"), line.name), []).append((start, end))
    compiles = [(start, end) for name, start, end in events if "Compile" in name]
    calls = [
        (start, end)
        for name, start, end in events
        if name == f"PjitFunction({step})" and not any(s < end and start < e for s, e in compiles)
    ]  # a call that compiled (its first, or a recompile) times the compiler, not the step
    call_s = (max(calls)[1] - max(calls)[0]) / 1e9 if calls else None
    executors = [(start, end) for name, start, end in events if name == "ThunkExecutor::Execute"]
    walls: dict = {}
    for (execution, _line), spans in ops.items():
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        enclosing = [e - s for s, e in executors if s <= first and last <= e]
        if enclosing:
            walls.setdefault(execution, (first, []))[1].append(min(enclosing))
    ordered = [w for _first, w in sorted(walls.values())]
    steady = [wall for walls_of in (ordered[1:] or ordered) for wall in walls_of]
    return call_s, (sum(steady) / len(steady) / 1e9 if steady else None)


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _duration(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def measured_table(results: dict) -> str:
    """The step's time and memory per program (the `measured` part of the results), as a markdown table."""
    rows = [(name, prog["measured"]) for name, prog in results["programs"].items() if "measured" in prog]
    if not rows:
        return ""
    lines = [
        f"Measured ({results.get('measured_date', results['date'])}; `profile: true`, no snapshots):",
        "",
        "| program | step | time per execution | first execution | executions | op time / execution wall "
        "| op time / call wall | peak | jax memory_analysis |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in rows:
        if "error" in m:
            lines.append(f"| {name} | FAIL: {m['error'][:80]} | | | | | | | |")
            continue
        jax_cell = "- (TF)"
        if "jax_memory_analysis" in m:
            ja = m["jax_memory_analysis"]
            jax_cell = ("=" if m["peak_matches_jax"] else "DIFFERS: ") + f" {ja['peak_bytes']} B"
        ratio = f"{m['ops_over_call']:.2f} of {_duration(m['call_s'])}" if m.get("ops_over_call") else "-"
        in_execution = f"{m['ops_over_execution']:.2f} of {_duration(m['execution_s'])}" if m.get("ops_over_execution") else "-"
        devices = f" ({m['devices']} devices; times per device)" if m["devices"] > 1 else ""
        lines.append(
            f"| {name} | {m['module'].split('__')[0]}{devices} | {_duration(m['step_s'])} | {_duration(m['first_s'])} | {m['executions']} "
            f"| {in_execution} | {ratio} | {_bytes(m['peak_bytes'])} | {jax_cell} |"
        )
    lines += [
        "",
        "Time per execution: the step's ops' self times added up, per execution after the first (the first carries",
        "one-time set-up), per device for a sharded step. Op time / execution wall: that over the wall time XLA's CPU",
        "runtime took to execute the step (the `ThunkExecutor::Execute` event enclosing its ops, per execution after the",
        "first and per device, read from the trace with jax's ProfileData); the rest is the executor's own work between",
        "thunks; `-` where no such event encloses them (bf16's small step runs inline on the calling thread, the",
        "8-device steps per device outside it). Op time / call",
        "wall: that over the wall time of the step's last",
        "call from Python without a compile in it (jax's `PjitFunction(STEP)` host event, read from the trace); the rest",
        "is dispatch, and above 1 the call returned before its execution ended (jax dispatches asynchronously); `-`: a TF",
        "program, or no such call. jax memory_analysis: arguments + outputs + temporaries - aliased of",
        "`Compiled.memory_analysis()`, `=` where it is the peak `xlarun memory` reports. One loaded 2-CPU machine.",
    ]
    return "\n".join(lines)


def _shown(result: dict) -> str:
    return "ok" if result["ok"] else ("refused" if result.get("refused") else "FAIL")


def table(results: dict) -> str:
    vers = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    later = [
        f"{name} on {p['date']}" for name, p in results["programs"].items() if p.get("date", results["date"]) != results["date"]
    ]
    when = results["date"] + (f", {', '.join(later)}" if later else "")
    lines = [f"Zoo ({when}; {vers})", "", "| program | " + " | ".join(FEATURES) + " |"]
    lines.append("|" + "---|" * (len(FEATURES) + 1))
    for name, prog in results["programs"].items():
        row = [_shown(prog["cells"][f]) if f in prog["cells"] else "-" for f in FEATURES]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def tables(results: dict) -> str:
    """The feature table and the measured one (bench/zoo.md; the README shows the first)."""
    measured = measured_table(results)
    return table(results) + (f"\n\n{measured}" if measured else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="Only these programs (folder names under examples/zoo).")
    parser.add_argument("--json", default=str(ROOT / "bench" / "zoo-results.json"), help="Where to write the results.")
    parser.add_argument("--timeout", type=float, default=300, help="Seconds one xlarun command may take.")
    parser.add_argument("--table-only", action="store_true", help="Print the table from --json without running.")
    parser.add_argument(
        "--measure-only", action="store_true", help="Only the profiled capture (time, peak), into the existing --json."
    )
    args = parser.parse_args()
    out = Path(args.json)
    if args.table_only:
        print(tables(json.loads(out.read_text())))
        return 0
    names = args.only or list(STEPS)
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        print(f"zoo: unknown program(s) {', '.join(unknown)}; known: {', '.join(STEPS)}", file=sys.stderr)
        return 2
    # --only and --measure-only update those programs in the existing results; a full run starts afresh
    previous = json.loads(out.read_text()) if out.exists() and (args.only or args.measure_only) else None
    results = previous or {"date": time.strftime("%Y-%m-%d"), "versions": versions(), "programs": {}}
    if previous is None:
        results["date"], results["versions"] = time.strftime("%Y-%m-%d"), versions()
    results["measured_date"] = time.strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory(prefix="xlarun-zoo-") as tmp:
        runner = Runner(Path(tmp) / "store", args.timeout)
        for name in names:
            print(f"zoo: {name} ...", file=sys.stderr, flush=True)
            if not args.measure_only:
                results["programs"][name] = run_program(name, runner, Path(tmp)) | {"date": time.strftime("%Y-%m-%d")}
                bad = [f for f, c in results["programs"][name]["cells"].items() if not c["ok"]]
                print(f"zoo: {name} done in {results['programs'][name]['seconds']}s; failing: {bad or 'none'}", file=sys.stderr)
            measured = measure_program(name, runner, Path(tmp))
            results["programs"].setdefault(name, {"cells": {}})["measured"] = measured
            print(f"zoo: {name} measured: {measured}", file=sys.stderr, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(tables(results))
    return 0 if all(c["ok"] for p in results["programs"].values() for c in p["cells"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
