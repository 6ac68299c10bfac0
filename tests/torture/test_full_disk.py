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
from .support import REPLAY_JOB, assert_sound, mounted_tmpfs, xlarun

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

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
    with mounted_tmpfs(tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}", "24m") as mount:
        yield mount


def _grow(mount: Path, size: str) -> None:
    """Give the disk more room, as a user freeing space would."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True, capture_output=True)


@pytest.mark.slow
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


@pytest.mark.slow
def test_reading_commands_work_on_a_full_disk_and_writers_say_it_is_full(small_tmpfs, cli, figures):
    """With the store's disk full (and no SQLite side files left, as after a reboot), the reading
    commands answer from the index as it is; `reindex` and `rm` end with exit 3 saying the disk is full, never
    exit 4, and `reindex` leaves the healthy index where it is."""
    store = small_tmpfs / "store"
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"
    importer = xlarun("import", str(fixture), store=store)  # another process: its connections close, as a user's do
    assert importer.wait(timeout=300) == 0, importer.communicate()
    for side in [*store.glob("index.sqlite-*"), *store.glob("blobs/packs.sqlite-*")]:
        side.unlink()
    with open(small_tmpfs / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * (1 << 20))
                filler.flush()
        except OSError:
            pass
    codes = {}
    for command in (
        ("runs",),
        ("show", "train_step"),
        ("cat", "train_step"),
        ("check",),
        ("gc",),
        ("reindex",),
        ("rm", "--yes", "dumps"),
    ):
        result = cli(*command, "--store", store)
        codes[command[0]] = result.exit_code
        if result.exit_code == 3:
            assert "the disk is full" in result.stderr, result.stderr
    crashes = sum(code not in (0, 1, 2, 3) for code in codes.values())
    figures(tried=len(codes), clean=sum(code == 0 for code in codes.values()), crashes=crashes, exit_codes=codes)
    assert crashes == 0
    assert {k: codes[k] for k in ("runs", "show", "cat", "check", "gc")} == dict.fromkeys(
        ("runs", "show", "cat", "check", "gc"), 0
    )
    assert codes["reindex"] == 3 and codes["rm"] == 3
    assert not list(store.glob("index.sqlite.damaged*"))  # a full disk is not damage


@pytest.mark.slow
def test_a_read_only_store_answers_reading_commands_and_refuses_writes_in_one_line(tmp_path, cli, figures):
    """A store on a read-only mount: reading commands work; reindex, rm (and gc, when it has
    something to delete) end with exit 3 saying the store is read-only, never exit 4."""
    store, view = tmp_path / "store", tmp_path / "ro"
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"
    importer = xlarun("import", str(fixture), store=store)
    assert importer.wait(timeout=300) == 0, importer.communicate()
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(store), str(view)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        codes = {}
        for command in (
            ("runs",),
            ("show", "train_step"),
            ("cat", "train_step"),
            ("check",),
            ("reindex",),
            ("rm", "--yes", "dumps"),
        ):
            result = cli(*command, "--store", view)
            codes[command[0]] = result.exit_code
            if result.exit_code == 3:
                assert "read-only" in result.stderr.lower(), result.stderr
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)
    crashes = sum(code not in (0, 1, 2, 3) for code in codes.values())
    figures(tried=len(codes), clean=sum(code == 0 for code in codes.values()), crashes=crashes, exit_codes=codes)
    assert crashes == 0
    assert [codes[k] for k in ("runs", "show", "cat", "check", "reindex", "rm")] == [0, 0, 0, 0, 3, 3], codes
    assert not list(store.glob("index.sqlite.damaged*"))
