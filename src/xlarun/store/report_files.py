"""The report files (buffer assignment, live range...) of a run's modules, by kind: one indexed query."""

from __future__ import annotations

import sqlite3


def report_paths(conn: sqlite3.Connection, run_id: str, kind: str) -> list[tuple[int, str]]:
    """(module id, path) of every file of ``kind`` in the run that belongs to a module, in path order."""
    rows = conn.execute(
        "SELECT module_id, path FROM files WHERE run_id = ? AND kind = ? AND module_id IS NOT NULL ORDER BY path",
        (run_id, kind),
    )
    return [(int(module_id), str(path)) for module_id, path in rows]
