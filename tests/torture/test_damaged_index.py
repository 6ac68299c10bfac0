"""index.sqlite damaged under a store of two runs: a zeroed last page, a renamed column, a table dropped, and another
store's write-ahead log put beside it. Every main command ends with a documented exit code and no traceback, and
never answers wrongly (a foreign log is named, not read); `reindex`, the fix every error names, moves the index aside
and rebuilds it, after which `check` finds all sound and every file of every run reads back."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .sweep import FIXTURES, build_two_run_store, commands, copy_store, settle, sweep
from .test_gc_liveness import read_back


def _zero_last_page(store: Path) -> None:
    path = store / "index.sqlite"
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    data[-page:] = bytes(page)
    path.write_bytes(bytes(data))


def _sql(statement: str):
    def damage(store: Path) -> None:
        conn = sqlite3.connect(store / "index.sqlite")
        conn.execute(statement)
        conn.commit()
        conn.close()
        settle(store)

    return damage


def foreign_wal(other_store: Path):
    """Another store's index written while a reader held it open (its log not folded in), that log copied beside
    this store's index."""

    def damage(store: Path) -> None:
        holder = sqlite3.connect(other_store / "index.sqlite")
        holder.execute("SELECT count(*) FROM runs").fetchone()  # a reader: the writer's log is kept when it exits
        try:
            fixture = FIXTURES / "jax-0.12.0.1" / "dumps.tar.gz"
            done = subprocess.run(
                [sys.executable, "-m", "xlarun", "import", str(fixture), "--store", str(other_store)],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            wal = other_store / "index.sqlite-wal"
            assert wal.stat().st_size > 32
            shutil.copy(wal, store / "index.sqlite-wal")
        finally:
            holder.close()

    return damage


INDEX_DAMAGE = {
    "zeroed-last-page": _zero_last_page,
    "renamed-column": _sql("ALTER TABLE modules RENAME COLUMN name TO nom"),
    "dropped-table": _sql("DROP TABLE passes"),
    "renamed-runs-column": _sql("ALTER TABLE runs RENAME COLUMN n_files TO files_n"),
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged-index") / "store"
    return root, build_two_run_store(root)


def _sweep_then_repair(damage_name, store, runs, tmp_path, cli, figures, expected):
    first = runs[0]
    lines = [c for c in commands(first, tmp_path / "export") if c[0] not in ("rm", "reindex")]
    swept = sweep(cli, store, lines)
    repaired = sweep(cli, store, [("reindex",)])
    check = cli("check", "--store", store)
    read, lost = read_back(store)
    figures(
        damage=damage_name, tried=len(lines) + 1, exit4=len(swept.crashes) + len(repaired.crashes),
        hangs=len(swept.hangs) + len(repaired.hangs), lost=len(lost), codes=swept.codes,
    )  # fmt: skip
    assert not swept.crashes and not swept.hangs, (swept.crashes, swept.hangs)
    for command, code in swept.codes.items():
        if code in (2, 3):  # one error line, with its fix
            assert "reindex" in swept.outputs[command] or command in ("export",), (command, swept.outputs[command])
    assert repaired.codes == {"reindex": 0}, repaired.outputs
    assert check.exit_code == 0 and "all sound" in check.stdout, check.output
    assert (read, lost) == (expected, [])
    return swept


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(INDEX_DAMAGE))
def test_a_damaged_index_is_named_and_reindex_mends_it(damage, two_runs, tmp_path, cli, figures):
    source, runs = two_runs
    store = copy_store(source, tmp_path / "store")
    expected, _ = read_back(source)
    INDEX_DAMAGE[damage](store)
    _sweep_then_repair(damage, store, runs, tmp_path, cli, figures, expected)


@pytest.mark.slow
def test_another_stores_write_ahead_log_is_named_never_read(two_runs, tmp_path, cli, figures):
    """SQLite would read the other index's pages as this one's ("no module matches", no modules, "all sound"): the
    index's id, kept in its main file and rewritten by every transaction, tells the log apart."""
    source, runs = two_runs
    store = copy_store(source, tmp_path / "store")
    other = copy_store(source, tmp_path / "other")
    (other / "index.sqlite").unlink()
    assert cli("runs", "--store", other).exit_code == 0  # its own index, with its own id
    settle(other)
    expected, _ = read_back(source)
    foreign_wal(other)(store)
    swept = _sweep_then_repair("foreign-wal", store, runs, tmp_path, cli, figures, expected)
    for command in ("runs", "modules", "show", "cat", "find", "check", "gc"):
        assert swept.codes[command] == 3, (command, swept.outputs[command])
        assert "another database's write-ahead log" in " ".join(swept.outputs[command].split())
    modules = cli("modules", runs[0], "--store", store)
    assert modules.exit_code == 0 and "jit_train_step" in modules.stdout  # after reindex: the right answers
