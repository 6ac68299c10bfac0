"""Rows of index.sqlite holding what xlarun never writes (NULLs where the schema expects values, text
in number columns, broken JSON) crashed reading commands (exit 4) or made them answer wrongly ("no module
matches"). Every reading command now ends with exit 3 naming `xlarun reindex` (or reads what it can), `check` names
the damage, and `reindex` mends it: the same commands then answer as before."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from .support import assert_sound, xlarun

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"


def _every_column_null(conn: sqlite3.Connection) -> str:
    statements = []
    for table in ("runs", "modules", "files"):
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})") if row[1] != "run_id"]
        statements.append(f"UPDATE {table} SET " + ", ".join(f"{c}=NULL" for c in columns))
    return "; ".join(statements)


DAMAGE = {
    "runs: a NULL name and counts": "UPDATE runs SET name=NULL, n_files=NULL, status=NULL",
    "runs: a NULL run id": "UPDATE runs SET run_id=NULL",
    "runs: broken tags JSON": "UPDATE runs SET tags='{x', matrix='[1]'",
    "modules: NULL ids": "UPDATE modules SET module_id=NULL",
    "modules: NULL names and stages": "UPDATE modules SET name=NULL, stages=NULL",
    "modules: text counts, broken JSON": "UPDATE modules SET instr_before='lots', opcodes_after='[1'",
    "modules and files: NULL run ids": "UPDATE modules SET run_id=NULL; UPDATE files SET run_id=NULL",
    "files: NULL digests and sizes": "UPDATE files SET digest=NULL, size=NULL",
    "files: text sizes": "UPDATE files SET size='big'",
    "every column NULL": "",
}
READING = (
    ("runs",),
    ("runs", "--json"),
    ("modules",),
    ("modules", "--json"),
    ("show", "train_step"),
    ("cat", "train_step"),
    ("files",),
    ("find", "dot"),
    ("logs",),
    ("diff", "train_step", "accuracy"),
    ("export", "latest", "{out}"),
    ("render", "train_step", "-o", "{out}.svg"),
)


@pytest.fixture(scope="module")
def indexed_store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("index-rows") / "store"
    importer = xlarun("import", str(FIXTURE), store=store)
    assert importer.wait(timeout=300) == 0, importer.communicate()
    return store


@pytest.mark.slow
def test_damaged_index_rows_end_in_exit_3_naming_reindex_and_reindex_mends_them(indexed_store, tmp_path, cli, figures):
    codes: dict[str, dict[str, int]] = {}
    for number, (case, sql) in enumerate(DAMAGE.items()):
        store = tmp_path / f"store{number}"
        shutil.copytree(indexed_store, store)
        conn = sqlite3.connect(store / "index.sqlite")
        conn.executescript(sql or _every_column_null(conn))
        conn.commit()
        conn.close()
        seen = codes[case] = {}
        for command in READING:
            args = [a.replace("{out}", str(tmp_path / f"out{number}")) for a in command]
            result = cli(*args, "--store", store)
            seen[" ".join(command[:2])] = result.exit_code
            assert result.exit_code in (0, 1, 2, 3) and "Traceback" not in result.output, f"{case}: {command}: {result.output}"
            if result.exit_code == 3:
                assert "`xlarun reindex`" in result.stderr and result.stderr.count("\n") == 1, f"{case}: {result.stderr}"
        check = cli("check", "--store", store)
        seen["check"] = check.exit_code
        assert check.exit_code in (0, 1) and "Traceback" not in check.output, check.output
        if 3 in seen.values():  # the damage the commands met is damage `check` names
            assert check.exit_code == 1 and "DAMAGED index.sqlite" in check.stdout, f"{case}: {check.output}"
        mended = cli("reindex", "--store", store)
        assert mended.exit_code == 0, f"{case}: {mended.output}"
        for command in (("runs",), ("show", "train_step"), ("find", "dot"), ("check",)):
            again = cli(*command, "--store", store)
            assert again.exit_code == 0, f"{case}, after reindex: {command}: {again.output}"
        assert_sound(store)
    every = [code for seen in codes.values() for code in seen.values()]
    figures(
        cases=len(DAMAGE),
        tried=len(every),
        clean=sum(code in (0, 1, 2, 3) for code in every),
        exit3_reindex=every.count(3),
        crashes=sum(code not in (0, 1, 2, 3) for code in every),
    )
    assert every.count(4) == 0
    # the cases a reader cannot read around end in exit 3, not in a wrong answer
    assert codes["modules: NULL ids"]["show train_step"] == 3
    assert codes["files: NULL digests and sizes"]["cat train_step"] == 3
    assert codes["every column NULL"]["runs"] == 3
