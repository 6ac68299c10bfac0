"""Replays are runs too: the record stage keeps a record of every replay.

Each replay's full :class:`ReplayResult` is written as JSON into the store, the truth, next to
the run whose module it replayed (``runs/<run>/replays/<replay id>.json``; replays of files
outside the store go to ``replays/``). The ``replays`` table of the index is derived from those
files: it is created on first use and refilled from them whenever the index was rebuilt, and a
deleted run takes its replays with it. ``xlarun show REF`` lists a module's replays.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.bounded_read import MAX_RECORD_BYTES, read_store_json
from xlarun.replay.options import ReplayOptions
from xlarun.replay.result import ReplayResult

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore

REPLAYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS replays (
    replay_id TEXT PRIMARY KEY, run_id TEXT, module_id INTEGER, module_name TEXT, source TEXT,
    engine TEXT, platform TEXT, reference_platform TEXT, input_kind TEXT, arguments TEXT,
    fell_back_to TEXT, route TEXT, compile_s REAL, min_s REAL, median_s REAL, iterations INTEGER,
    max_abs_error REAL, max_rel_error REAL, verdict TEXT, exit_code INTEGER, started TEXT,
    duration_s REAL, record_path TEXT
);
CREATE INDEX IF NOT EXISTS replays_module ON replays(run_id, module_id);
"""
_COLUMNS = (
    "replay_id",
    "run_id",
    "module_id",
    "module_name",
    "source",
    "engine",
    "platform",
    "reference_platform",
    "input_kind",
    "arguments",
    "fell_back_to",
    "route",
    "compile_s",
    "min_s",
    "median_s",
    "iterations",
    "max_abs_error",
    "max_rel_error",
    "verdict",
    "exit_code",
    "started",
    "duration_s",
    "record_path",
)


@dataclass
class ReplayRecord:
    """One recorded replay: where it ran, on what, and its result."""

    replay_id: str
    run_id: str | None
    module_id: int | None
    started: str
    duration_s: float
    options: dict
    result: ReplayResult


def record_replay(
    store: LocalStore,
    result: ReplayResult,
    options: ReplayOptions,
    started: str,
    duration_s: float,
    run_id: str | None = None,
    module_id: int | None = None,
) -> ReplayRecord:
    """Write the replay's JSON record into the store and its row into the index."""
    from xlarun.store.runs import new_run_id

    record = ReplayRecord(new_run_id(), run_id, module_id, started, duration_s, options.to_dict(), result)
    folder = (store.runs_dir / run_id / "replays") if run_id else (store.root / "replays")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.replay_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_record_json(record), indent=1))
    os.replace(tmp, path)  # a reader never sees half a record
    index = _index(store)
    with index.transaction() as conn:
        _insert(conn, record, str(path.relative_to(store.root)))
    return record


def replays_for(store: LocalStore, run_id: str, module_id: int) -> list[ReplayRecord]:
    """The recorded replays of one module, oldest first."""
    rows = (
        _index(store)
        .conn.execute("SELECT record_path FROM replays WHERE run_id=? AND module_id=? ORDER BY replay_id", (run_id, module_id))
        .fetchall()
    )
    return [load_record(store.root / row[0]) for row in rows]


def load_record(path: Path) -> ReplayRecord:
    data = read_store_json(Path(path), MAX_RECORD_BYTES)  # a FIFO or link there: StoreError, never waited on
    return ReplayRecord(
        data["replay_id"],
        data.get("run_id"),
        data.get("module_id"),
        data["started"],
        data["duration_s"],
        data.get("options", {}),
        ReplayResult.from_dict(data["result"]),
    )


# ---- the index table, derived from the JSON records ----


def _index(store: LocalStore) -> Any:
    """The store's index with the replays table present and holding every record on disk."""
    index = store.index
    index.conn.executescript(REPLAYS_SCHEMA)
    known = {row[0] for row in index.conn.execute("SELECT replay_id FROM replays")}
    live_runs = {row[0] for row in index.conn.execute("SELECT run_id FROM runs")}
    missing = []
    for path in list(store.runs_dir.glob("*/replays/*.json")) + list((store.root / "replays").glob("*.json")):
        if path.stem not in known:
            record = load_record(path)
            if record.run_id is None or record.run_id in live_runs:
                missing.append((record, str(path.relative_to(store.root))))
    if missing:
        with index.transaction() as conn:
            for record, rel in missing:
                _insert(conn, record, rel)
    return index


def _insert(conn: Any, record: ReplayRecord, record_path: str) -> None:
    r = record.result
    values = (
        record.replay_id,
        record.run_id,
        record.module_id,
        r.module_name,
        r.source,
        r.engine,
        r.platform,
        record.options.get("reference_platform"),
        r.input_kind,
        r.arguments,
        r.fell_back_to,
        r.route,
        r.compile_s,
        r.min_s,
        r.median_s,
        len(r.run_times_s),
        r.max_abs_error,
        r.max_rel_error,
        r.verdict,
        int(r.exit_code),
        record.started,
        record.duration_s,
        record_path,
    )
    conn.execute(f"INSERT OR REPLACE INTO replays ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", values)


def _record_json(record: ReplayRecord) -> dict:
    return {
        "replay_id": record.replay_id,
        "run_id": record.run_id,
        "module_id": record.module_id,
        "started": record.started,
        "duration_s": record.duration_s,
        "options": record.options,
        "result": record.result.to_dict(),
    }
