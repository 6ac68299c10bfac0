"""Whether the index file can be used as it is: its tables have the columns the schema gives them, and the
write-ahead log beside it is its own. Either failing is :class:`DamagedIndex`: the index is derived data, and
``xlarun reindex`` moves it aside (with its side files) and rebuilds it from the runs."""

from __future__ import annotations

import os
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from xlarun.errors import StoreError, current_user


class DamagedIndex(StoreError):
    """The index file cannot be used as it is (SQLite cannot read it, its tables lack columns, a write-ahead log of
    another database lies beside it): derived data, moved aside and rebuilt by ``xlarun reindex``."""

    def __init__(self, message: str):
        super().__init__(message, "`xlarun reindex` moves it aside and rebuilds it from the runs")


def make_tables(conn: sqlite3.Connection, path: Path, schema: str) -> None:
    """The tables of ``schema`` (SQL), made in a new index; in one that has its schema row, a table gone is damage
    (made again empty, it would answer "none" for every run)."""
    if (missing := missing_tables(conn, schema)) is not None:
        raise DamagedIndex(f"the store's index {path} is damaged: {missing}")
    conn.executescript(schema)


def checked_stamp(conn: sqlite3.Connection, schema: str) -> str:
    """What :func:`schema_checked` compares: SQLite's schema cookie of the file (every CREATE, DROP and ALTER moves
    it) and a checksum of the schema xlarun gives it."""
    return f"{conn.execute('PRAGMA schema_version').fetchone()[0]}:{zlib.crc32(schema.encode()):08x}"


def schema_checked(conn: sqlite3.Connection, schema: str) -> bool:
    """Whether :func:`make_tables` and :func:`check_columns_and_id` found this file's tables whole, as ``schema``
    makes them, and no statement changed them since (its ``checked_schema`` row is the stamp the file has now): a
    reader then skips both (some 2 ms of every command)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
        return False
    row = conn.execute("SELECT value FROM meta WHERE key = 'checked_schema'").fetchone()
    return row is not None and row[0] == checked_stamp(conn, schema)


def make_tables_unless_checked(conn: sqlite3.Connection, path: Path, schema: str) -> bool:
    """:func:`make_tables`, unless :func:`schema_checked`; says whether it was (then no check is needed either)."""
    if schema_checked(conn, schema):
        return True
    make_tables(conn, path, schema)
    return False


def check_columns_and_id(conn: sqlite3.Connection, path: Path, schema: str) -> None:
    """Raise :class:`DamagedIndex` (the connection closed) for a column ``schema`` gives that the index lacks; give an
    index with no ``index_id`` its id (:func:`refuse_foreign_wal` reads it)."""
    if (missing := missing_columns(conn, schema)) is not None:
        conn.close()
        raise DamagedIndex(f"the store's index {path} is damaged: {missing}")
    if conn.execute("SELECT value FROM meta WHERE key='index_id'").fetchone() is None:
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('index_id', ?)", (os.urandom(8).hex(),))


def rewrite_index_id_page(conn: sqlite3.Connection) -> None:
    """(In a transaction.) Rewrite the page that holds the index's id (a new value beside it: SQLite skips a write
    that changes nothing), so every write-ahead log xlarun writes holds the id (:func:`refuse_foreign_wal`)."""
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_write', hex(randomblob(4)))")


def unreadable_pages(conn: sqlite3.Connection) -> str | None:
    """What SQLite's own check (``PRAGMA quick_check``) finds wrong with the pages of ``conn``'s file, or None."""
    try:
        found = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
    except DamagedIndex as exc:
        return exc.message
    return None if found == ["ok"] else "; ".join(found)


def missing_columns(conn: sqlite3.Connection, schema: str) -> str | None:
    """What the tables of ``conn`` lack of the columns ``schema`` (SQL) gives them (a table altered by hand), or None."""
    model = sqlite3.connect(":memory:")
    try:
        model.executescript(schema)
        tables = [r[0] for r in model.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            wanted = [r[1] for r in model.execute(f"PRAGMA table_info({table})")]
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            if lacking := [c for c in wanted if c not in have]:
                return f"its table {table} has no column {', '.join(lacking)}"
    finally:
        model.close()
    return None


def missing_tables(conn: sqlite3.Connection, schema: str) -> str | None:
    """The tables ``schema`` makes that an index holding its schema row lacks (dropped by hand), or None (a new
    index, or every table there)."""
    listed = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
    if "meta" not in {r[0] for r in conn.execute(listed)}:
        return None  # a new index
    # the schema row before the tables: it is written once every table is made (by another process, too)
    if conn.execute("SELECT 1 FROM meta WHERE key = 'schema'").fetchone() is None:
        return None
    have = {r[0] for r in conn.execute(listed)}
    model = sqlite3.connect(":memory:")
    try:
        model.executescript(schema)
        wanted = [r[0] for r in model.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    finally:
        model.close()
    lacking = [name for name in wanted if name not in have]
    return f"it has no table {', '.join(lacking)}" if lacking else None


def refuse_foreign_wal(path: Path) -> None:
    """Raise :class:`DamagedIndex` when the write-ahead log beside the index (``index.sqlite-wal``) is another
    database's: the index's ``index_id`` (made once, never changed, and rewritten by every transaction, so every
    log xlarun writes holds it) read from the main file alone differs from what the file and the log say together.
    SQLite itself would read the other database's pages as this one's (wrong answers, then damage)."""
    refuse_unreadable(path)  # a permission, not damage: reindex would not help
    wal = Path(f"{path}-wal")
    try:
        if wal.stat().st_size <= 32:  # no log, or only its header: nothing of another database to read
            return
    except OSError:
        return
    alone = _index_id(f"file:{path}?immutable=1")  # the main file, the log ignored
    if alone is None:
        return  # a new index whose every row is still in its log, or an older one with no id yet
    try:
        together = _index_id(f"file:{path}?mode=ro", strict=True)  # read-only: closing it never checkpoints the log
    except sqlite3.DatabaseError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return
        together = f"unreadable ({exc})"
    if together != alone:
        raise DamagedIndex(
            f"the store's index {path} has another database's write-ahead log beside it ({wal.name}: index id "
            f"{together}, the index's own {alone})"
        )


def _index_id(uri: str, strict: bool = False) -> str | None:
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5)
    except sqlite3.DatabaseError:
        if strict:
            raise
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='index_id'").fetchone()
    except sqlite3.DatabaseError:
        if strict:
            raise
        return None
    finally:
        conn.close()
    return None if row is None else str(row[0])


#: SQLite's words for a table or column that is not there: the schema was changed by hand.
_SCHEMA_WORDS = ("no such table", "no such column")


def as_index_damage(exc: sqlite3.DatabaseError, path: Path) -> sqlite3.DatabaseError | DamagedIndex:
    """A SQLite error met using the index, as :class:`DamagedIndex` where it says the file is damaged ('database disk
    image is malformed', a table or column gone); a lock, a full or read-only disk pass through as they are."""
    if type(exc) is sqlite3.DatabaseError or (
        isinstance(exc, sqlite3.OperationalError) and any(words in str(exc) for words in _SCHEMA_WORDS)
    ):
        return DamagedIndex(f"the store's index {path} is damaged: {exc}")
    return exc


class IndexConnection(sqlite3.Connection):
    """A connection to the index whose every statement and row fetched turns damage into :class:`DamagedIndex`
    (:func:`as_index_damage`): a page SQLite cannot read is named with the fix wherever a command meets it."""

    index_path = Path("index.sqlite")

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return self.cursor(IndexCursor).execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        return self.cursor(IndexCursor).executemany(sql, parameters)

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        return self.cursor(IndexCursor).executescript(script)


class IndexCursor(sqlite3.Cursor):
    """:class:`IndexConnection`'s cursor."""

    def _damage(self, exc: sqlite3.DatabaseError) -> sqlite3.DatabaseError | DamagedIndex:
        connection = self.connection
        return as_index_damage(exc, getattr(connection, "index_path", Path("index.sqlite")))

    def execute(self, sql: str, parameters: Any = (), /) -> IndexCursor:
        try:
            super().execute(sql, parameters)
            return self
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def executemany(self, sql: str, parameters: Any, /) -> IndexCursor:
        try:
            super().executemany(sql, parameters)
            return self
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def executescript(self, script: str, /) -> IndexCursor:
        try:
            super().executescript(script)
            return self
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def fetchmany(self, size: int | None = None) -> Any:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def fetchall(self) -> Any:
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from None


def refuse_unreadable(path: Path) -> None:
    """StoreError naming the path and the user when the index, or its folder, is not this user's to read."""
    folder = path.parent
    if (path.exists() and not os.access(path, os.R_OK)) or (folder.exists() and not os.access(folder, os.R_OK | os.X_OK)):
        raise StoreError(
            f"cannot open the index {path}: permission denied to user {current_user()}",
            "its owner can make it readable (a shared group, chmod g+r), or use a store of your own",
        )
