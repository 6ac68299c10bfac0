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
from xlarun.bounded_read import MAX_RECORD_BYTES, read_store_json
from xlarun.errors import InputError

if TYPE_CHECKING:
    from xlarun.render.error_colours import ValueErrors
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import FileInfo, ModuleInfo

FOLDER = "bisections"


@dataclass
class BisectRecord:
    """One recorded bisection."""

    bisect_id: str
    started: str
    options: dict
    result: BisectResult


def record_bisection(store: LocalStore, result: BisectResult, options: dict, started: str | None = None) -> BisectRecord:
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
    data = read_store_json(Path(path), MAX_RECORD_BYTES)  # a FIFO or link there: StoreError, never waited on
    return BisectRecord(data["bisect_id"], data["started"], data.get("options", {}), BisectResult.from_dict(data["result"]))


def bisections_for(store: LocalStore, run_id: str, module_id: int | None = None) -> list[BisectRecord]:
    """The recorded bisections of a run (or of one of its modules), oldest first."""
    records = [load_record(p) for p in sorted((store.runs_dir / run_id / FOLDER).glob("*.json"))]
    if module_id is None:
        return records
    return [r for r in records if r.result.module_id in (module_id, None)]


def find_bisection(store: LocalStore, module: ModuleInfo, bisect_id: str) -> BisectRecord:
    """The recorded bisection of ``module`` that ``bisect_id`` names (an id or a unique prefix of one; ``latest``: the
    newest whose instruction search kept each value's error)."""
    records = bisections_for(store, module.run_id, module.module_id)
    if bisect_id == "latest":
        chosen = [r for r in records if (r.result.first_move or {}).get("value_errors")][-1:]
    else:
        chosen = [r for r in records if r.bisect_id.startswith(bisect_id)]
    if len(chosen) != 1:
        known = ", ".join(r.bisect_id for r in records[-5:]) or "none"
        what = (
            "no recorded bisection with per-value errors"
            if bisect_id == "latest"
            else f"{len(chosen)} bisections match {bisect_id!r}"
        )
        raise InputError(
            f"{what} for {module.ref}",
            f"`xlarun show {module.ref}` lists its bisections (the newest: {known}); `xlarun bisect {module.ref}` makes one",
        )
    return chosen[0]


@dataclass
class CulpritErrors:
    """A bisection's culprit step with each of its values' errors, as its instruction search kept them."""

    values: ValueErrors
    step: str  # "step 6 (after algsimp (simplification))"
    path: str  # the step's dump in the run
    file: FileInfo | None  # that dump among the module's files (None when it is not)


def culprit_errors(result: BisectResult, module: ModuleInfo) -> CulpritErrors | None:
    """The per-value errors of ``result`` and its culprit step's file; None when it kept none (no instruction
    search, or recorded before they were kept)."""
    from xlarun.bisect.first_move import FirstMove  # numpy and the replay comparison: only when there is one

    found = FirstMove.from_dict(result.first_move) if result.first_move else None
    if found is None or not found.value_errors:
        return None
    path = found.step_path or (result.error_after.path if result.error_after else "")
    step_file = next((f for f in module.files if f.path == path), None)
    return CulpritErrors(found.error_values(result.abs_tolerance, result.rel_tolerance), found.step, path, step_file)


def error_colouring(store: LocalStore, module: ModuleInfo, bisect_id: str) -> tuple[ValueErrors, FileInfo | None]:
    """``render --error-from``: the per-value errors of the bisection ``bisect_id`` names, and its culprit step's file."""
    culprit = culprit_errors(find_bisection(store, module, bisect_id).result, module)
    if culprit is None:
        raise InputError(
            f"bisection {bisect_id} kept no per-value errors (no instruction search, or recorded before they were kept)",
            f"`xlarun bisect {module.ref}` records a new one",
        )
    return culprit.values, culprit.file


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
