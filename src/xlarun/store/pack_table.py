"""``packs.sqlite``: where each packed file is (digest -> pack, offset, length), derived from the pack headers
and rebuilt from them when it is missing."""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from xlarun.errors import StoreError, write_trouble


def _damaged_table(path: Path, exc: Exception) -> StoreError:
    return StoreError(
        f"{path} is damaged: {exc}",
        f"delete {path} (and any {path.name}-wal, {path.name}-shm beside it): it is rebuilt from the packs on the next command",
    )


def cannot_write(path: Path) -> str | None:
    """Why nothing can be written next to ``path`` (its disk has under 1 MiB free, or its folder is read-only),
    or None."""
    try:
        st = os.statvfs(path.parent)
    except OSError:
        return None
    if st.f_bavail * st.f_frsize < (1 << 20):
        return "the disk is full"
    return None if os.access(path.parent, os.W_OK) else "the store is read-only"


#: Switching a new database file to WAL takes a lock SQLite does not wait for (its busy timeout does not apply):
#: two connections doing it at once, two threads of a batch or two captures, fail one with "database is locked".
WAL_SWITCH_TRIES = 50
WAL_SWITCH_WAIT_S = 0.1


class WalConnection(sqlite3.Connection):
    """A connection :func:`open_wal` made (a subclass only so that the process can hold weak references to it)."""


_OPEN_WAL: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
_OPEN_WAL_LOCK = threading.Lock()


def close_wal_connections() -> int:
    """Close every connection :func:`open_wal` made that is still open, and say how many there were.

    Run at exit (an ``atexit`` handler): the last connection of a WAL database to close copies the log into the
    file and removes it. A process that ends without the interpreter's teardown (:mod:`xlarun.process_exit`) or
    that leaves connections in idle worker threads would otherwise leave its rows in ``-wal`` files only, which a
    reader that cannot make side files (a full disk) does not see."""
    with _OPEN_WAL_LOCK:
        conns = list(_OPEN_WAL)
        _OPEN_WAL.clear()
    for conn in conns:
        try:
            conn.close()
        except sqlite3.Error:  # closed in a thread that still runs a statement: SQLite closes it when that ends
            pass
    return len(conns)


atexit.register(close_wal_connections)


def open_wal(
    path: Path, setup: Callable[[sqlite3.Connection], object], factory: type[sqlite3.Connection] = WalConnection
) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (made if missing) in WAL mode, ``setup(conn)`` run on it (tables
    made if missing). A lock met on the way is waited out, for :data:`WAL_SWITCH_TRIES` tries; any other
    ``sqlite3.OperationalError`` (or the lock after the last try) is raised, the connection closed. The connection
    is closed at the latest when the process exits (:func:`close_wal_connections`)."""
    for attempt in range(WAL_SWITCH_TRIES):
        conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False, factory=factory)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            setup(conn)
            with _OPEN_WAL_LOCK:
                _OPEN_WAL.add(conn)
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc) or attempt == WAL_SWITCH_TRIES - 1:
                raise
            time.sleep(WAL_SWITCH_WAIT_S)
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")


def _make_members_table(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS members (sha256 TEXT PRIMARY KEY, pack TEXT NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS members_pack ON members(pack)")
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")


class _CheckedConnection:
    """A pack-table connection whose damage ('database disk image is malformed') is a StoreError saying how to
    rebuild the table, not a crash; a lock (OperationalError) passes through as it is."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn, self.path = conn, path

    def execute(self, *args: Any) -> Any:
        try:
            return self.conn.execute(*args)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise _damaged_table(self.path, exc) from None

    def executemany(self, *args: Any) -> Any:
        try:
            return self.conn.executemany(*args)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise _damaged_table(self.path, exc) from None

    def close(self) -> None:
        self.conn.close()


class PackTable:
    """``packs.sqlite``: digest -> (pack, offset, length), one connection per thread, WAL. Derived from the
    pack headers, and rebuilt from them when the file is missing. Its digest column is named ``sha256`` for
    historical reasons (format 3 named files by SHA-256); it holds BLAKE3 digests, and the schema stays as
    it is so that every format 4 store keeps its table."""

    def __init__(self, path: Path, packs_dir: Path):
        self.path = path
        self.packs_dir = packs_dir
        self._local = threading.local()
        self._lock = threading.Lock()
        # this process's threads take turns to write: one waiting on SQLite's lock sleeps 1-100 ms a try (its busy
        # handler), one waiting here wakes as the other commits (two archive threads each lost ~0.05 s so, on 784 MB)
        self._write_turn = threading.Lock()
        # each thread's connection, with the thread that owns it: a thread that has ended gives its connection back
        # when the next one is opened, so a process archiving thousands of runs (a thread pool per run) holds only
        # its live threads' connections (two descriptors each, the table and its write-ahead log)
        self._connections: list[tuple[threading.Thread, _CheckedConnection]] = []

    def _conn(self) -> _CheckedConnection | None:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            existed = self.path.exists()
            if not existed and not self.packs_dir.is_dir():
                return None  # nothing packed yet: nothing to look up
            with self._lock:  # threads of one process create the file one at a time
                try:
                    conn = _CheckedConnection(self._connect(), self.path)
                except sqlite3.DatabaseError as exc:  # not a database at all (OperationalError, locked, is handled within)
                    raise _damaged_table(self.path, exc) from None
                self._close_connections_of_ended_threads()
                self._connections.append((threading.current_thread(), conn))
            self._local.conn = conn
            self._rebuild_if_new(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            return open_wal(self.path, _make_members_table)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and (why := cannot_write(self.path)):  # reading needs no side files: read-only
                try:
                    conn = sqlite3.connect(
                        f"file:{self.path}?immutable=1", uri=True, isolation_level=None, check_same_thread=False
                    )
                    conn.execute("SELECT 1 FROM members LIMIT 1").fetchone()
                    return conn
                except sqlite3.DatabaseError:
                    raise StoreError(f"cannot open {self.path}: {why}", "free space on that disk, then try again") from None
            raise StoreError(f"cannot open {self.path}: {exc}", "another xlarun may hold it; try again") from None

    def _rebuild_if_new(self, conn: _CheckedConnection) -> None:
        if conn.execute("SELECT 1 FROM meta WHERE key='built'").fetchone():
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not conn.execute("SELECT 1 FROM meta WHERE key='built'").fetchone():  # another process may have built it meanwhile
                try:
                    from xlarun.store.pack_format import read_headers  # its compressor and hash: not for every reader

                    held, unread = read_headers(self.packs_dir)
                    # a damaged pack stays unlisted (`xlarun check` names it); one this user cannot read leaves the
                    # table unfinished, so the next opener who can read it completes it
                    complete = not any(isinstance(why, OSError) for why in unread.values())
                except OSError:  # the folder cannot be listed: nothing to build from, yet
                    held, complete = {}, False
                for pack, members in held.items():
                    conn.executemany("INSERT OR IGNORE INTO members VALUES (?,?,?,?)", [(s, pack, o, n) for s, o, n in members])
                if complete:
                    conn.execute("INSERT INTO meta VALUES ('built', '1')")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.conn.in_transaction:  # SQLite may have rolled back itself (a full disk): no second error to mask it
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError) and (trouble := write_trouble(exc, f"cannot write {self.path}")):
                raise trouble from None
            raise

    def lookup(self, digest: str) -> tuple[str, int, int] | None:
        conn = self._conn()
        if conn is None:
            return None
        return conn.execute("SELECT pack, offset, length FROM members WHERE sha256=?", (digest,)).fetchone()

    def existing(self, digests: list[str]) -> set[str]:
        conn = self._conn()
        found: set[str] = set()
        if conn is None:
            return found
        for start in range(0, len(digests), 500):
            chunk = digests[start : start + 500]
            found.update(
                row[0]
                for row in conn.execute(f"SELECT sha256 FROM members WHERE sha256 IN ({','.join('?' * len(chunk))})", chunk)
            )
        return found

    def members_of(self, pack: str) -> list[tuple[str, int, int]]:
        conn = self._conn()
        return conn.execute("SELECT sha256, offset, length FROM members WHERE pack=?", (pack,)).fetchall() if conn else []

    def add(self, pack: str, members: Iterable[tuple[str, int, int]]) -> None:
        self.packs_dir.mkdir(parents=True, exist_ok=True)
        rows = [(s, pack, o, n) for s, o, n in members]
        self._change(lambda conn: conn.executemany("INSERT OR IGNORE INTO members VALUES (?,?,?,?)", rows))

    def rows(self) -> list[tuple]:
        """Every row as it is: (digest, pack, offset, length), whatever their types (gc compares them with the headers)."""
        conn = self._conn()
        return conn.execute("SELECT sha256, pack, offset, length FROM members").fetchall() if conn else []

    def forget_packs(self, packs: list[str]) -> None:
        if packs:
            self._change(lambda conn: conn.executemany("DELETE FROM members WHERE pack=?", [(p,) for p in packs]))

    def move(self, packs: list[str], pack: str, members: list[tuple[str, int, int]]) -> None:
        """In one transaction: forget every row naming one of ``packs`` and list ``members`` in ``pack`` (a merge of
        small packs: a reader finds each file in either the old packs or the new one, never nowhere)."""

        def change(conn: _CheckedConnection) -> None:
            conn.executemany("DELETE FROM members WHERE pack=?", [(p,) for p in packs])
            conn.executemany("INSERT OR REPLACE INTO members VALUES (?,?,?,?)", [(s, pack, o, n) for s, o, n in members])

        self._change(change)

    def _change(self, change: Callable[[_CheckedConnection], object]) -> None:
        """Run ``change`` in one write transaction (this process's threads one at a time); a full disk or a read-only
        file is a StoreError saying so."""
        conn = self._conn()
        if conn is None:
            return
        try:
            with self._write_turn:
                conn.execute("BEGIN IMMEDIATE")
                change(conn)
                conn.execute("COMMIT")
        except BaseException as exc:
            if conn.conn.in_transaction:  # SQLite may have rolled back itself (a full disk): no second error to mask it
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError) and (trouble := write_trouble(exc, f"cannot write {self.path}")):
                raise trouble from None
            raise

    def _close_connections_of_ended_threads(self) -> None:
        """Called with the lock held."""
        live = []
        for thread, conn in self._connections:
            if thread.is_alive():
                live.append((thread, conn))
            else:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
        self._connections = live

    def open_connections(self) -> int:
        """How many connections the table holds (for the tests of bounded descriptors)."""
        with self._lock:
            return len(self._connections)

    def close(self) -> None:
        with self._lock:
            for _thread, conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._connections.clear()
        self._local = threading.local()
