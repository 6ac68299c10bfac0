"""gc never deletes what a run names: what is live comes from the runs' own file lists and what a pack holds from
its own header, never from ``packs.sqlite``. A stale table restored from a backup, garbled rows, a pack another
user cannot read, a damaged file list or pack, and a store gc may not write each end in a refusal with its exit
code and a line saying what to do; after it (and after the repair it advises) every file of every run reads back."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .sweep import settle as _settle

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "compat"
NOBODY = 65534


@pytest.fixture(scope="module")
def one_run_store(tmp_path_factory):
    from typer.testing import CliRunner

    from xlarun.cli import app

    root = tmp_path_factory.mktemp("gc-liveness") / "store"
    result = CliRunner().invoke(app, ["import", str(FIXTURES / "jax-0.10.2" / "dumps.tar.gz"), "--store", str(root)])
    assert result.exit_code == 0, result.output
    return root


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    _settle(target)
    return target


def _import(cli, store: Path, fixture: str) -> None:
    result = cli("import", FIXTURES / fixture / "dumps.tar.gz", "--store", store)
    assert result.exit_code == 0, result.output


def read_back(root: Path) -> tuple[int, list[str]]:
    """Every file of every run read through LocalStore.read_file and hashed: (files read, those that failed)."""
    from xlarun.store.facade import LocalStore
    from xlarun.store.pack_format import content_digest

    store = LocalStore.open(root)
    read, lost = 0, []
    try:
        for run_id in store.run_ids():
            for entry in store.stored_files(run_id):
                read += 1
                try:
                    data = store.read_file(run_id, entry.path)
                except Exception as exc:  # any failure is a lost file, counted
                    lost.append(f"{run_id}/{entry.path}: {type(exc).__name__}: {exc}")
                    continue
                if content_digest(data) != entry.digest:
                    lost.append(f"{run_id}/{entry.path}: wrong bytes")
    finally:
        store.close()
    return read, lost


def _table_packs(store: Path) -> set[str]:
    conn = sqlite3.connect(store / "blobs" / "packs.sqlite")
    try:
        return {row[0] for row in conn.execute("SELECT DISTINCT pack FROM members")}
    finally:
        conn.close()


def _pack_files(store: Path) -> set[str]:
    return {p.name[:-4] for p in (store / "blobs" / "packs").glob("*.zst")}


def _delete_table(store: Path) -> None:
    for path in (store / "blobs").glob("packs.sqlite*"):
        path.unlink()


def _one_error(result) -> str:
    """The one error, with what to do in brackets (as one line: a terminal may wrap it)."""
    return _error_line(result.stderr)


@pytest.mark.slow
def test_a_stale_table_restored_from_a_backup_is_refused_and_rebuilt(one_run_store, tmp_path, cli, figures):
    store = _copy(one_run_store, tmp_path / "store")
    backup = tmp_path / "packs.sqlite.backup"
    shutil.copy2(store / "blobs" / "packs.sqlite", backup)  # settled: the whole table is in this one file
    _import(cli, store, "jax-0.11.2")  # a second run, in packs the backup never heard of
    expected, lost = read_back(store)
    assert lost == [] and len(os.listdir(store / "runs")) == 2
    _delete_table(store)
    shutil.copy2(backup, store / "blobs" / "packs.sqlite")
    unknown = _pack_files(store) - _table_packs(store)
    assert unknown  # the packs a table-trusting gc would delete
    gc = cli("gc", "--store", store)
    line = _one_error(gc)
    assert gc.exit_code == 3 and "disagrees with the packs' headers" in line and "delete" in line, gc.output
    assert unknown <= _pack_files(store)
    _delete_table(store)  # what the line says
    again = cli("gc", "--store", store)
    assert again.exit_code == 0 and "removed 0 abandoned staging folder(s) and 0 unused pack(s)" in again.stdout, again.output
    read, lost = read_back(store)
    figures(tried=2, files=read, lost=len(lost), refusals=1, packs_a_table_trusting_gc_would_delete=len(unknown))
    assert (read, lost) == (expected, [])


@pytest.mark.slow
def test_garbled_rows_in_the_table_are_refused_never_read_as_unused_packs(one_run_store, tmp_path, cli, figures):
    store = _copy(one_run_store, tmp_path / "store")
    expected, _ = read_back(store)
    packs = len(_pack_files(store))
    refusals = 0
    garbles = {
        "renamed": "UPDATE members SET pack = 'x' || substr(pack, 2)",
        "shifted": "UPDATE members SET offset = offset + 1",
        "dropped": "DELETE FROM members WHERE sha256 IN (SELECT sha256 FROM members ORDER BY sha256 LIMIT 5)",
    }
    for garble in garbles.values():
        with sqlite3.connect(store / "blobs" / "packs.sqlite") as conn:
            conn.execute(garble)
        conn.close()
        gc = cli("gc", "--store", store)
        line = _one_error(gc)
        assert gc.exit_code == 3 and "disagrees with the packs' headers" in line, gc.output
        refusals += 1
        assert len(_pack_files(store)) == packs
        _delete_table(store)  # what the line says
        assert cli("gc", "--store", store).exit_code == 0
    read, lost = read_back(store)
    figures(tried=len(garbles), files=read, lost=len(lost), refusals=refusals, packs=packs)
    assert (read, lost, len(_pack_files(store))) == (expected, [], packs)


@pytest.mark.slow
def test_a_damaged_file_list_or_pack_that_check_names_stops_gc(one_run_store, tmp_path, cli, figures):
    store = _copy(one_run_store, tmp_path / "store")
    _import(cli, store, "jax-0.11.2")
    expected, lost = read_back(store)
    assert lost == []
    first, _second = sorted(os.listdir(store / "runs"))
    listing = store / "runs" / first / "files.json"
    saved = listing.read_bytes()
    listing.write_text(json.dumps(json.loads(saved)[1:]))  # one entry dropped: its blob would look unused
    assert cli("check", "--store", store).exit_code == 1
    gc = cli("gc", "--store", store)
    assert gc.exit_code == 3 and f"damaged file list (run {first}" in _one_error(gc), gc.output
    listing.write_bytes(saved)
    packs = sorted((store / "blobs" / "packs").glob("*.zst"), key=lambda p: p.stat().st_size)
    smallest = packs[0]
    kept = smallest.read_bytes()
    smallest.write_bytes(kept[:12])  # its header cut short: what it holds cannot be known
    assert cli("check", "--store", store).exit_code == 1
    gc = cli("gc", "--store", store)
    line = _one_error(gc)
    assert gc.exit_code == 3 and "cannot be read" in line and smallest.name in line and "xlarun check" in line, gc.output
    assert sorted((store / "blobs" / "packs").glob("*.zst"), key=lambda p: p.stat().st_size) == packs
    smallest.write_bytes(kept)
    smallest.rename(tmp_path / smallest.name)  # a pack gone: files runs list are in no pack
    gc = cli("gc", "--store", store)
    assert gc.exit_code == 3 and "that runs list are in no pack" in _one_error(gc), gc.output
    (tmp_path / smallest.name).rename(smallest)
    assert cli("gc", "--store", store).exit_code == 0
    read, lost = read_back(store)
    figures(tried=3, files=read, lost=len(lost), refusals=3)
    assert (read, lost) == (expected, [])


@pytest.mark.slow
def test_a_killed_captures_damaged_archived_list_stops_gc_until_recovered_or_discarded(one_run_store, tmp_path, cli, figures):
    """The files a killed capture archived are named only by its ``archived.json``: one that cannot be read stops gc."""
    store = _copy(one_run_store, tmp_path / "store")
    expected, _ = read_back(store)
    (run_id,) = os.listdir(store / "runs")
    leftover = store / "staging" / "20260101-000000-cccc"
    leftover.mkdir()
    (leftover / "owner.pid").write_text("999999999")
    listed = [
        {"path": e["path"], "digest": e["digest"], "size": e["size"]}
        for e in json.loads((store / "runs" / run_id / "files.json").read_text())
    ]
    (leftover / "archived.json").write_text(json.dumps({"files": listed, "notes": []})[:-40])  # cut short
    packs = _pack_files(store)
    gc = cli("gc", "--store", store)
    line = _one_error(gc)
    assert gc.exit_code == 3 and "archived.json cannot be read or is damaged" in line and "xlarun recover" in line, gc.output
    assert leftover.is_dir() and _pack_files(store) == packs
    dropped = cli("gc", "--discard-recoverable", "--store", store)
    assert dropped.exit_code == 0 and "removed 1 abandoned staging folder(s)" in dropped.stdout, dropped.output
    read, lost = read_back(store)
    figures(tried=1, files=read, lost=len(lost), refusals=1)
    assert (read, lost) == (expected, [])


AS_NOBODY = r"""
import os, sys
import pwd, sqlite3, json, shutil, errno, typer, rich.console, rich.markup, rich.text  # imported while root: the interpreter's files are root's alone
import xlarun.cli, xlarun.commands.housekeeping, xlarun.store.facade, xlarun.store.gc, xlarun.store.integrity
import xlarun.store.index, xlarun.store.ingest, xlarun.store.summaries, xlarun.console, xlarun.errors
import html, xlarun.api, xlarun.display, xlarun.present, xlarun.commands.navigate
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
sys.exit(xlarun.cli.main(sys.argv[1:]))
"""


def _as_nobody(*args: str | Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}  # nobody may not write its data
    return subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/tmp",
        env={**env, "HOME": "/tmp", "XDG_CACHE_HOME": "/tmp", "NO_COLOR": "1", "COLUMNS": "400"},
    )


@pytest.fixture
def shared_folder():
    if os.geteuid() != 0:
        pytest.skip("needs root to run a part as nobody")
    folder = Path(tempfile.mkdtemp(prefix="xlarun-gc-", dir="/tmp"))  # pytest's tmp_path is root's alone
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "(" in stderr, stderr
    return " ".join(stderr.split())


@pytest.mark.slow
def test_a_pack_another_user_cannot_read_is_never_deleted_by_their_gc(one_run_store, shared_folder, cli, figures):
    """A store shared by two users: a pack of mode 600 is unreadable to the other, whose rebuilt table lacks its
    files; that user's gc refuses, naming the pack, the permission and the user, and the owner reads every file."""
    store = _copy(one_run_store, shared_folder / "store")
    _import(cli, store, "jax-0.11.2")
    expected, _ = read_back(store)
    subprocess.run(["chmod", "-R", "a+rwX", str(store)], check=True)
    private = max((store / "blobs" / "packs").glob("*.zst"), key=lambda p: p.stat().st_size)
    private.chmod(0o600)
    _delete_table(store)  # rebuilt by the other user's command, as the table's error line advises
    done = _as_nobody("gc", "--store", store)
    line = _error_line(done.stderr)
    assert done.returncode == 3, done.stderr
    assert f"{private}: permission denied to user nobody" in line and "nothing was deleted" in line, line
    assert private.exists()
    assert cli("gc", "--store", store).exit_code == 0  # the owner, who reads every pack: nothing is unused
    read, lost = read_back(store)
    figures(tried=1, files=read, lost=len(lost), refusals=1)
    assert (read, lost) == (expected, []) and private.exists()


@pytest.mark.slow
def test_a_run_another_user_cannot_read_stops_their_gc(one_run_store, shared_folder, cli, figures):
    """A run folder of mode 700 in a shared store: what it lists is unknown to the other user, whose gc refuses
    naming the run, the permission and the user."""
    store = _copy(one_run_store, shared_folder / "store")
    _import(cli, store, "jax-0.11.2")
    expected, _ = read_back(store)
    assert cli("runs", "--store", store).exit_code == 0
    _settle(store)
    subprocess.run(["chmod", "-R", "a+rwX", str(store)], check=True)
    private = sorted((store / "runs").iterdir())[0]
    private.chmod(0o700)
    packs = _pack_files(store)
    done = _as_nobody("gc", "--store", store)
    line = _error_line(done.stderr)
    assert done.returncode == 3 and f"run {private.name}: files.json cannot be read: permission denied to user nobody" in line
    assert "nothing was deleted" in line and _pack_files(store) == packs
    read, lost = read_back(store)
    figures(tried=1, files=read, lost=len(lost), refusals=1)
    assert (read, lost) == (expected, [])


@pytest.mark.slow
def test_gc_on_a_store_it_cannot_write_says_what_it_could_not_remove(one_run_store, shared_folder, cli, figures):
    """Killed captures' leftovers in a store nobody may not write: a leftover nobody cannot read stops their gc (what
    it lists is unknown), and `gc --discard-recoverable` names the folder, the permission and the user, exit 3, and
    never says it removed what is still there."""
    store = _copy(one_run_store, shared_folder / "store")
    expected, _ = read_back(store)
    leftover = store / "staging" / "20260101-000000-aaaa"
    leftover.mkdir(parents=True)
    (leftover / "owner.pid").write_text("999999999")  # no such process: a killed capture's
    (leftover / "stdout.log").write_text("what the job printed\n")
    assert cli("runs", "--store", store).exit_code == 0  # the index is written while root still may
    _settle(store)
    plain = _as_nobody("gc", "--store", store)  # nothing to delete: a read-only store is no obstacle
    assert plain.returncode == 0 and "removed 0 abandoned staging folder(s) and 0 unused pack(s)" in plain.stdout, plain.stderr
    private = store / "staging" / "20260101-000000-bbbb"  # a leftover nobody cannot even look into
    private.mkdir(mode=0o700)
    (private / "owner.pid").write_text("999999999")
    unknown = _as_nobody("gc", "--store", store)  # what it lists is unknown: every pack may be in use
    line = _error_line(unknown.stderr)
    assert unknown.returncode == 3 and f"{private}: permission denied to user nobody" in line, line
    done = _as_nobody("gc", "--discard-recoverable", "--store", store)
    line = _error_line(done.stderr)
    assert done.returncode == 3 and "removed 0 of 2 abandoned staging folder(s)" in line, done.stderr
    assert "permission denied to user nobody" in line and str(leftover) in line, line
    assert "removed 1" not in done.stdout and leftover.is_dir() and private.is_dir()
    dropped = cli("gc", "--discard-recoverable", "--store", store)  # the owner may
    assert dropped.exit_code == 0 and "removed 2 abandoned staging folder(s)" in dropped.stdout, dropped.output
    assert not leftover.exists() and not private.exists()
    read, lost = read_back(store)
    figures(tried=4, files=read, lost=len(lost), refusals=2)
    assert (read, lost) == (expected, [])


@pytest.mark.slow
def test_an_index_another_user_cannot_read_is_named_as_a_permission_not_damage(one_run_store, shared_folder, cli, figures):
    """index.sqlite of mode 600 in a shared store: the other user's commands say it is a permission problem, with the
    path and the user, never "unable to open database file" with advice to reindex."""
    store = _copy(one_run_store, shared_folder / "store")
    subprocess.run(["chmod", "-R", "a+rwX", str(store)], check=True)
    (store / "index.sqlite").chmod(0o600)
    codes = {}
    for command in (("runs",), ("modules",), ("check",)):
        done = _as_nobody(*command, "--store", store)
        codes[command[0]] = done.returncode
        line = _error_line(done.stderr)
        assert done.returncode == 3, done.stderr
        assert f"cannot open the index {store / 'index.sqlite'}: permission denied to user nobody" in line, line
        assert "reindex" not in line and "unable to open database file" not in line
    figures(tried=len(codes), **codes)
    assert cli("runs", "--store", store).exit_code == 0  # the owner reads it as before
