"""kill -9 at random points of capture, archive and recovery: no run is ever half-visible, the store stays
sound, and ``xlarun recover`` turns every killed capture into a run (runs lost: 0).

Kills land two ways: at a kill point (``XLARUN_KILL_AT``, between the archive's steps: a pack written,
listed in the pack table, every pack written, the archived list written, the raw files moved aside, the
metadata written, the rename done, the index updated; or the Nth kill point, whatever it is), and by
``kill -9`` from outside after a random delay while the job runs or xlarun archives.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from xlarun.capture.recover import recover_runs
from xlarun.store.facade import LocalStore

from ..conftest import write_spec
from .support import REPLAY_JOB, assert_sound, wait_for_line, wait_gone, xlarun
from .support import alive as _alive

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

CAPTURE_POINTS = (
    "job-ended",
    "pack-written",
    "pack-listed",
    "packs-written",
    "archived-listed",
    "raw-discarded",
    "metadata-written",
    "committed",
    "indexed",
)
RECOVER_POINTS = ("pack-written", "recover-archived", "archived-listed", "metadata-written", "committed")
JOB = REPLAY_JOB + "open(sys.argv[3], 'a').write(f'{os.getpid()}\\n')\n"


def _visible(root: Path) -> set[str]:
    runs = root / "runs"
    return {p.name for p in runs.iterdir() if (p / "files.json").exists()} if runs.is_dir() else set()


def _job_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.slow
def test_kill_9_anywhere_loses_no_run(tmp_path, real_dump, figures, soak):
    rng = random.Random(int(os.environ.get("XLARUN_TORTURE_SEED", "18")))
    trials = 240 if soak else 8
    root = tmp_path / "store"
    pids = tmp_path / "job.pids"
    spec = write_spec(
        tmp_path / "spec", f"name: replay\nscript: job.py\nargs: [{real_dump}, '0.01', {pids}]\ntimeout: 120s\n", JOB
    )
    figures_by = Counter()
    landed = Counter()
    lost = crashes = hangs = 0
    started = time.monotonic()
    for trial in range(trials):
        before = _visible(root)
        how = rng.choice(("point", "point", "nth", "outside"))
        env = {"XLARUN_KILL_TRACE": str(tmp_path / "trace")}
        if how == "point":
            point = rng.choice(CAPTURE_POINTS)
            env["XLARUN_KILL_AT"] = f"{point}:{rng.randint(1, 6) if point.startswith('pack-') else 1}"
        elif how == "nth":
            env["XLARUN_KILL_AT"] = str(rng.randint(1, 16))
        proc = xlarun("capture", str(spec), *(() if how == "outside" else ("-q",)), store=root, env=env)
        if how == "outside":
            wait_for_line(proc, "ready")
            time.sleep(rng.uniform(0, 1.5))
            proc.send_signal(signal.SIGKILL)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            hangs += 1
            proc.kill()
            code = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        figures_by["kills" if code == -signal.SIGKILL else "kill_not_reached" if code == 0 else f"exit_{code}"] += 1
        crashes += code == 4
        wait_gone(_job_pids(pids))  # a job whose xlarun was killed runs on, orphaned, to its end
        if code == -signal.SIGKILL and rng.random() < 0.3:  # kill the recovery too, at one of its steps
            again = xlarun("recover", store=root, env={**env, "XLARUN_KILL_AT": f"{rng.choice(RECOVER_POINTS)}:1"})
            again.communicate(timeout=120)
            figures_by["recoveries_killed" if again.returncode == -signal.SIGKILL else "recoveries_not_killed"] += 1
            crashes += again.returncode == 4
        if trial % 5 == 0:
            assert_sound(root)  # before recovery: nothing half-visible
        store = LocalStore.open(root)
        done = recover_runs(store)
        store.close()
        assert all(r.error is None for r in done), done
        new = _visible(root) - before
        lost += len(new) != 1
    for line in (tmp_path / "trace").read_text().split() if (tmp_path / "trace").exists() else []:
        landed[line] += 1
    state = assert_sound(root)
    statuses = Counter(state.statuses.values())
    figures(
        trials=trials,
        kills_injected=figures_by["kills"],
        **{k: v for k, v in figures_by.items() if k != "kills"},
        runs=len(state.runs),
        runs_lost=lost,
        exit4_crashes=crashes,
        hangs=hangs,
        statuses=dict(statuses),
        kills_landed_at=dict(landed),
        seconds=round(time.monotonic() - started, 1),
    )
    assert (lost, crashes, hangs) == (0, 0, 0)
    assert len(state.runs) == trials and state.leftovers == 0
    assert figures_by["kills"] >= trials // 2


#: A job whose child escapes its process group (a new session), as a launcher or a server would.
ESCAPING_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print("ready", child.pid, flush=True)
time.sleep(120)
"""


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "SIGKILL"])
def test_nothing_a_job_started_outlives_a_stopped_or_killed_capture(tmp_path, how, figures):
    """A child the job started in a new session is stopped with the job on SIGTERM/SIGHUP (xlarun does not
    wait on its pipes), and after kill -9 of xlarun the keeper the job runs below stops it within seconds."""

    spec = write_spec(tmp_path, "name: escaping\nscript: job.py\n", ESCAPING_CHILD)
    proc = xlarun("capture", str(spec), store=tmp_path / "s")
    lines = wait_for_line(proc, "ready")
    child = int(lines[-1].split()[1])
    started = time.monotonic()
    proc.send_signal(getattr(signal, how))
    proc.communicate(timeout=60)
    took = time.monotonic() - started
    gone = _gone_within(child, 10)
    if not gone:
        os.kill(child, signal.SIGKILL)
    figures(tried=1, clean=int(gone), orphaned=int(not gone), seconds=round(took, 1))
    assert gone, f"the job's child {child} outlived xlarun ({how})"
    if how != "SIGKILL":
        assert proc.returncode == 128 + getattr(signal, how) and took < 15


@pytest.mark.slow
def test_recover_refuses_a_folder_whose_job_still_runs(tmp_path):
    """kill -9 of xlarun and the job's keeper together leaves the job running: recover must not commit a run
    that is still being written; once the job is gone it recovers."""

    spec = write_spec(tmp_path, "name: escaping\nscript: job.py\n", ESCAPING_CHILD)
    proc = xlarun("capture", str(spec), store=tmp_path / "s")
    child = int(wait_for_line(proc, "ready")[-1].split()[1])
    keepers = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and b"XLARUN_JOB_DIR" in _read(p / "cmdline") and _ppid(p) == proc.pid
    ]
    assert len(keepers) == 1
    # the keeper first: killed after xlarun, it can wake on xlarun's end between the two kills and do its job
    for pid in (*keepers, proc.pid):
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    try:
        assert _alive(child)
        env = dict(os.environ, XLARUN_STORE=str(tmp_path / "s"))
        refused = subprocess.run(
            [sys.executable, "-m", "xlarun", "recover"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "its job still runs" in refused.stderr and f" {child}" in refused.stderr.split("(kill", 1)[1], refused.stderr
        assert LocalStore.open(tmp_path / "s").run_ids() == []
    finally:
        os.kill(child, signal.SIGKILL)
        job_pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _has_mark(p, tmp_path)]
        for pid in job_pids:
            os.kill(pid, signal.SIGKILL)
    assert _gone_within(child, 10)
    deadline = time.monotonic() + 10
    while any(_has_mark(p, tmp_path) for p in Path("/proc").iterdir() if p.name.isdigit()) and time.monotonic() < deadline:
        time.sleep(0.1)
    done = subprocess.run([sys.executable, "-m", "xlarun", "recover"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(LocalStore.open(tmp_path / "s").run_ids()) == 1


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _ppid(proc_dir: Path) -> int:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _has_mark(proc_dir: Path, under: Path) -> bool:
    return f"XLARUN_JOB_DIR={under}".encode() in _read(proc_dir / "environ")
