"""``xlarun render`` on big graphs: synthetic HLO modules of 1,000, 5,000 and 20,000 instructions (bench/render_modules.py:
fusions, while loops, a long chain, a wide fan-out) and, when JAX is installed, the toy transformer's training step
(bench/workloads/transformer.py, 2 layers, dumped before and after optimizations).

    python -m bench.render [--sizes 1000,5000,20000] [--repeats 3] [--full-timeout 120] [--no-real] [--record]

Each render runs as a user runs it (a new ``xlarun render FILE`` process); its wall time and peak memory (the larger
of xlarun's process and dot's) are measured. Side by side: ``render`` as it is (the overview above 1,500 nodes), SVG
and PNG; ``render --full`` (every node, as on request); and plain ``dot -Tsvg`` on the DOT text ``render --full -f dot``
writes (the same graph and attributes, without xlarun's process). The full layouts run under ``--full-timeout`` seconds. Targets: any
module renders in seconds (here: under 30 s on this 2-CPU machine), a PNG at most 8,000 pixels a side, and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .render_modules import synthetic_module
from .results_files import add_output_options, output_path, write_results
from .timing import xlarun_argv
from .workloads import SCRIPT

TARGET_S = 30.0
PNG_MAX_PIXELS = 8000


def measured(argv: list[str], timeout_s: float) -> dict:
    """Run ``argv``; its wall seconds, peak RSS in MB (the process and its waited-for children), exit status and output
    (stdout and stderr together)."""
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = started + timeout_s
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _pid, status, usage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read().decode(errors="replace")
    # render's own time limit on graphviz (exit 3, 'took more than N s') counts as stopped too
    stopped = timed_out or (proc.returncode == 3 and "took more than" in output)
    return {
        "s": round(elapsed, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "exit": proc.returncode,
        "timed_out": stopped,
        "stderr": output,
    }


def render_case(path: Path, work: Path, repeats: int, full_timeout: float, full: bool = True) -> dict:
    """Every way of drawing one module file, timed (``full``: ``render --full`` too, beside plain dot)."""
    xlarun = xlarun_argv()
    row: dict = {}
    for fmt in ("svg", "png"):
        out = work / f"{path.stem}.{fmt}"
        runs = [measured([*xlarun, "render", str(path), "-o", str(out), "--timeout", "600"], 600) for _ in range(repeats)]
        last = runs[-1]
        row[fmt] = {
            "median_s": round(statistics.median(r["s"] for r in runs), 3),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "exit": last["exit"],
            "nodes": _nodes(last["stderr"]),
            "overview": "overview:" in last["stderr"],
            "condensed": "condensed to" in last["stderr"],
            "bytes": out.stat().st_size if out.exists() else None,
        }
        if fmt == "png" and out.exists():
            head = out.read_bytes()[:24]
            row[fmt]["pixels"] = [int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")]
            row[fmt]["scaling_said"] = "scaled down" in last["stderr"]
        if last["exit"] != 0:
            row[fmt]["error"] = last["stderr"].strip().splitlines()[-1:] or [""]
    if full:
        drawn = measured(
            [
                *xlarun,
                "render",
                str(path),
                "--full",
                "--limit",
                "0",
                "--timeout",
                str(full_timeout),
                "-o",
                str(work / "full.svg"),
            ],
            full_timeout + 60,
        )
        row["full_svg"] = _summary(drawn) | {"nodes": _nodes(drawn["stderr"])}
    dot_text = work / "full.dot"
    made = measured([*xlarun, "render", str(path), "--full", "--limit", "0", "-f", "dot", "-o", str(dot_text)], 600)
    row["full_nodes"] = _nodes(made["stderr"])
    if made["exit"] == 0:
        plain = measured([shutil.which("dot") or "dot", "-Tsvg", str(dot_text), "-o", str(work / "plain.svg")], full_timeout)
        row["plain_dot_svg"] = _summary(plain)
    return row


def _summary(result: dict) -> dict:
    out = {k: result[k] for k in ("s", "peak_rss_mb", "exit", "timed_out")}
    if result["exit"] != 0 and not result["timed_out"]:
        out["error"] = (result["stderr"].strip().splitlines() or [""])[-1][:200]
    return out


def _nodes(stderr: str) -> int | None:
    """The node count ``render`` reports ('wrote X: N nodes, ...')."""
    for line in stderr.splitlines():
        if ": " in line and " nodes," in line:
            try:
                return int(line.split(": ", 1)[1].split(" nodes,", 1)[0].strip())
            except ValueError:
                return None
    return None


def measure_sizes(sizes: list[int], repeats: int, plain_timeout: float) -> dict:
    """``python -m bench``'s part: the mixed synthetic module at each size, drawn by ``render`` (SVG and PNG) and by
    plain ``dot -Tsvg`` (stopped after ``plain_timeout`` seconds); no ``--full`` render, no transformer step."""
    work = Path(tempfile.mkdtemp(prefix="xlarun-bench-render-"))
    results: dict = {"target_s": TARGET_S, "png_max_pixels": PNG_MAX_PIXELS, "full_timeout_s": plain_timeout, "cases": []}
    try:
        for n in sorted(sizes):
            path = work / f"module_{n:04d}.synthetic_mixed_{n}.before_optimizations.txt"
            path.write_text(synthetic_module(n, "mixed"))
            row = {"case": f"synthetic mixed, {n} instructions", "instructions": n}
            row |= render_case(path, work, repeats, plain_timeout, full=False)
            row["met"] = _met(row)
            results["cases"].append(row)
            print(f"[render] {format_row(row)}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _met(row: dict) -> bool:
    """Both drawings within the time target, the PNG within the pixel cap."""
    fast = all(row[f]["exit"] == 0 and row[f]["median_s"] <= TARGET_S for f in ("svg", "png"))
    return fast and bool(row["png"].get("pixels") and max(row["png"]["pixels"]) <= PNG_MAX_PIXELS)


def real_modules(work: Path, stages: tuple[str, ...] = ("before_optimizations", "after_optimizations")) -> list[tuple[str, Path]]:
    """The toy transformer's training step (2 layers), before and after optimizations; none without JAX."""
    dump = work / "transformer-dump"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump}", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--layers", "2", "--host-init"], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not dump.exists():
        print(f"[render] no transformer step (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return []
    found = []
    for stage in stages:
        every = list(dump.glob(f"*{stage}.txt"))  # on CPU: cpu_after_optimizations
        files = [p for p in every if "train" in p.name or "step" in p.name] or every
        if files:
            found.append((f"transformer step, {stage.replace('_', ' ')}", max(files, key=lambda p: p.stat().st_size)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="1000,5000,20000", help="instructions per synthetic module, comma-separated ('' for none)"
    )
    parser.add_argument(
        "--shapes", default="mixed,chain,fanout", help="module shapes (bench/render_modules.py): the first at every size"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full-timeout", type=float, default=120.0, help="seconds the full layouts may take")
    parser.add_argument("--no-real", action="store_true", help="skip the transformer step (needs JAX)")
    parser.add_argument("--stages", default="before_optimizations,after_optimizations", help="the transformer step's dumps drawn")
    parser.add_argument("--append", action="store_true", help="add these cases to the output file's (its stamp kept too)")
    add_output_options(parser, "render")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="xlarun-bench-render-"))
    results: dict = {"target_s": TARGET_S, "png_max_pixels": PNG_MAX_PIXELS, "full_timeout_s": args.full_timeout, "cases": []}
    started = time.perf_counter()
    earlier = (
        json.loads(output_path(args, "render").read_text()) if args.append and output_path(args, "render").exists() else None
    )
    if earlier:
        results["cases"] = earlier["cases"]
        results["earlier_run"] = earlier.get("measured_on")
    try:
        sizes = sorted(int(x) for x in args.sizes.split(",") if x.strip())
        shapes = args.shapes.split(",")  # the first at every size, the others at the largest
        cases = [(f"synthetic {shapes[0]}, {n} instructions", n, shapes[0]) for n in sizes]
        cases += [(f"synthetic {shape}, {sizes[-1]} instructions", sizes[-1], shape) for shape in shapes[1:] if sizes]
        todo: list[tuple[str, Path, int | None]] = []
        for label, n, shape in cases:
            path = work / f"module_{len(todo):04d}.synthetic_{shape}_{n}.before_optimizations.txt"
            path.write_text(synthetic_module(n, shape))
            todo.append((label, path, n))
        if not args.no_real:  # first: the module users have
            todo = [(label, path, None) for label, path in real_modules(work, tuple(args.stages.split(",")))] + todo
        for label, path, n in todo:
            print(f"[render] {label}...", file=sys.stderr, flush=True)
            row = {"case": label, "instructions": n or _instructions(path)} | render_case(
                path, work, args.repeats, args.full_timeout
            )
            row["met"] = _met(row)
            results["cases"].append(row)
            print(format_row(row), flush=True)
            results["total_s"] = round(time.perf_counter() - started, 1)
            write_results(output_path(args, "render"), results)  # after each case: what is done survives a stop
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["total_s"] = round(time.perf_counter() - started, 1)
    print(f"written to {write_results(output_path(args, 'render'), results)}")
    return 0


def _instructions(path: Path) -> int:
    from xlarun.hlo import parse_hlo_text

    return parse_hlo_text(path.read_text()).instruction_count()


def _cell(result: dict | None) -> str:
    if not result:
        return "not run"
    if result.get("timed_out"):
        return f"> {result['s']:.0f} s (stopped)"
    if result.get("exit"):
        return f"exit {result['exit']}"
    return f"{result.get('median_s', result.get('s')):.1f} s, {result['peak_rss_mb']:.0f} MB"


def format_row(row: dict) -> str:
    png = row["png"]
    pixels = "x".join(map(str, png.get("pixels") or [])) or "-"
    return (
        f"{row['case']}: render {row['svg'].get('nodes')} nodes svg {_cell(row['svg'])}, png {_cell(png)} ({pixels} px, "
        f"scaling said: {png.get('scaling_said')}); --full ({row.get('full_nodes')} nodes) {_cell(row.get('full_svg'))}; "
        f"plain dot {_cell(row.get('plain_dot_svg'))}; target met: {row['met']}"
    )


def format_markdown(results: dict) -> str:
    """The docs' table: one row per module."""
    lines = [
        "| module | instructions | render: nodes drawn | svg | png (pixels, scaling said) | --full: nodes, svg | plain dot -Tsvg | target met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results["cases"]:
        png = row["png"]
        pixels = "x".join(map(str, png.get("pixels") or [])) or "-"
        lines.append(
            f"| {row['case']} | {row['instructions']} | {row['svg'].get('nodes')}"
            f"{' (condensed)' if row['svg'].get('condensed') else ' (overview)' if row['svg'].get('overview') else ''} | "
            f"{_cell(row['svg'])} | {_cell(png)} ({pixels}, {'yes' if png.get('scaling_said') else 'no'}) | "
            f"{row.get('full_nodes')}, {_cell(row.get('full_svg'))} | {_cell(row.get('plain_dot_svg'))} | "
            f"{'yes' if row['met'] else 'no'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
