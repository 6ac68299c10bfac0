"""Replay: the PJRT engine against ``jax.jit``, from ``bench/replay_vs_jit.py`` when that file exists.

It runs in a child process (it imports JAX and sets JAX variables; this process stays clean). In quick
mode it runs alongside the other sections to keep the smoke test short, so its quick numbers overlap
other work; in full mode it runs alone, last.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
_CHILD = "import json, sys; from bench.replay_vs_jit import run; json.dump(run(quick=sys.argv[1] == 'quick'), sys.stdout)"


@dataclass
class ReplayJob:
    process: subprocess.Popen | None
    overlapped: bool
    note: str = ""


def start_replay(quick: bool, overlapped: bool) -> ReplayJob:
    """Start ``replay_vs_jit.run(quick)`` in a child process, or note why it cannot run."""
    if not (BENCH / "replay_vs_jit.py").exists():
        return ReplayJob(None, overlapped, "bench/replay_vs_jit.py is absent: the replay benchmark has not landed yet")
    argv = [sys.executable, "-c", _CHILD, "quick" if quick else "full"]
    return ReplayJob(
        subprocess.Popen(argv, cwd=BENCH.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), overlapped
    )


def finish_replay(job: ReplayJob, timeout_s: float = 900) -> dict:
    """The replay numbers (``{workload: {"jit": ..., "replay": ..., ...}}`` plus ratios), or a note saying why there are none."""
    if job.process is None:
        return {"present": 0, "note": job.note}
    try:
        out, err = job.process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        job.process.kill()
        job.process.communicate()
        return {"present": 1, "ok": 0, "note": f"replay_vs_jit.run did not finish in {timeout_s:.0f} s"}
    if job.process.returncode != 0:
        return {
            "present": 1,
            "ok": 0,
            "note": f"replay_vs_jit.run failed: {err.strip().splitlines()[-1] if err.strip() else job.process.returncode}",
        }
    numbers = json.loads(out)
    ratios = {}
    for workload, by_how in numbers.items():
        jit = by_how.get("jit", {})
        for how in ("replay", "replay_optimized"):
            m = by_how.get(how)
            if m and jit.get("compile_s") and jit.get("median_s"):
                ratios[f"{workload}.{how}"] = {
                    "compile_vs_jit": round(m["compile_s"] / jit["compile_s"], 3),
                    "run_median_vs_jit": round(m["median_s"] / jit["median_s"], 3),
                }
    return {"present": 1, "ok": 1, "overlapped_other_work": int(job.overlapped), "workloads": numbers, "ratios": ratios}
