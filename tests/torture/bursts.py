"""Bursts of stop signals sent to ``xlarun capture`` of a cheap job (no JAX): the tests in test_signals.py
and `python -m tests.torture.bursts 500` (the long run) use it. A burst is 2 to 6 signals, SIGINT, SIGTERM and SIGHUP mixed, 0 to 5 ms
apart, sent once the job runs (or, at random, while xlarun is still starting)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHEAP_JOB = """
import os, sys, time
print("ready", os.getpid(), flush=True)
time.sleep(60)
"""

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def one_burst(folder: Path, rng: random.Random, hang_s: float = 60) -> str:
    """Run one capture, send it one burst; returns ``clean``, ``hung`` (killed after ``hang_s``),
    ``orphaned`` (the job outlived xlarun) or ``lost`` (a bad exit code or a staging folder left behind)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(CHEAP_JOB)
    (folder / "spec.yaml").write_text("name: burst\nscript: job.py\n")
    env = dict(os.environ, XLARUN_STORE=str(folder / "s"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "capture", str(folder / "spec.yaml")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in STOPS],
    )
    job_pid = None
    if rng.random() < 0.9:  # most bursts land while the job runs; some while xlarun starts
        line = proc.stdout.readline()
        if line.startswith("ready"):
            job_pid = int(line.split()[1])
    burst = [rng.choice(STOPS) for _ in range(rng.randint(2, 6))]
    for sig in burst:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            break
        time.sleep(rng.uniform(0, 0.005))
    try:
        proc.communicate(timeout=hang_s)
    except subprocess.TimeoutExpired:
        try:  # what a hang looked like, for whoever reads the failure: the threads' states, the signals pending
            status = [
                line
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                if line.startswith(("State", "Threads", "Sig", "ShdPnd"))
            ]
        except OSError as exc:
            status = [str(exc)]
        proc.kill()
        out, err = proc.communicate()
        print(
            f"[burst hung] {folder.name}: sent {[s.name for s in burst]}, job {job_pid} alive={_alive(job_pid) if job_pid else None}, "
            f"{status}; stdout ...{out[-300:]!r}; stderr ...{err[-1200:]!r}",
            file=sys.stderr,
        )
        return "hung"
    if job_pid is not None:
        deadline = time.monotonic() + 5
        while _alive(job_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(job_pid):
            os.kill(job_pid, signal.SIGKILL)
            return "orphaned"
    staging = folder / "s" / "staging"
    left = [p for p in staging.iterdir()] if staging.is_dir() else []
    # the exit code a shell expects for one of the signals sent (the first acted on, or the one that killed it)
    expected = {128 + int(s) for s in burst} | {-int(s) for s in burst}
    if proc.returncode not in expected or left:
        return "lost"
    return "clean"


def run_bursts(root: Path, count: int, seed: int, parallel: int = 4, hang_s: float = 60) -> dict[str, int]:
    """``count`` bursts, ``parallel`` at a time; the figures: tried, clean, lost, hung, orphaned."""
    rng = random.Random(seed)
    seeds = [rng.randrange(1 << 30) for _ in range(count)]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        outcomes = list(pool.map(lambda i: one_burst(root / f"b{i:04d}", random.Random(seeds[i]), hang_s), range(count)))
    figures = {"tried": count}
    for kind in ("clean", "lost", "hung", "orphaned"):
        figures[kind] = outcomes.count(kind)
    return figures


def main() -> None:
    """``python -m tests.torture.bursts [COUNT] [SEED]``: the long run (500 bursts by default), figures printed."""
    import json
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xlarun-bursts-") as root:
        figures = run_bursts(Path(root), count, seed)
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
