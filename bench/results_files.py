"""Where a benchmark writes its figures: ``bench/out/NAME.json`` (not committed) unless ``--record`` is given, which
writes ``bench/results/NAME.json``, the committed file the documentation's numbers are made from
(``python scripts/docs.py write`` turns them into docs/benchmarks.md). Each file says when, where and from which
commit it was measured, and how loaded the machine was."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "bench" / "results"
SCRATCH = REPO / "bench" / "out"


def add_output_options(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--out", type=Path, help=f"where to write the JSON (default bench/out/{name}.json)")
    parser.add_argument(
        "--record", action="store_true", help=f"write bench/results/{name}.json, the committed figures the docs are made from"
    )


def output_path(args: argparse.Namespace, name: str) -> Path:
    if args.out is not None:
        return args.out
    return (RECORDED if args.record else SCRATCH) / f"{name}.json"


def measured_on() -> dict:
    """When, where and at which commit: stamped into every results file."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit or None,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def write_results(path: Path, results: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"measured_on": measured_on(), **results}, indent=2) + "\n")
    return path


def load_recorded(name: str) -> dict | None:
    path = RECORDED / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_at_store_sizes(
    argv: list[str] | None,
    name: str,
    description: str,
    default_runs: str,
    measure: Callable[[list[int], int, Path], dict],
    repeats: tuple[str, int] = ("--repeats", 5),
) -> int:
    """The command line of a benchmark measured at several store sizes (``--runs 1000,10000``): ``measure(sizes,
    repeats, workdir)`` in ``--workdir`` (kept) or a temporary folder (removed), its figures written as above."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description)
    parser.add_argument("--runs", default=default_runs, help="store sizes, comma-separated")
    parser.add_argument(repeats[0], dest="repeats", metavar="N", type=int, default=repeats[1])
    parser.add_argument("--workdir", type=Path, help="keep the stores here (default: a temporary folder, removed)")
    add_output_options(parser, name)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"xlarun-bench-{name}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = measure([int(n) for n in args.runs.split(",")], args.repeats, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"written to {write_results(output_path(args, name), results)}")
    return 0
