"""scripts/setup.sh on a machine where another package manager is busy: it waits for dpkg's and apt's locks, bounded,
and says so (scripts/wait-for-apt.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen:
    """Another process holding an fcntl lock on ``path`` (as dpkg and apt do) for ``seconds``; started once held."""
    hold = (
        "import fcntl, sys, time\n"
        "f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(float(sys.argv[2]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", hold, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.slow
def test_setup_waits_for_a_package_manager_that_holds_the_lock(tmp_path):
    lock = tmp_path / "lock-frontend"
    holder = _hold_lock(lock, 3)
    env = {**os.environ, "XLARUN_APT_LOCKS": f"{tmp_path / 'absent'} {lock}", "XLARUN_APT_WAIT_S": "300"}
    proc = subprocess.run(["bash", "scripts/wait-for-apt.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    holder.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"another package manager holds {lock} (pid {holder.pid}); waiting up to 300 s" in proc.stderr
    assert "the package manager is free after" in proc.stderr


@pytest.mark.slow
def test_setup_gives_up_on_a_held_lock_after_its_bound_with_apts_exit_code(tmp_path):
    lock = tmp_path / "lock"
    holder = _hold_lock(lock, 120)
    try:
        env = {**os.environ, "XLARUN_APT_LOCKS": str(lock), "XLARUN_APT_WAIT_S": "1"}
        proc = subprocess.run(["bash", "scripts/wait-for-apt.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 100
    assert proc.stderr.splitlines()[-1].startswith(
        f"setup: {lock} (pid {holder.pid}) is still held after 1 s: let that install finish"
    )
    free = subprocess.run(["bash", "scripts/wait-for-apt.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (free.returncode, free.stderr) == (0, "")
