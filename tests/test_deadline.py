"""deadline.py: a child past its deadline, or whose parent is interrupted, is stopped with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from xlarun import deadline

# a child that starts a grandchild in its own process group, prints the grandchild's pid, and sleeps
FAMILY = (
    "import subprocess, sys, time\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(g.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` has ended (a zombie not yet reaped by init counts as ended)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _family() -> tuple[subprocess.Popen, int]:
    proc = deadline.start([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    grandchild = int(proc.stdout.readline())
    return proc, grandchild


def test_a_child_past_its_deadline_is_killed_with_what_it_started():
    proc, grandchild = _family()
    started = time.monotonic()
    done = deadline.wait_within(proc, 0.5)
    assert done.timed_out and done.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert _gone(grandchild)


def test_a_child_that_ends_in_time_keeps_its_output_and_status():
    done = deadline.run_within(
        [sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1]); sys.exit(3)"], 60, "abc", text=True
    )
    assert (done.returncode, done.stdout, done.timed_out) == (3, "cba\n", False)


def test_an_interrupted_wait_kills_the_group_before_the_interruption_goes_on():
    proc, grandchild = _family()

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            deadline.communicate_within(proc, None)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert proc.returncode == -signal.SIGKILL and _gone(grandchild)


def test_stop_group_asks_first_and_kills_what_ignores_it():
    polite = deadline.start(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
    )
    polite.stdout.readline()
    deadline.stop_group(polite, grace_s=5)
    assert polite.returncode == -signal.SIGTERM
    stubborn_code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = deadline.start([sys.executable, "-c", stubborn_code], stdout=subprocess.PIPE)
    stubborn.stdout.readline()
    started = time.monotonic()
    deadline.stop_group(stubborn, grace_s=0.5)
    assert stubborn.returncode == -signal.SIGKILL and time.monotonic() - started < 10
    deadline.stop_group(stubborn)  # a group already gone is fine
    assert os.getpgrp() != stubborn.pid


def test_a_runner_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    """replay's XLA runner path runs the runner through deadline.py: its output kept, the verdict says it was killed."""
    from xlarun.replay.runner_launch import _run_here

    runner = tmp_path / "run_hlo_module"
    runner.write_text(f"#!{sys.executable}\n" + FAMILY.replace("print(g.pid, flush=True)", "print('child', g.pid, flush=True)"))
    runner.chmod(0o755)
    seen: list[str] = []
    started = time.monotonic()
    ended = _run_here("run_hlo_module", [str(runner)], 1.0, seen.append)
    assert time.monotonic() - started < 20
    assert ended.returncode == -signal.SIGKILL and "ran past the 1 s timeout and was killed" in (ended.unfinished or "")
    grandchild = int(seen[0].split()[1])
    assert _gone(grandchild)
