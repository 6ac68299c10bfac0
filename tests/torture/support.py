"""What the torture tests share: starting xlarun as a user would, and checking a store after the worst."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from xlarun.store.facade import LocalStore

HOSTILE = Path(__file__).resolve().parent.parent / "hostile_dumps.py"

#: A job that replays a real JAX dump folder (made once per session) into its own, file by file: the
#: archive sees real dumps arrive over a second or so, without paying for a JAX import per trial.
REPLAY_JOB = """
import os, shutil, sys, time
src = sys.argv[1]
dump = next(a.split("=", 1)[1] for a in os.environ["XLA_FLAGS"].split() if a.startswith("--xla_dump_to="))
names = sorted(os.listdir(src))
print("ready", flush=True)
for i, name in enumerate(names):
    copy = shutil.copytree if os.path.isdir(os.path.join(src, name)) else shutil.copyfile
    copy(os.path.join(src, name), os.path.join(dump, name))
    if i % 8 == 0:
        time.sleep(float(sys.argv[2]))
# and one module of its own, pass by pass, so that every trial writes packs (the replayed files are stored once)
noise = os.urandom(8).hex()
for step in range(1, 6):
    with open(os.path.join(dump, f"module_0900.jit_noise.{step:04d}.cpu.after_p{step}.before_p{step + 1}.txt"), "w") as out:
        out.write(f"HloModule jit_noise_{noise}\\n\\nENTRY main {{\\n  ROOT c = f32[] constant({step})\\n}}\\n")
print("done", len(names), flush=True)
"""

#: A job that writes one hostile dump folder (tests/hostile_dumps.py) where XLA would dump.
HOSTILE_JOB = f"""
import os, runpy, sys
dump = next(a.split("=", 1)[1] for a in os.environ["XLA_FLAGS"].split() if a.startswith("--xla_dump_to="))
sys.argv = ["hostile_dumps.py", sys.argv[1], dump]
runpy.run_path({str(HOSTILE)!r}, run_name="__main__")
"""


def reset_signals() -> None:
    """preexec_fn: the default dispositions, so a test sending SIGINT works under nohup or in a background job."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def xlarun(*args: str, store: Path, env: dict | None = None, **kwargs) -> subprocess.Popen:
    """``python -m xlarun ARGS`` with the store, signals at their defaults, output in pipes."""
    full_env = dict(os.environ, XLARUN_STORE=str(store), PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "xlarun", *args],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=reset_signals,
        **kwargs,
    )


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> list[str]:
    """Read xlarun's stdout until a line holds ``needle``; returns the lines read."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if needle in line:
            return lines
        if not line and proc.poll() is not None:
            raise AssertionError(f"xlarun ended ({proc.returncode}) before printing {needle!r}: {proc.stderr.read()[-3000:]}")
    raise AssertionError(f"no {needle!r} within {timeout}s")


@dataclass
class StoreState:
    runs: list[str]
    statuses: dict[str, str]
    leftovers: int


def assert_sound(root: Path) -> StoreState:
    """Every visible run is whole (manifest, file list, every file reads back and hashes to its name), the
    index lists exactly the runs on disk, and nothing half-written is visible."""
    store = LocalStore.open(root)
    try:
        runs = store.run_ids()
        for run_id in runs:
            manifest = store.manifest(run_id)
            assert manifest.get("run_id") == run_id, f"run {run_id} has no manifest of its own: {manifest}"
        report = store.check()
        assert report.damaged == [], report.damaged
        indexed = {r.run_id: r.status for r in store.index.runs()}
        assert set(indexed) == set(runs), (sorted(indexed), runs)
        return StoreState(runs, indexed, len(store.stale_staging()))
    finally:
        store.close()


def alive(pid: int) -> bool:
    """The process runs (a zombie, or one gone, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def wait_gone(pids: list[int], timeout: float = 30) -> None:
    """Wait until the jobs a killed xlarun orphaned have ended (they finish on their own)."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
            except (OSError, IndexError):
                break
            time.sleep(0.05)


def fill_disk(mount: Path, leave: int) -> None:
    """Fill the disk of ``mount`` (a small tmpfs) with one file, ``filler``, leaving ``leave`` bytes free."""
    st = os.statvfs(mount)
    with open(mount / "filler", "ab") as out:
        out.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


@contextmanager
def mounted_tmpfs(mount: Path, size: str):
    """A tmpfs of ``size`` (``16m``) mounted at ``mount`` while inside (we are root in CI); a skip with the reason
    where mounting is not allowed."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
