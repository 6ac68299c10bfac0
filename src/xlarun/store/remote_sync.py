"""Push runs to a remote, pull them back, list them: the team store's layout and its rules.

Below the remote's prefix (the whole layout: docs/remote.md)::

    packs/<name>.zst       a pack in the local store's format, named by its own hash: a push pack holding files no
                           remote object held (:mod:`xlarun.store.remote_push`), or a pack pushed by an older xlarun
    files/<digest>.zst     another file of a run's folder (manifest, spec, logs), zstd-compressed, named by the
                           BLAKE3 of its bytes (before compression)
    catalogs/<digest>.zst  a run's rows of the index (remote_index.py): modules, find, show answer from it
    records/<digest>.zst   a run's full record (JSON, compressed the same way): its files.json entries, which pack
                           holds which of them, its folder's files
    records/<d>.<base>.zst a record sent as a zstd delta against ``records/<base>.zst`` (the index names ``record_base``)
    deltas/...             files sent as deltas (:mod:`xlarun.store.remote_delta`)
    locks/...              push and gc locks, same-name pushes' turns (:mod:`xlarun.store.remote_locks`)
    runs/<run id>.json     the run's small index object, written last and once: the run exists on the remote
                           from that put on (``If-None-Match: *``: never overwritten)

Every object but ``runs/`` and ``locks/`` is named by its content, so writing it twice writes the same bytes: an interrupted push
leaves only objects nobody names yet, and the next push lists what is there and sends the rest. A pull verifies
every object it reads against its name before it is used; a damaged one is an error naming it (exit 3).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from xlarun.store.facade import LocalStore
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_delta import DeltaRef
from xlarun.store.remote_files import RemoteFiles
from xlarun.store.remote_pull import Puller
from xlarun.store.remote_push import WORKERS, PushSide
from xlarun.store.remote_records import remote_damage
from xlarun.store.store_json import parse_store_json

#: The index object's keys a listing shows.
SUMMARY_KEYS = ("name", "status", "started", "files", "bytes", "pushed")

Progress = Callable[["Transfer"], None]


@dataclass
class Transfer:
    """What a push or pull moved: objects and bytes sent (or fetched), those skipped as already there."""

    files: int = 0
    bytes: int = 0
    skipped_files: int = 0
    skipped_bytes: int = 0
    base_bytes: int = 0  # read back by a push: remote packs holding delta bases
    started: float = field(default_factory=time.monotonic)
    runs: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Bytes a second since the transfer began."""
        return self.bytes / max(time.monotonic() - self.started, 1e-6)

    def as_dict(self) -> dict:
        return {
            "runs": self.runs, "already_there": self.already, "files": self.files, "bytes": self.bytes,
            "skipped_files": self.skipped_files, "skipped_bytes": self.skipped_bytes,
            "base_bytes": self.base_bytes,
            "seconds": round(time.monotonic() - self.started, 3),
        }  # fmt: skip


class RemoteSync(PushSide):
    """Push and pull between one local store and one remote (the push half: :mod:`xlarun.store.remote_push`)."""

    def __init__(self, store: LocalStore, remote: ObjectStore, progress: Progress | None = None):
        self.store, self.remote, self.progress = store, remote, progress
        self.transfer = Transfer()
        self._files: RemoteFiles | None = None
        self._indexes: dict[str, dict | None] = {}
        self._remote_deltas: dict[str, DeltaRef] | None = None
        self._locked = False

    def _count(self, size: int, sent: bool = True) -> None:
        if sent:
            self.transfer.files += 1
            self.transfer.bytes += size
        else:
            self.transfer.skipped_files += 1
            self.transfer.skipped_bytes += size
        if self.progress:
            self.progress(self.transfer)

    # --- pull --------------------------------------------------------------------------------

    def pull(self, run_ids: list[str]) -> Transfer:
        """Fetch each run this store does not have: its record, the packs holding files the store lacks (each
        checked against its name and its members' digests), its deltas, its folder's files; then commit it as a
        local run. Many objects and runs are fetched at once (:mod:`xlarun.store.remote_pull`)."""
        pulled, already = Puller(self.store, self.remote, self._count).pull(run_ids)
        self.transfer.runs.extend(pulled)
        self.transfer.already.extend(already)
        return self.transfer

    def pull_run(self, run_id: str) -> bool:
        """Pull one run; False when this store already had it."""
        before = len(self.transfer.runs)
        self.pull([run_id])
        return len(self.transfer.runs) > before


def list_remote_runs(remote: ObjectStore, cache: Path | None = None) -> list[dict]:
    """Every run on a remote, oldest first, from its small index object alone (no record, no pack read). An index
    object is written once and never changed (only deleted, with its run), so with ``cache`` (a JSON file of the
    summaries read before) only the runs listed since are read; a run gone from the listing leaves the cache."""
    ids = sorted(n[:-5] for n in remote.names("runs/") if n.endswith(".json"))
    known = _cached_summaries(cache)

    def summary(run_id: str) -> dict:
        data = remote.get(f"runs/{run_id}.json")
        try:
            index = parse_store_json(data) if data is not None else {}
        except ValueError:
            index = None
        if not isinstance(index, dict):
            raise remote_damage(f"runs/{run_id}.json")
        return {"run": run_id, **{k: index.get(k) for k in SUMMARY_KEYS}}

    todo = [run_id for run_id in ids if run_id not in known]
    with ThreadPoolExecutor(WORKERS) as pool:
        known.update(zip(todo, pool.map(summary, todo), strict=True))
    listed = [known[run_id] for run_id in ids]
    if cache is not None and (todo or len(known) != len(ids)):
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps({r["run"]: r for r in listed}), encoding="utf-8")
        os.replace(partial, cache)  # whole or not at all: a reader never sees half of it
    return listed


def _cached_summaries(cache: Path | None) -> dict[str, dict]:
    """The summaries a cache file holds; nothing when it is missing or not what this writes (read again, then)."""
    try:
        value = json.loads(cache.read_text(encoding="utf-8")) if cache is not None else {}
    except (OSError, ValueError):
        return {}
    ok = isinstance(value, dict) and all(isinstance(v, dict) and v.get("run") == k for k, v in value.items())
    return value if ok else {}
