"""Timing helpers: medians over repeats, of Python callables and of subprocesses."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Timing:
    """Wall times of repeated runs of one thing, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def to_dict(self) -> dict:
        return {"median_s": round(self.median, 6), "min_s": round(self.best, 6), "repeats": len(self.samples)}


def time_call(fn: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> Timing:
    """Time ``fn()`` ``repeats`` times; ``setup()`` runs untimed before each call."""
    samples = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return Timing(samples)


def run_command(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None, shell: bool = False) -> float:
    """Run a command to completion (output discarded); return its wall time. Raises on a non-zero exit."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        shown = argv if isinstance(argv, str) else " ".join(map(str, argv))
        raise RuntimeError(f"{shown} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def time_command(
    argv: Sequence[str],
    repeats: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    shell: bool = False,
    ok_codes: tuple[int, ...] = (0,),
    warmup: int = 0,
) -> Timing:
    """Median-ready wall times of a subprocess (stdout discarded), after ``warmup`` untimed runs."""
    samples = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=cwd, shell=shell, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if i >= warmup:
            samples.append(time.perf_counter() - t0)
        if proc.returncode not in ok_codes:
            shown = argv if isinstance(argv, str) else " ".join(map(str, argv))
            raise RuntimeError(f"{shown} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return Timing(samples)


#: What any command-line tool built on the stack xlarun is fixed to (typer for the CLI, pydantic for its specs) pays
#: before its first line of work, as ``python -c`` code: the floors its start-up targets are read against.
TYPER_START = "import typer"
TYPER_AND_PYDANTIC_START = (
    "import typer\nfrom pydantic import BaseModel\nclass Spec(BaseModel):\n    name: str = ''\nSpec.model_validate({'name': 'x'})"
)


def cli_env(workdir: Path) -> dict[str, str]:
    """The environment CLI start-up is timed in: Python's bytecode cache on, as for installed software.

    This sandbox sets PYTHONDONTWRITEBYTECODE, which makes every start compile xlarun from source; the
    cache goes to the benchmark's folder (PYTHONPYCACHEPREFIX), never into the source tree. Time each
    command once untimed first (``warmup``) so the cache is filled.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    return env


def xlarun_argv() -> list[str]:
    """How to run the real ``xlarun`` CLI: the console script beside this interpreter, else ``python -m xlarun``."""
    script = Path(sys.executable).with_name("xlarun")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "xlarun"]


def tool(name: str) -> str | None:
    """Path of an external tool (rg, tar, zstd), or None when it is not installed."""
    return shutil.which(name)


def tree_bytes(root: Path) -> int:
    """Bytes of every regular file below ``root`` (apparent size)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("inf")
