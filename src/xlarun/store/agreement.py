"""Whether the index holds exactly the runs ``runs/`` holds, answered without listing either.

A reader compares ``runs/``'s stamp (modification time, inode and link count: a run folder added or removed changes
the count even within one tick of the clock) and the index's count of runs with what was noted when they last
agreed; only when they differ does it list both and index what is missing (:func:`xlarun.store.ingest.reconcile`).

The writer that changes ``runs/`` notes the new agreement itself, in the writers' turn (:func:`xlarun.store.locks.
writers_turn`: every commit and removal takes it, so nothing else changes ``runs/`` between its two stamps). So
neither a capture nor the first reader after it lists the store. A writer that found the two agreeing marks its run
pending in the index before its rename and removes the mark with the new agreement; a mark left by a writer that died
in between is seen by the next reader, who lists (in the turn, so no writer is half-way) and removes it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from xlarun.errors import StoreError

if TYPE_CHECKING:
    from xlarun.store.index import Index

#: index meta key: ``runs/``'s stamp and the index's count of runs when they last agreed
AGREED = "runs_agreed"
#: index meta key prefix: a run whose commit began in an agreeing store and has not been noted yet
PENDING = "pending-run:"
#: a reader notes an agreement it found by listing only once ``runs/`` has not changed for this long: a run committed
#: by an older xlarun (which takes no turn) within the same tick of the clock as the listing leaves the time alone
SETTLED_NS = 2_000_000_000


def folder_stamp(folder: Path) -> str | None:
    """What changes when an entry of ``folder`` is added, removed or renamed: its modification time, inode and link
    count (a sub-folder added or removed changes it, up to the file system's cap)."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return f"{info.st_mtime_ns} {info.st_ino} {info.st_nlink}"


def pending(index: Index) -> list[str]:
    """Runs marked pending by writers that have not noted their agreement (running now, or dead)."""
    rows = index.conn.execute("SELECT key FROM meta WHERE key >= ? AND key < ?", (PENDING, PENDING[:-1] + ";"))
    return [key[len(PENDING) :] for (key,) in rows]


def agreed(index: Index, runs_dir: Path) -> bool:
    """``runs/`` and the index agree as last noted, and no writer's mark is pending."""
    stamp = folder_stamp(runs_dir)
    return stamp is not None and index.meta(AGREED) == f"{stamp} {index.run_count()}" and not pending(index)


def mark_pending(index: Index, run_id: str) -> bool:
    """Mark ``run_id`` pending before its commit; False when the index cannot be written (then nothing is noted)."""
    try:
        index.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (PENDING + run_id, str(os.getpid())))
    except sqlite3.Error:
        return False
    return True


def note_committed(index: Index, runs_dir: Path, run_id: str) -> None:
    """After ``run_id`` was committed and indexed in the writers' turn: the new agreement, and its mark removed, at
    once. A failure leaves the mark, and the next reader lists."""
    stamp = folder_stamp(runs_dir)
    if stamp is None:
        return
    try:
        with index.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (AGREED, f"{stamp} {index.run_count()}"))
            conn.execute("DELETE FROM meta WHERE key = ?", (PENDING + run_id,))
    except (sqlite3.Error, StoreError):
        pass


def clear_pending(index: Index) -> None:
    """Remove every mark (in the writers' turn, after listing: the writers that left them are gone)."""
    try:
        index.conn.execute("DELETE FROM meta WHERE key >= ? AND key < ?", (PENDING, PENDING[:-1] + ";"))
    except sqlite3.Error:
        pass


def note_if_settled(index: Index, runs_dir: Path, stamp: str | None) -> None:
    """A reader that listed and found agreement notes it once ``runs/`` has been still for :data:`SETTLED_NS`."""
    if stamp is None or time.time_ns() - int(stamp.split()[0]) <= SETTLED_NS or folder_stamp(runs_dir) != stamp:
        return
    index.try_set_meta(AGREED, f"{stamp} {index.run_count()}")
