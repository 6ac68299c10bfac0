"""``python -m bench``: run every benchmark, print the table, write the JSON."""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .archive import measure_archive
from .capture_overhead import measure_capture_overhead, measure_fixed_cost
from .navigation import measure_navigation
from .render import measure_sizes
from .replay import finish_replay, start_replay
from .report import build_rows, format_table, targets
from .results_files import add_output_options, output_path, write_results
from .scale import measure_scale
from .search import measure_search
from .synthetic import build_synthetic_store
from .workloads import PASS_RE, SIZES, write_spec


@dataclass(frozen=True)
class Plan:
    """How many repeats, runs and nodes a mode uses."""

    capture_repeats: int  # the large workload, captured and run directly: it makes the dump the archive section archives
    fixed_cost_repeats: int  # the trivial job, captured and run directly: capture's fixed cost
    archive_repeats: int
    cli_repeats: int
    synthetic_runs: int
    scale: str  # store sizes the reading commands are timed at (bench/scale.py)
    scale_repeats: int
    render: str  # instructions of the synthetic modules drawn (bench/render.py)
    render_repeats: int


# quick: one small store and one small graph, so that the suite's smoke test stays short
QUICK = Plan(1, 3, 1, 3, 12, scale="1000", scale_repeats=1, render="100", render_repeats=1)
FULL = Plan(2, 9, 5, 7, 120, scale="10000,100000", scale_repeats=5, render="1000,5000,20000", render_repeats=3)
#: plain dot is stopped after this many seconds: the render target (bench/render.py's TARGET_S)
PLAIN_DOT_TIMEOUT_S = 30.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="xlarun against what users would do instead, side by side, in one run."
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode for the test suite: small workload, one repeat, 12 runs")
    parser.add_argument("--size", choices=sorted(SIZES), help="workload size (default: small with --quick, else large)")
    add_output_options(parser, "main")
    parser.add_argument("--runs", type=int, help="runs in the synthetic store (default 12 quick, 120 full)")
    parser.add_argument(
        "--scale",
        help="store sizes (runs) the reading commands are timed at, comma-separated; '' for none (default 1000 quick, 10000,100000 full)",
    )
    parser.add_argument(
        "--render",
        help="instructions of the synthetic modules drawn, comma-separated; '' for none (default 100 quick, 1000,5000,20000 full)",
    )
    parser.add_argument("--workdir", type=Path, help="keep the workloads and stores here (default: a temporary folder, removed)")
    return parser.parse_args(argv)


def _sizes(given: str | None, default: str) -> list[int]:
    return [int(n) for n in (default if given is None else given).split(",") if n.strip()]


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict:
    plan = QUICK if args.quick else FULL
    size = SIZES[args.size or ("small" if args.quick else "large")]
    n_runs = args.runs or plan.synthetic_runs
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="xlarun-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "size": size.name,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": _cpus(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "workload": {
            "layers": size.layers,
            "d_model": size.d_model,
            "variants": size.variants,
            "eval_step": int(size.eval_step),
            "formats": list(size.formats),
            "host_init": int(size.host_init),
            "pass_re": PASS_RE,
            "pipeline_re": size.pipeline_re,
        },
    }
    scale_sizes, render_sizes = _sizes(args.scale, plan.scale), _sizes(args.render, plan.render)
    replay = start_replay(quick=args.quick, overlapped=True) if args.quick else None  # quick: keep the smoke test short
    try:
        spec = write_spec(size, workdir / "spec")
        _log(f"capture overhead: {size.name} workload, {plan.capture_repeats} repeat(s) each way")
        captured = measure_capture_overhead(spec, size, workdir, plan.capture_repeats)
        results["capture"] = captured.results
        _log(f"capture's fixed cost: a trivial job, {plan.fixed_cost_repeats} repeat(s) each way")
        results["capture"]["trivial"] = measure_fixed_cost(workdir, plan.fixed_cost_repeats)
        _log("archive: xlarun store vs tar czf / tar zstd --long / cat")
        results["archive"], archived = measure_archive(captured.raw_dump, workdir, plan.archive_repeats)
        results["workload"].update(files=results["archive"]["raw_files"], bytes=results["archive"]["raw_bytes"])
        _log(f"synthetic store: growing to {n_runs} runs")
        synthetic = build_synthetic_store(archived.store, archived.run_id, captured.raw_dump, workdir, n_runs)
        results["synthetic_store"] = synthetic.results
        synthetic.store.close()
        _log("search: xlarun find vs rg -l")
        results["search"] = measure_search(synthetic, plan.cli_repeats, workdir)
        _log("navigation: modules / show / cat / --help")
        results["navigation"] = measure_navigation(synthetic, plan.cli_repeats, workdir, everything=not args.quick)
        synthetic.store.close()
        if scale_sizes:
            _log(f"scale: reading commands on stores of {', '.join(map(str, scale_sizes))} runs")
            shutil.rmtree(workdir / "scale", ignore_errors=True)  # what a stopped run left
            results["scale"] = measure_scale(scale_sizes, plan.scale_repeats, workdir / "scale")
            shutil.rmtree(workdir / "scale", ignore_errors=True)  # 100,000 run folders: not kept
        if render_sizes:
            _log(f"render: synthetic modules of {', '.join(map(str, render_sizes))} instructions, against plain dot")
            results["render"] = measure_sizes(render_sizes, plan.render_repeats, PLAIN_DOT_TIMEOUT_S)
        _log("replay: bench/replay_vs_jit.py")
        results["replay"] = finish_replay(replay or start_replay(quick=False, overlapped=False))
    finally:
        if replay is not None and replay.process is not None and replay.process.poll() is None:
            replay.process.kill()  # only when another section failed before the replay was collected
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["total_s"] = round(time.perf_counter() - started, 2)
    results["targets"] = targets(build_rows(results))
    return results


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(args)
    written = write_results(output_path(args, "main"), results)
    meta = results["meta"]
    print(
        f"xlarun benchmarks: {meta['mode']} mode, {meta['size']} workload ({results['workload']['files']} files, "
        f"{results['workload']['bytes'] / 1e6:.0f} MB), {meta['cpus']} CPUs, {meta['total_s']:.0f} s; medians over repeats"
    )
    print(format_table(build_rows(results)))
    print(f"written to {written}")
    if not results["replay"].get("ok"):
        print(f"replay: {results['replay']['note']}")
    elif results["replay"].get("overlapped_other_work"):
        print("replay: quick mode ran it alongside the other sections; run the full mode for clean replay numbers")
    met = [t for t in results["targets"] if t["met"] is not None]
    print(f"targets met: {sum(1 for t in met if t['met'])}/{len(met)}; JSON in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
