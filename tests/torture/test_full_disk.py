"""A store on a small tmpfs that fills up: the capture fails cleanly (exit 3, never 4), earlier runs stay
whole, nothing half-written is visible, and once space is freed ``xlarun recover`` keeps the run."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from ..conftest import write_spec
from .support import REPLAY_JOB, assert_sound, xlarun

pytestmark = pytest.mark.slow  # torture: kills, signals, damaged stores, hostile inputs

FILL = """
import os, sys
dump = next(a.split("=", 1)[1] for a in os.environ["XLA_FLAGS"].split() if a.startswith("--xla_dump_to="))
for i in range(int(sys.argv[1])):
    try:
        with open(os.path.join(dump, f"noise_{i}.bin"), "wb") as out:
            out.write(os.urandom(256 << 10))
    except OSError as exc:
        print("job:", exc, flush=True)
        break
"""


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 24 MB tmpfs (we are root in CI); skipped with the reason where mounting is not allowed."""
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _grow(mount: Path, size: str) -> None:
    """Give the disk more room, as a user freeing space would."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True, capture_output=True)


def test_a_full_disk_fails_cleanly_and_loses_nothing(tmp_path, small_tmpfs, real_dump, figures):
    store = small_tmpfs / "store"
    good = write_spec(tmp_path / "good", f"name: good\nscript: job.py\nargs: [{real_dump}, '0', /dev/null]\n", REPLAY_JOB)
    first = xlarun("capture", str(good), "-q", store=store)
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    [kept] = assert_sound(store).runs
    codes = []
    filler = small_tmpfs / "filler"
    for attempt, files in enumerate((200, 30)):  # more than the disk holds; then a disk all but full
        if attempt:
            _grow(small_tmpfs, "48m")
            free = os.statvfs(small_tmpfs).f_bavail * os.statvfs(small_tmpfs).f_frsize
            with open(filler, "ab") as out:
                out.write(b"\0" * max(0, free - (3 << 20)))
        spec = write_spec(tmp_path / f"fill{attempt}", f"name: fill\nscript: job.py\nargs: ['{files}']\n", FILL)
        proc = xlarun("capture", str(spec), "-q", store=store)
        _out, err = proc.communicate(timeout=120)
        codes.append(proc.returncode)
        assert proc.returncode != 4 and "Traceback" not in err, err
        if proc.returncode == 3:
            assert "`xlarun recover`" in err, err
    _grow(small_tmpfs, "256m")
    filler.unlink(missing_ok=True)
    state = assert_sound(store)
    assert kept in state.runs  # the earlier run is untouched, nothing half-written is visible
    recovered = xlarun("recover", "--json", store=store)
    out, err = recovered.communicate(timeout=120)
    assert recovered.returncode == 0, err
    made = json.loads(out)["recovered"]
    state = assert_sound(store)
    lost = 1 + len(codes) - len(state.runs)
    figures(
        trials=len(codes),
        exit_codes=codes,
        recovered=len(made),
        runs=len(state.runs),
        runs_lost=lost,
        exit4_crashes=codes.count(4),
        hangs=0,
    )
    assert lost == 0 and 3 in codes
