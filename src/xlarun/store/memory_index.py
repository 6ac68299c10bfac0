"""Each module's peak memory in the index, read from the buffer assignment XLA dumps with the optimized module.

:func:`index_memory` runs at ingest (and ``reindex``): per module with a ``*-buffer-assignment.txt``, its peak and
what makes it up (:class:`xlarun.hlo.buffer_assignment.BufferAssignment`'s sums). ``xlarun modules`` reads
:func:`run_peaks` for its peak column, a query instead of reading the files again (those cost ~20 ms a listing).
The table is additive (created when missing, rows dropped with their run by ``Index.forget_run``); a run indexed
before it existed has its peaks read from its files instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from xlarun.errors import XlarunError
from xlarun.store.report_files import report_paths

if TYPE_CHECKING:  # annotations only: `modules` reads peaks back without the dump names' decoder
    from xlarun.hlo.names import DumpName
    from xlarun.store.rows import StoredFile
    from xlarun.store.runs import RunStore

BUFFER_ASSIGNMENT = "buffer-assignment"
MEMORY_SCHEMA = """
CREATE TABLE IF NOT EXISTS module_memory (
    run_id TEXT, module_id INTEGER, peak_bytes INTEGER, parameter_bytes INTEGER, output_bytes INTEGER,
    temporary_bytes INTEGER, aliased_bytes INTEGER,
    PRIMARY KEY (run_id, module_id)
);
"""


def _has_table(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'module_memory'").fetchone() is not None


#: A buffer assignment's (peak, parameter, output, temporary, aliased) bytes; None: not one XLA wrote.
Sums = tuple[int, int, int, int, int] | None


def index_memory(
    conn: sqlite3.Connection,
    store: RunStore,
    run_id: str,
    decoded: list[tuple[StoredFile, DumpName]],
    known: dict[str, Sums] | None = None,
) -> int:
    """Write the peak of every module of the run whose buffer assignment was dumped (inside the caller's
    transaction); returns how many. ``known``: sums read while the files were archived, by digest (the others are
    read from the store). A damaged file is left out: ``xlarun memory`` says why."""
    if _has_table(conn):  # indexed again (reindex): its rows are written anew
        conn.execute("DELETE FROM module_memory WHERE run_id = ?", (run_id,))
    found = [(s.path, n.module_id, s.digest) for s, n in decoded if n.kind == BUFFER_ASSIGNMENT and n.module_id is not None]
    if not found:
        return 0
    conn.execute(MEMORY_SCHEMA)
    known = known or {}
    rows = {}
    for path, module_id, digest in sorted(found):
        if module_id in rows:
            continue
        sums = known[digest] if digest in known else _read_sums(partial(store.blobs.get, digest), path)
        if sums is not None:
            rows[module_id] = (run_id, module_id, *sums)
    conn.executemany("INSERT OR REPLACE INTO module_memory VALUES (?, ?, ?, ?, ?, ?, ?)", list(rows.values()))
    return len(rows)


def allocation_sums(data: bytes, path: str) -> Sums:
    """The sums the index keeps of a buffer assignment's bytes (None: not a buffer assignment XLA wrote)."""
    from xlarun.hlo.buffer_assignment import parse_allocations

    try:
        found = parse_allocations(data.decode("utf-8", errors="replace"), path)
    except XlarunError:
        return None
    return found.peak_bytes, found.parameter_bytes, found.output_bytes, found.temporary_bytes, found.aliased_bytes


def _read_sums(read: Callable[[], bytes], path: str) -> Sums:
    try:
        data = read()
    except (XlarunError, OSError):
        return None
    return allocation_sums(data, path)


def _sums(store: RunStore, run_id: str, path: str) -> Sums:
    return _read_sums(lambda: store.read_file(run_id, path), path)


def run_peaks(conn: sqlite3.Connection, store: RunStore, run_id: str, module_ids: set[int] | None = None) -> dict[int, int]:
    """The peak bytes of the run's modules (those in ``module_ids``; None: all) whose buffer assignment was dumped,
    by module id: from the index, else (a run indexed before peaks were) from the files."""
    wanted = (lambda m: True) if module_ids is None else module_ids.__contains__
    if _has_table(conn):
        rows = conn.execute("SELECT module_id, peak_bytes FROM module_memory WHERE run_id = ?", (run_id,)).fetchall()
        if rows:
            return {int(m): int(p) for m, p in rows if wanted(int(m))}
    peaks: dict[int, int] = {}
    for module_id, path in report_paths(conn, run_id, BUFFER_ASSIGNMENT):
        if wanted(module_id) and module_id not in peaks and (sums := _sums(store, run_id, path)) is not None:
            peaks[module_id] = sums[0]
    return peaks
