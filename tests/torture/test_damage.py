"""A damaged store: flipped, truncated and deleted packs, and a damaged index or pack table. Every command ends
with a documented exit code and a line saying what to do, never a crash; `check` names what is damaged, and the
derived databases are rebuilt by the commands the error names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"
COMMANDS = (("runs",), ("modules",), ("show", "train_step"), ("cat", "train_step"), ("find", "dot"), ("check",))


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory):
    from typer.testing import CliRunner

    from xlarun.cli import app

    root = tmp_path_factory.mktemp("damage") / "store"
    result = CliRunner().invoke(app, ["import", str(FIXTURE), "--store", str(root)])
    assert result.exit_code == 0, result.output
    return root


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _biggest_pack(store: Path) -> Path:
    return max((store / "blobs" / "packs").glob("*.zst"), key=lambda p: p.stat().st_size)


def _replace(path: Path, make) -> None:
    path.unlink()
    make(path)


DAMAGE = {
    "flipped-pack": lambda s: _flip(_biggest_pack(s)),
    "truncated-pack": lambda s: _biggest_pack(s).write_bytes(_biggest_pack(s).read_bytes()[:100]),
    "header-truncated-pack": lambda s: _biggest_pack(s).write_bytes(_biggest_pack(s).read_bytes()[:20]),
    "half-truncated-pack": lambda s: _biggest_pack(s).write_bytes(
        _biggest_pack(s).read_bytes()[: _biggest_pack(s).stat().st_size // 2]
    ),
    "deleted-pack": lambda s: _biggest_pack(s).unlink(),
    "dev-zero-symlink-pack": lambda s: _replace(_biggest_pack(s), lambda p: p.symlink_to("/dev/zero")),
    "fifo-pack": lambda s: _replace(_biggest_pack(s), os.mkfifo),
    "folder-pack": lambda s: _replace(_biggest_pack(s), Path.mkdir),
    "sparse-100g-pack": lambda s: os.truncate(_biggest_pack(s), 100 << 30),  # its bytes, then 100 GB of holes
    "garbage-index": lambda s: (s / "index.sqlite").write_bytes(b"not a database at all" * 100),
    "truncated-index": lambda s: (s / "index.sqlite").write_bytes((s / "index.sqlite").read_bytes()[:4096]),
    "deleted-index": lambda s: (s / "index.sqlite").unlink(),
    "truncated-pack-table": lambda s: (s / "blobs" / "packs.sqlite").write_bytes(
        (s / "blobs" / "packs.sqlite").read_bytes()[:1000]
    ),
    "garbage-pack-table": lambda s: (s / "blobs" / "packs.sqlite").write_bytes(b"\x00" * 8192),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_store_never_crashes_and_says_what_to_do(damage, sound_store, tmp_path, cli, figures):
    store = tmp_path / "store"
    shutil.copytree(sound_store, store)
    for side in store.rglob("*.sqlite-*"):
        side.unlink()  # as after a crash: the damage is in the main file
    DAMAGE[damage](store)
    codes, crashes = {}, []
    for command in COMMANDS:
        result = cli(*command, "--store", store)
        codes[command[0]] = result.exit_code
        if result.exit_code not in (0, 1, 2, 3) or "Traceback" in result.stderr:
            crashes.append((command, result.exit_code, result.stderr[-400:]))
        if result.exit_code in (2, 3):
            errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "(" in result.stderr, result.stderr  # one error, with the fix in brackets
    figures(damage=damage, exit_codes=codes, exit4_crashes=len(crashes))
    assert not crashes, crashes
    if damage.endswith("pack"):
        assert codes["check"] == 1  # damage found and named
    elif "index" in damage:
        assert cli("reindex", "--store", store).exit_code == 0  # what the error line says to run
    else:
        for side in store.glob("blobs/packs.sqlite*"):
            side.unlink()  # what the error line says to do
    if not damage.endswith("pack"):
        repaired = cli("check", "--store", store)
        assert repaired.exit_code == 0 and "all sound" in repaired.stdout, repaired.output
        assert cli("cat", "train_step", "--store", store).exit_code == 0


LISTING_DAMAGE = {
    "emptied": lambda p: p.write_bytes(b""),
    "empty-list": lambda p: p.write_text("[]"),
    "deleted": lambda p: p.unlink(),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "one-entry-dropped": lambda p: p.write_text(json.dumps(json.loads(p.read_text())[1:])),
}


@pytest.mark.slow
def test_a_damaged_file_list_is_named_by_check_and_gc_deletes_none_of_its_blobs(sound_store, tmp_path, cli, figures):
    """A committed run whose files.json was emptied or deleted is damage `check` names with the run,
    and `gc` refuses (saying why) rather than delete the blobs only that run used; restoring the file list, or
    `rm` of the run, ends it, and every file of the run reads back again."""
    tried = clean = lost = crashes = 0
    for damage, do in sorted(LISTING_DAMAGE.items()):
        tried += 1
        store = tmp_path / damage
        shutil.copytree(sound_store, store)
        (run_id,) = [p.name for p in (store / "runs").iterdir()]
        listing = store / "runs" / run_id / "files.json"
        saved = listing.read_bytes()
        do(listing)
        check = cli("check", "--store", store)
        gc = cli("gc", "--store", store)
        runs = cli("runs", "--store", store)
        results = (check, gc, runs)
        crashes += sum(r.exit_code not in (0, 1, 2, 3) or "Traceback" in r.stderr for r in results)
        assert check.exit_code == 1 and run_id in check.stdout, (damage, check.output)
        assert gc.exit_code == 3 and f"gc refuses to run: 1 run(s) have a damaged file list (run {run_id}" in gc.stderr, (
            damage,
            gc.output,
        )
        assert run_id in runs.stdout, (damage, runs.output)  # still listed: the run is damaged, not gone
        listing.write_bytes(saved)  # what the error line says: restore it from a backup
        sound = cli("check", "--store", store)
        catted = cli("cat", "train_step", "--store", store)
        if sound.exit_code == 0 and "all sound" in sound.stdout and catted.exit_code == 0:
            clean += 1
        else:
            lost += 1
    figures(tried=tried, clean=clean, lost=lost, crashes=crashes)
    assert (clean, lost, crashes) == (tried, 0, 0)


@pytest.mark.slow
def test_rm_gives_up_a_run_whose_file_list_is_gone_and_gc_then_frees_its_blobs(sound_store, tmp_path, cli):
    store = tmp_path / "store"
    shutil.copytree(sound_store, store)
    (run_id,) = [p.name for p in (store / "runs").iterdir()]
    (store / "runs" / run_id / "files.json").unlink()
    assert cli("rm", run_id, "--yes", "--store", store).exit_code == 0
    gc = cli("gc", "--store", store)
    assert gc.exit_code == 0 and "removed 0 abandoned staging folder(s) and 0 unused pack(s)" not in gc.stdout, gc.output
    assert not list((store / "runs").iterdir())


def _make_fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _make_folder(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


STORE_FILE_DAMAGE = {
    "garbage-version": lambda s: (s / "VERSION").write_bytes(b"\xff\xfe\x00garbage" * 3),
    "empty-version": lambda s: (s / "VERSION").write_bytes(b""),
    "folder-version": lambda s: _make_folder(s / "VERSION"),
    "fifo-version": lambda s: _make_fifo(s / "VERSION"),
    "folder-lock": lambda s: _make_folder(s / "lock"),
    "fifo-lock": lambda s: _make_fifo(s / "lock"),
    "dev-zero-symlink-lock": lambda s: ((s / "lock").unlink(missing_ok=True), (s / "lock").symlink_to("/dev/zero")),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(STORE_FILE_DAMAGE))
def test_a_damaged_version_or_lock_file_is_a_one_line_error_not_a_crash_or_a_hang(damage, sound_store, tmp_path, cli, figures):
    """Garbage in VERSION, and `lock` replaced by a folder, a FIFO or a link, end every command
    that needs them with exit 2 or 3 and one line naming the file and what to do; none waits on a FIFO."""
    store = tmp_path / "store"
    shutil.copytree(sound_store, store)
    STORE_FILE_DAMAGE[damage](store)
    codes, crashes = {}, []
    for command in (("runs",), ("cat", "train_step"), ("check",), ("gc",), ("rm", "--yes", "dumps")):
        result = cli(*command, "--store", store)
        codes[command[0]] = result.exit_code
        if result.exit_code not in (0, 1, 2, 3) or "Traceback" in result.stderr:
            crashes.append((command, result.exit_code, result.stderr[-400:]))
        elif result.exit_code in (2, 3):
            errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "(" in result.stderr, result.stderr
    figures(damage=damage, exit_codes=codes, exit4_crashes=len(crashes))
    assert not crashes, crashes
    if damage.endswith("version"):
        assert set(codes.values()) == {3}, codes  # no command reads a store it cannot tell the format of
    else:
        assert codes["runs"] == 0 and codes["cat"] == 0  # reading takes no lock
        assert codes["gc"] == 3 and codes["rm"] == 3, codes
