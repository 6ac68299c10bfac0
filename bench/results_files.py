"""Where a benchmark writes its figures: ``bench/out/NAME.json`` (not committed) unless ``--record`` is given, which
writes ``bench/results/NAME.json``, the committed file the documentation's numbers are made from
(``python scripts/docs.py write`` turns them into docs/benchmarks.md). Each file says when, where and from which
commit it was measured, and how loaded the machine was."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
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
