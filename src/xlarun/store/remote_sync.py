"""Push runs to a remote, pull them back, list them: the team store's layout and its rules.

Below the remote's prefix (the whole layout: docs/remote.md)::

    packs/<name>.zst       a local pack, byte for byte (named by its own hash: the same pack is sent once)
    files/<digest>.zst     another file of a run's folder (manifest, spec, logs), zstd-compressed, named by the
                           BLAKE3 of its bytes (before compression)
    catalogs/<digest>.zst  a run's rows of the index (remote_index.py): modules, find, show answer from it
    records/<digest>.zst   a run's full record (JSON, compressed the same way): its files.json entries, which pack
                           holds which of them, its folder's files
    records/<d>.<base>.zst a record sent as a zstd delta against ``records/<base>.zst`` (the index names ``record_base``)
    deltas/...             files sent as deltas (:mod:`xlarun.store.remote_delta`)
    locks/...              push and gc locks (:mod:`xlarun.store.remote_locks`)
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
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from xlarun.killpoints import kill_point
from xlarun.store.facade import LocalStore
from xlarun.store.pack_format import content_digest
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_delta import (
    DELTA_MAX_BYTES,
    BaseFile,
    BaseFinder,
    DeltaRef,
    delta_worth_it,
    encode_delta,
    parse_delta_name,
)
from xlarun.store.remote_index import run_catalog
from xlarun.store.remote_locks import remote_lock
from xlarun.store.remote_pull import Puller
from xlarun.store.remote_records import (
    RECORD_FORMAT,
    RECORD_FORMAT_DELTAS,
    fetch_verified,
    read_remote_json,
    remote_damage,
)
from xlarun.store.rows import StoredFile
from xlarun.store.store_json import parse_store_json

#: The runs of the same name whose files are looked at as delta bases (the latest).
BASE_RUNS = 20
#: The runs of the same name whose index objects are read for a record to send the run's record against.
RECORD_BASE_RUNS = 5
#: Transfers at once: object stores answer many small requests in parallel much faster than in sequence.
WORKERS = 8
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
            "seconds": round(time.monotonic() - self.started, 3),
        }  # fmt: skip


def _run_folder_files(folder: Path) -> dict[str, Path]:
    """A committed run's own files but files.json (the record holds it), by their path in the folder."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and rel not in ("files.json", "owner.pid"):
            found[rel] = path
    return found


def _index_object(run_id: str, record_digest: str, manifest: dict, files: list[StoredFile]) -> dict:
    return {
        "format": RECORD_FORMAT, "run": run_id, "record": record_digest,
        "name": manifest.get("name"), "status": manifest.get("status"),
        "started": manifest.get("started"), "tags": manifest.get("tags") or {},
        "files": len(files), "bytes": sum(f.size for f in files),
        "pushed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip


class RemoteSync:
    """Push and pull between one local store and one remote."""

    def __init__(self, store: LocalStore, remote: ObjectStore, progress: Progress | None = None):
        self.store, self.remote, self.progress = store, remote, progress
        self.transfer = Transfer()
        self._remote_packs: set[str] | None = None
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

    # --- push --------------------------------------------------------------------------------

    def push(self, run_ids: list[str]) -> Transfer:
        """Send each run the remote does not have: its packs the remote lacks, its folder's files, its record, and
        last its index object. A run already there is left as it is (listed in ``already``)."""
        with ExitStack() as locks:
            for run_id in run_ids:
                self.push_run(run_id, locks)
        return self.transfer

    def push_run(self, run_id: str, locks: ExitStack | None = None) -> bool:
        """Push one run; False when the remote already had it. A push lock is held on the remote from the first
        object sent (see :mod:`xlarun.store.remote_locks`): until ``locks`` closes, or until this run is published."""
        if self.remote.exists(f"runs/{run_id}.json"):
            self.transfer.already.append(run_id)
            return False
        if locks is None:
            with ExitStack() as own:
                return self.push_run(run_id, own)
        if not self._locked:
            locks.enter_context(remote_lock(self.remote, "push"))
            self._locked = True
            locks.callback(self._unlocked)
        with self.store.lock():  # shared: gc (exclusive) deletes no pack while it is read
            return self._push_run(run_id)

    def _unlocked(self) -> None:
        """What was listed under the lock is forgotten with it: a gc may delete once it is gone."""
        self._locked, self._remote_packs, self._remote_deltas = False, None, None

    def _push_run(self, run_id: str) -> bool:
        files = self.store.stored_files(run_id)
        manifest = self.store.manifest(run_id)
        by_pack: dict[str, list[int]] = {}
        for i, entry in enumerate(files):
            by_pack.setdefault(self.store.blobs.pack_of(entry.digest), []).append(i)
        deltas = self._send_deltas(run_id, manifest.get("name"), files, by_pack)
        sent_as_delta = {i for i in deltas}
        by_pack = {name: kept for name, members in by_pack.items() if (kept := [i for i in members if i not in sent_as_delta])}
        self._send_packs(sorted(by_pack))
        folder = {}
        for rel, path in _run_folder_files(self.store.run_path(run_id)).items():
            data = path.read_bytes()
            folder[rel] = digest = content_digest(data)
            self._send_small(f"files/{digest}.zst", data)
        record = {"format": RECORD_FORMAT_DELTAS if deltas else RECORD_FORMAT, "run": run_id, "folder": folder,
                  "packs": by_pack, "files": [{"path": f.path, "digest": f.digest, "size": f.size} for f in files]}  # fmt: skip
        if deltas:
            record["deltas"] = {str(i): [ref.base, ref.base_pack] for i, ref in sorted(deltas.items())}
        record_bytes = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        record_digest = content_digest(record_bytes)
        index_object = _index_object(run_id, record_digest, manifest, files)
        base = self._record_base(run_id, manifest.get("name"))
        delta = encode_delta(record_bytes, base[1]) if base is not None else b""
        if base is not None and delta_worth_it(len(record_bytes), len(delta)):
            index_object["record_base"] = base[0]
            self._send_once(f"records/{record_digest}.{base[0]}.zst", delta)
        else:
            self._send_small(f"records/{record_digest}.zst", record_bytes)
        catalog = run_catalog(self.store.index, run_id)  # the run's index rows: found on the remote without a blob
        self._send_small(f"catalogs/{content_digest(catalog)}.zst", catalog)
        index_object["catalog"] = content_digest(catalog)
        kill_point("remote-record-sent")
        index = json.dumps(index_object, sort_keys=True).encode()
        if not self.remote.put_once(f"runs/{run_id}.json", index):  # another push published it meanwhile
            self.transfer.already.append(run_id)
            return False
        self.transfer.runs.append(run_id)
        return True

    def _remote_holdings(self) -> tuple[set[str], dict[str, DeltaRef]]:
        """The packs the remote holds and the files it holds as deltas (listed once a push)."""
        if self._remote_packs is None:
            self._remote_packs = {n[:-4] for n in self.remote.names("packs/") if n.endswith(".zst")}
        if self._remote_deltas is None:
            listed = (parse_delta_name(n) for n in self.remote.names("deltas/"))
            self._remote_deltas = {ref.digest: ref for ref in listed if ref is not None}
        return self._remote_packs, self._remote_deltas

    def _send_deltas(
        self, run_id: str, name: object, files: list[StoredFile], by_pack: dict[str, list[int]]
    ) -> dict[int, DeltaRef]:
        """The run's files sent (or found) as deltas, by their place in its list: those of each pack the remote lacks,
        when every one of its files is a delta the remote has or a worthwhile new one; the other packs go whole."""
        remote_packs, remote_deltas = self._remote_holdings()
        missing = {p: members for p, members in by_pack.items() if p not in remote_packs}
        if not missing:
            return {}
        finder = self._base_finder(run_id, name, remote_packs)
        chosen: dict[int, DeltaRef] = {}
        for members in missing.values():
            planned: dict[int, tuple[DeltaRef, bytes | None]] = {}
            for i in members:
                entry = files[i]
                held = remote_deltas.get(entry.digest)
                if held is not None and held.base_pack in remote_packs:  # a delta is used only with its base there
                    planned[i] = (held, None)
                    continue
                base = finder.base_of(entry.path, entry.digest) if entry.size <= DELTA_MAX_BYTES else None
                if base is None:
                    break
                delta = encode_delta(self.store.blobs.get(entry.digest), self.store.blobs.get(base.digest))
                if not delta_worth_it(entry.size, len(delta)):
                    break
                planned[i] = (DeltaRef(entry.digest, base.digest, base.pack), delta)
            else:
                for i, (ref, encoded) in planned.items():
                    if encoded is None:
                        self._count(files[i].size, sent=False)
                    elif remote_deltas.get(ref.digest) != ref:
                        self.remote.put(ref.key, encoded)
                        remote_deltas[ref.digest] = ref
                        self._count(len(encoded))
                    chosen[i] = ref
                kill_point("remote-delta-sent")
        return chosen

    def _base_finder(self, run_id: str, name: object, remote_packs: set[str]) -> BaseFinder:
        """Bases from the files of this store's other runs of the same name (the latest first) held in remote packs."""
        finder = BaseFinder()
        others = [r.run_id for r in self.store.index.runs(name=name) if r.run_id != run_id] if isinstance(name, str) else []
        for other in reversed(others[-BASE_RUNS:]):
            for entry in self.store.stored_files(other):
                pack = self.store.blobs.pack_of(entry.digest)
                if pack in remote_packs and entry.size <= DELTA_MAX_BYTES:
                    finder.add(entry.path, BaseFile(entry.digest, pack))
        return finder

    def _send_packs(self, names: list[str]) -> None:
        remote_packs, _ = self._remote_holdings()
        missing = [n for n in names if n not in remote_packs]
        for name in names:
            if name in remote_packs:
                self._count(self.store.blobs.pack_path(name).stat().st_size, sent=False)

        def send(name: str) -> None:
            path = self.store.blobs.pack_path(name)
            self.remote.upload(f"packs/{name}.zst", path)
            kill_point("remote-pack-sent")
            self._count(path.stat().st_size)

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(send, missing))
        remote_packs.update(missing)

    def _record_base(self, run_id: str, name: object) -> tuple[str, bytes] | None:
        """The record of the latest other run of this name the remote holds whole (a record sent whole: a delta's
        base is never a delta), as (digest, bytes); None when there is none among the last few."""
        others = [r.run_id for r in self.store.index.runs(name=name) if r.run_id != run_id] if isinstance(name, str) else []
        for other in reversed(others[-RECORD_BASE_RUNS:]):
            index = read_remote_json(self.remote, f"runs/{other}.json", None)
            if index is not None and index.get("record_base") is None and isinstance(index.get("record"), str):
                return index["record"], fetch_verified(self.remote, f"records/{index['record']}.zst", index["record"])
        return None

    def _send_once(self, key: str, data: bytes) -> None:
        """An object named by its content, sent as it is unless the remote has it."""
        if self.remote.exists(key):
            self._count(len(data), sent=False)
            return
        self.remote.put(key, data)
        self._count(len(data))

    def _send_small(self, key: str, data: bytes) -> None:
        """A small object named by its content, compressed, sent unless the remote has it."""
        packed = zstandard.ZstdCompressor(level=9, write_checksum=True).compress(data)
        if self.remote.exists(key):
            self._count(len(packed), sent=False)
            return
        self.remote.put(key, packed)
        self._count(len(packed))

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
