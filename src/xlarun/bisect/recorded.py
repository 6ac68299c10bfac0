"""Bisections are kept with the run they bisected, like replays.

Each bisection's :class:`BisectResult` is written as JSON into the store next to the run whose
module it bisected (``runs/<run>/bisections/<id>.json``); a rerun bisection goes with its baseline
run. The files are the truth: ``xlarun show REF`` and the HTML report read them, and a deleted run
takes its bisections with it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from xlarun.bisect.bisect_result import BisectResult

if TYPE_CHECKING:
    from xlarun.bisect.bisect_options import BisectOptions
    from xlarun.bisect.replay_mode import Log
    from xlarun.store.facade import Store
    from xlarun.store.records import ModuleInfo

FOLDER = "bisections"


@dataclass
class BisectRecord:
    """One recorded bisection."""

    bisect_id: str
    started: str
    options: dict
    result: BisectResult


def bisect_and_record(
    store: Store, module: ModuleInfo, options: BisectOptions, sink: Log | None = None
) -> tuple[BisectResult, BisectRecord]:
    """``xlarun bisect REF`` and ``Module.bisect()``: bisect ``module`` by replay and record the result with its run."""
    from xlarun.bisect.replay_mode import bisect_module

    started = now()
    result = bisect_module(store, module, options, sink)
    return result, record_bisection(store, result, options.to_dict(), started)


def record_bisection(store: Store, result: BisectResult, options: dict, started: str | None = None) -> BisectRecord:
    """Write the bisection's JSON record beside its run (``result.run_id``) and return it."""
    from xlarun.store.runs import new_run_id

    record = BisectRecord(new_run_id(), started or now(), options, result)
    folder = store.runs_dir / result.run_id / FOLDER if result.run_id else store.root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.bisect_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record_json(record), indent=1))
    os.replace(tmp, path)  # a reader never sees half a record
    return record


def record_json(record: BisectRecord) -> dict:
    return {
        "bisect_id": record.bisect_id,
        "started": record.started,
        "options": record.options,
        "result": record.result.to_dict(),
    }


def load_record(path: Path) -> BisectRecord:
    data = json.loads(Path(path).read_text())
    return BisectRecord(data["bisect_id"], data["started"], data.get("options", {}), BisectResult.from_dict(data["result"]))


def bisections_for(store: Store, run_id: str, module_id: int | None = None) -> list[BisectRecord]:
    """The recorded bisections of a run (or of one of its modules), oldest first."""
    records = [load_record(p) for p in sorted((store.runs_dir / run_id / FOLDER).glob("*.json"))]
    if module_id is None:
        return records
    return [r for r in records if r.result.module_id in (module_id, None)]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
