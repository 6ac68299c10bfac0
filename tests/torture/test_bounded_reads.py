"""A FIFO, a link to /dev/zero or a 100 GB sparse file in place of a store file (a run's files.json, manifest.json,
stdout.log; a killed capture's archived.json): every command that reads it ends at once with a documented exit code
and a line naming the file, never waits on it and never reads it without end; undoing the damage (what the line
says) leaves a sound store whose every file reads back. Each command runs as its own process with a deadline, so a
hang fails the test instead of hanging it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .support import xlarun

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"
DEADLINE_S = 60
DEAD_PID = "2147483646"  # no process has it: the staging folder's capture was killed


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def _sparse(path: Path) -> None:
    os.truncate(path, 100 << 30)  # its bytes, then 100 GB of holes


DAMAGE = {"fifo": _fifo, "dev-zero-symlink": _dev_zero, "sparse-100g": _sparse}
RUN_COMMANDS = (("check",), ("gc",), ("reindex",), ("export", "dumps", "{dest}"), ("logs", "dumps"))


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory):
    from typer.testing import CliRunner

    from xlarun.cli import app

    root = tmp_path_factory.mktemp("bounded") / "store"
    result = CliRunner().invoke(app, ["import", str(FIXTURE), "--store", str(root), "--name", "dumps"])
    assert result.exit_code == 0, result.output
    (run_id,) = [p.name for p in (root / "runs").iterdir()]
    (root / "runs" / run_id / "stdout.log").write_text("what the job printed\n")  # an import keeps none of its own
    return root


def _run(store: Path, args: tuple[str, ...], dest: Path) -> tuple[int | None, str, float]:
    """(exit code or None for a hang, stdout + stderr, seconds) of one command in its own process."""
    started = time.monotonic()
    proc = xlarun(*(a.format(dest=dest) for a in args), store=store)
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out + err, time.monotonic() - started
    return proc.returncode, out + err, time.monotonic() - started


def _files_read_back(store: Path) -> int:
    """How many of every run's files read back with their digest (all of them, or the assertion fails)."""
    from xlarun.store.facade import LocalStore
    from xlarun.store.packs import content_digest

    opened = LocalStore.open(store, create=False)
    try:
        count = 0
        for run_id in opened.run_ids():
            for entry in opened.stored_files(run_id):
                assert content_digest(opened.read_file(run_id, entry.path)) == entry.digest
                count += 1
        return count
    finally:
        opened.close()


#: The exit code each command must end with when it meets the damaged file (absent: it does not read that file).
EXPECTED = {
    "files.json": {"check": 1, "gc": 3, "reindex": 1, "export": 1, "logs": 1},  # the run is left out of the index
    "manifest.json": {"check": 1, "reindex": 1, "export": 1, "logs": 1},  # the run is left out of the index
    "stdout.log": {"check": 1, "export": 1, "logs": 1},
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_a_fifo_or_endless_file_in_a_run_folder_is_refused_at_once(target, damage, sound_store, tmp_path, figures):
    store = tmp_path / "store"
    shutil.copytree(sound_store, store)
    (run_id,) = [p.name for p in (store / "runs").iterdir()]
    path = store / "runs" / run_id / target
    saved = path.read_bytes()
    DAMAGE[damage](path)
    hangs, crashes, codes, outputs, slowest = [], [], {}, {}, 0.0
    for n, command in enumerate(RUN_COMMANDS):
        code, output, seconds = _run(store, command, tmp_path / f"export-{n}")
        codes[command[0]], outputs[command[0]], slowest = code, output, max(slowest, seconds)
        if code is None:
            hangs.append(command[0])
        elif code not in (0, 1, 2, 3) or "Traceback" in output:
            crashes.append((command[0], code, output[-600:]))
    figures(target=target, damage=damage, exit_codes=codes, hangs=len(hangs), exit4=len(crashes), slowest_s=round(slowest, 2))
    assert not hangs and not crashes, (hangs, crashes)
    if damage == "sparse-100g" and target == "stdout.log":  # a real (if huge) log: shown and exported from its end
        assert set(codes.values()) == {0}, codes
        assert "bytes of this log are left out" in outputs["logs"] and len(outputs["logs"]) < (33 << 20)
        exported = tmp_path / f"export-{[c[0] for c in RUN_COMMANDS].index('export')}" / "_xlarun" / "stdout.log"
        assert exported.stat().st_size <= (256 << 20) + 200
    else:
        for command, expected in EXPECTED[target].items():
            assert codes[command] == expected and target in outputs[command], (command, codes, outputs[command][-600:])
        assert all(codes[c] == 0 for c in codes if c not in EXPECTED[target]), codes  # those that do not read it
    path.unlink()  # the repair the line names: a regular file there again, restored from a backup
    path.write_bytes(saved)
    code, output, _s = _run(store, ("check",), tmp_path / "unused")
    assert code == 0 and "all sound" in output, output[-600:]
    assert _files_read_back(store) > 0


def _killed_capture(store: Path, sound_store: Path) -> Path:
    """A staging folder as a capture killed after archiving leaves it: its archived.json, its logs, no owner."""
    (run_id,) = [p.name for p in (sound_store / "runs").iterdir()]
    folder = store / "staging" / "20260101-000000-dead"
    folder.mkdir(parents=True)
    files = (sound_store / "runs" / run_id / "files.json").read_text()
    (folder / "archived.json").write_text(f'{{"files": {files}, "notes": []}}')
    (folder / "stdout.log").write_text("the job's output\n")
    (folder / "owner.pid").write_text(DEAD_PID)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_fifo_or_endless_archived_list_stops_gc_and_recover_with_its_name(damage, sound_store, tmp_path, figures):
    """gc keeps what a killed capture's archived.json lists: one it cannot read is never taken as "nothing listed"
    (that would free the blobs), and recover cannot recover from it; both say which file, and wait on nothing."""
    store = tmp_path / "store"
    shutil.copytree(sound_store, store)
    folder = _killed_capture(store, sound_store)
    listing = folder / "archived.json"
    saved = listing.read_bytes()
    DAMAGE[damage](listing)
    codes, hangs = {}, 0
    for command in (("gc",), ("recover",), ("check",)):
        code, output, _s = _run(store, command, tmp_path / "unused")
        codes[command[0]] = code
        hangs += code is None
        assert code is not None and "Traceback" not in output, (command, output[-600:])
        if command[0] != "check":
            assert code == 1 and "archived.json" in output, (command, code, output[-600:])
    figures(damage=damage, exit_codes=codes, hangs=hangs)
    assert folder.is_dir()  # nothing deleted while it could not be read
    listing.unlink()
    listing.write_bytes(saved)
    code, output, _s = _run(store, ("recover",), tmp_path / "unused")
    assert code == 0, output[-600:]
    assert _files_read_back(store) > 0
