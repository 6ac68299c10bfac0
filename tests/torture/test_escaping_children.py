"""A job's children that try to leave it: a new session (``setsid``) with a cleared environment (``env -i``),
and the same done by hand (``os.setsid`` + ``os.execve`` with an empty environment). Each is stopped with the
job when it ends normally, when xlarun gets SIGTERM, and when xlarun is killed with kill -9 (its keeper does it).
And ``batch`` into a store it cannot write exits as ``capture`` does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import write_spec
from .support import alive as _alive
from .support import wait_for_line, xlarun

#: Two escapees, then (with an argument) a long wait: the job is then stopped, not ended.
ESCAPING_JOB = """
import os, subprocess, sys, time
by_setsid = subprocess.Popen(["setsid", "env", "-i", "sleep", "300"])
by_hand = os.fork()
if by_hand == 0:
    os.setsid()
    os.execve(%r, ["sleep", "301"], {})
time.sleep(0.3)  # both have left the job's session and environment
print("ready", by_setsid.pid, by_hand, flush=True)
if len(sys.argv) > 1:
    time.sleep(120)
"""


def _all_gone_within(pids: list[int], seconds: float) -> list[int]:
    """The pids still running after ``seconds`` (generous: the machine may be loaded)."""
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _escapees(tmp_path: Path, stopped: bool) -> tuple[subprocess.Popen, list[int]]:
    if not shutil.which("setsid") or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux and setsid(1)")
    args = "args: [wait]\n" if stopped else ""
    spec = write_spec(tmp_path, f"name: escaping\nscript: job.py\n{args}", ESCAPING_JOB % shutil.which("sleep"))
    proc = xlarun("capture", str(spec), store=tmp_path / "s")
    line = wait_for_line(proc, "ready", timeout=120)[-1].split()
    pids = [int(line[1]), int(line[2])]
    deadline = time.monotonic() + 60  # really escaped: a session of its own, no environment at all (once exec'd)
    while not all(_escaped(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_escaped(pid) for pid in pids), pids
    return proc, pids


def _escaped(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid and Path(f"/proc/{pid}/environ").read_bytes() == b""
    except OSError:
        return False


def _end(proc: subprocess.Popen, pids: list[int], figures, started: float) -> tuple[list[int], float]:
    proc.communicate(timeout=120)
    took = time.monotonic() - started
    left = _all_gone_within(pids, 60)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    figures(tried=len(pids), escaped=len(left), seconds=round(took, 1))
    return left, took


@pytest.mark.slow
def test_an_escaped_child_ends_with_the_job_that_ended(tmp_path, figures):
    proc, pids = _escapees(tmp_path, stopped=False)
    left, _ = _end(proc, pids, figures, time.monotonic())
    assert left == [], f"{left} outlived the job's normal end"
    assert proc.returncode == 1  # the job made no dump; the run is archived


@pytest.mark.slow
def test_an_escaped_child_is_stopped_with_xlarun_on_sigterm(tmp_path, figures):
    proc, pids = _escapees(tmp_path, stopped=True)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    left, took = _end(proc, pids, figures, started)
    assert left == [], f"{left} outlived xlarun's SIGTERM"
    assert proc.returncode == 143 and took < 60


@pytest.mark.slow
def test_an_escaped_child_is_stopped_by_the_keeper_when_xlarun_is_killed(tmp_path, figures):
    proc, pids = _escapees(tmp_path, stopped=True)
    keepers = [pid for pid in _children(proc.pid) if b"job_keeper" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(keepers) == 1  # the process that holds the job, beside xlarun
    started = time.monotonic()
    proc.kill()
    left, _ = _end(proc, pids, figures, started)
    assert left == [], f"{left} outlived kill -9 of xlarun"
    assert _all_gone_within(keepers, 60) == []  # and the keeper went too


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@contextmanager
def _read_only_view(store: Path, view: Path):
    """``store`` seen read-only at ``view`` (a read-only bind mount: we are root in CI); a skip where not allowed."""
    view.mkdir()
    bound = subprocess.run(["mount", "--bind", str(store), str(view)], capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip() or bound.returncode}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot make a bind mount read-only here: {ro.stderr.strip() or ro.returncode}")
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)


@pytest.mark.slow
def test_batch_and_capture_exit_alike_into_a_read_only_store(tmp_path, figures):
    one = write_spec(tmp_path / "one", "name: one\nscript: job.py\n", "print('hi')\n")
    cells = write_spec(tmp_path / "cells", "name: cells\nscript: job.py\nmatrix:\n  n: [1, 2]\n", "print('hi')\n")
    made = xlarun("capture", str(one), store=tmp_path / "s")
    made.communicate(timeout=120)
    assert (tmp_path / "s" / "runs").is_dir(), made.returncode  # a real store, with a run in it
    with _read_only_view(tmp_path / "s", tmp_path / "ro") as view:
        capture = xlarun("capture", str(one), store=view)
        _, capture_err = capture.communicate(timeout=120)
        batch = xlarun("batch", str(cells), store=view)
        batch_out, batch_err = batch.communicate(timeout=120)
    figures(tried=2, capture=capture.returncode, batch=batch.returncode)
    said = capture_err + batch_out + batch_err
    assert "the store is read-only" in capture_err and batch_out.count("the store is read-only") == 2, said
    assert capture.returncode == batch.returncode == 3, said
