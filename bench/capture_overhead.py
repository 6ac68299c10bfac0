"""Capture overhead: ``xlarun capture SPEC`` against running the same script directly, with the
environment ``xlarun flags SPEC --out DIR`` prints, interleaved so drift hits both alike."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .timing import Timing, ratio, run_command, xlarun_argv
from .workloads import SCRIPT, WorkloadSize


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


def _captured_run(spec: Path, store: Path) -> float:
    return run_command([*xlarun_argv(), "capture", str(spec), "--store", str(store), "--quiet", "--top", "0"])


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
