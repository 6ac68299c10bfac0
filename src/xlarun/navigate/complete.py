"""What a shell's Tab offers where a REF, a run, a stage or a pass is typed: values read from the store's index.

Called at each Tab, so each answer is one indexed SQLite query over the index opened read-only (nothing is created,
migrated or locked), and a store that is missing, damaged or busy completes nothing rather than fail the shell.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

#: At most this many values are offered (a shell lists them all).
LIMIT = 50
#: Stages and pass names come from the newest runs only (the files and passes tables grow with every run).
NEWEST_RUNS = 20
#: What --stage takes besides the stage names a store holds (xlarun.navigate.select's short forms).
STAGE_WORDS = ("before", "after")


def _query(store: Path, sql: str, args: tuple) -> list[str]:
    index = store / "index.sqlite"
    if not index.is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=0.2)
        try:
            return [row[0] for row in conn.execute(sql, args) if isinstance(row[0], str)]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _prefix_range(prefix: str) -> tuple[str, str]:
    """Bounds that make ``col >= low AND col < high`` a prefix match an index can answer."""
    return prefix, prefix + "\U0010ffff"


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))[:LIMIT]


def complete_runs(store: Path, incomplete: str) -> list[str]:
    """Run ids (newest first) and spec names that start with ``incomplete``, and 'latest'."""
    low, high = _prefix_range(incomplete)
    ids = _query(
        store, "SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id DESC LIMIT ?", (low, high, LIMIT)
    )
    names = _query(store, "SELECT DISTINCT name FROM runs WHERE name >= ? AND name < ? ORDER BY name LIMIT ?", (low, high, LIMIT))
    return _unique([*(["latest"] if "latest".startswith(incomplete) else []), *names, *ids])


def complete_modules(store: Path, incomplete: str) -> list[str]:
    """Module names that start with ``incomplete`` (or with ``jit_`` + it), or ``RUN/NAME`` once a run is typed."""
    if "/" in incomplete:
        run, _, name = incomplete.partition("/")
        runs = _query(store, "SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? LIMIT 2", _prefix_range(run))
        if len(runs) != 1:
            return []
        low, high = _prefix_range(name)
        in_run = _query(
            store,
            "SELECT DISTINCT name FROM modules WHERE run_id = ? AND name >= ? AND name < ? ORDER BY name LIMIT ?",
            (runs[0], low, high, LIMIT),
        )
        return [f"{runs[0]}/{n}" for n in in_run]
    found: list[str] = []
    for prefix in (incomplete, f"jit_{incomplete}") if incomplete and not incomplete.startswith("jit_") else (incomplete,):
        low, high = _prefix_range(prefix)
        found += _query(
            store, "SELECT DISTINCT name FROM modules WHERE name >= ? AND name < ? ORDER BY name LIMIT ?", (low, high, LIMIT)
        )
    return _unique(found)


def complete_stages(store: Path, incomplete: str) -> list[str]:
    """--stage values: before, after, the stages of the newest runs' modules as ``show`` names them
    (before_optimizations, cpu_after_optimizations) and the reports cat can print (buffer-assignment...)."""
    index = store / "index.sqlite"
    found: list[str] = list(STAGE_WORDS)
    try:
        conn = sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=0.2) if index.is_file() else None
        if conn is not None:
            try:
                rows = conn.execute(
                    "SELECT DISTINCT backend, stage, kind FROM files WHERE stage IS NOT NULL AND run_id IN"
                    " (SELECT run_id FROM runs ORDER BY run_id DESC LIMIT ?) LIMIT 500",
                    (NEWEST_RUNS,),
                ).fetchall()
            finally:
                conn.close()
            for backend, stage, kind in sorted(rows, key=lambda r: (r[2] != "hlo", not str(r[1]).startswith("before"), str(r))):
                if kind == "hlo":
                    found += [stage, f"{backend}_{stage}" if backend else stage]
                elif isinstance(kind, str):
                    found.append(kind)  # a report: buffer-assignment, memory-usage-report, live-range
    except sqlite3.Error:
        pass
    return _unique(v for v in found if isinstance(v, str) and v.startswith(incomplete))


def complete_passes(store: Path, incomplete: str) -> list[str]:
    """--pass values: the pass names of the newest runs' pass-by-pass dumps."""
    low, high = _prefix_range(incomplete)
    return _query(
        store,
        "SELECT DISTINCT after_pass FROM passes WHERE run_id IN (SELECT run_id FROM runs ORDER BY run_id DESC LIMIT ?)"
        " AND after_pass >= ? AND after_pass < ? ORDER BY after_pass LIMIT ?",
        (NEWEST_RUNS, low, high, LIMIT),
    )
