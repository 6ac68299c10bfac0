"""Pulling runs from a remote into a local store, many objects at once (the layout: :mod:`xlarun.store.remote_sync`).

A pull of several runs is a pipeline: each run's index object and record are read a few runs ahead, and every
object a run needs (the packs holding files the store lacks, its deltas, its folder's files) is fetched by a pool
of :data:`WORKERS` transfers while this thread commits and indexes the runs before it, in order. A pack two runs
need is fetched once. Every object is checked before it is used (a pack against its name and each member's digest,
a small object against its digest, a delta's output against the file's); a damaged one stops the pull naming it
(exit 3) and nothing of it is kept: the runs committed before it stay, the run that needed it is not committed.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from xlarun.errors import RefError, StoreError
from xlarun.safe_names import checked_run_id
from xlarun.store.facade import LocalStore
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_delta import DeltaRef, decode_delta
from xlarun.store.remote_records import (
    ReadOnce,
    checked_record,
    fetch_verified,
    in_order_ahead,
    missing_object,
    read_record,
    read_remote_json,
    remote_damage,
)
from xlarun.store.rows import StoredFile

#: Transfers at once (boto3's clients are safe to share between threads).
WORKERS = 8
#: Runs whose index object and record are read ahead of the one being committed.
RUNS_AHEAD = 4


@dataclass
class _Planned:
    """One run's record read and its objects asked for: what committing it waits on."""

    run_id: str
    files: list[StoredFile]
    packs: list[Future[None]]
    deltas: list[tuple[StoredFile, DeltaRef, Future[bytes]]]
    folder: dict[str, Future[bytes]]


class Puller:
    """Pulls runs of one remote into one store; ``count`` is told the size of every object fetched."""

    def __init__(self, store: LocalStore, remote: ObjectStore, count: Callable[[int], None]):
        self.store, self.remote, self.count = store, ReadOnce(remote), count
        self._packs: dict[str, Future[None]] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(WORKERS)

    def pull(self, run_ids: list[str]) -> tuple[list[str], list[str]]:
        """Pull each run this store does not have, in order: (pulled, already here)."""
        for run_id in run_ids:
            checked_run_id(run_id, "the run to pull")
        todo = [r for r in dict.fromkeys(run_ids) if not (self.store.runs_dir / r).exists()]
        already = [r for r in run_ids if r not in todo]
        pulled: list[str] = []
        ahead = ThreadPoolExecutor(RUNS_AHEAD)
        try:
            with self.store.lock():  # shared: gc (exclusive) deletes no pack while this writes
                for planned in in_order_ahead(ahead, self._plan, todo, RUNS_AHEAD):
                    pulled.append(self._commit(planned))
        finally:
            ahead.shutdown(cancel_futures=True)
            self._pool.shutdown(cancel_futures=True)
        return pulled, already

    def _plan(self, run_id: str) -> _Planned:
        """A run's index object and record read, and every object it needs asked of the pool."""
        index = read_remote_json(self.remote, f"runs/{run_id}.json", None)
        if index is None:
            raise RefError(
                f"no run {run_id} on {self.remote.spec.url}", f"`xlarun runs --remote {self.remote.spec.name}` lists them"
            )
        files, folder, packs, deltas = checked_record(read_record(self.remote, index, run_id), run_id)
        blobs = self.store.blobs
        lacking = {f.digest for f in files} - blobs.stored_of([f.digest for f in files])
        needed = {name for name, members in packs.items() if any(files[i].digest in lacking for i in members)}
        deltas = {i: ref for i, ref in deltas.items() if files[i].digest in lacking}
        bases = {ref.base: ref.base_pack for ref in deltas.values()}
        needed |= {bases[d] for d in bases.keys() - blobs.stored_of(list(bases))}
        return _Planned(
            run_id,
            files,
            [self._pack(name) for name in sorted(needed)],
            [(files[i], ref, self._pool.submit(self._frame, ref.key)) for i, ref in sorted(deltas.items())],
            {rel: self._pool.submit(self._small, f"files/{digest}.zst", digest) for rel, digest in folder.items()},
        )

    def _commit(self, planned: _Planned) -> str:
        """A planned run committed once its objects are here and checked; nothing of it stays when one is not."""
        run_id, staging = self.store.begin_run(planned.run_id)
        try:
            for pack in planned.packs:
                pack.result()
            self._store_deltas(planned.deltas)
            for rel, read in planned.folder.items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(read.result())
            self.store.commit_indexed(run_id, staging, planned.files, {})
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return run_id

    def _pack(self, name: str) -> Future[None]:
        """The fetch of a pack, asked once however many runs need it."""
        with self._guard:
            if name not in self._packs:
                self._packs[name] = self._pool.submit(self._fetch_pack, name)
            return self._packs[name]

    def _fetch_pack(self, name: str) -> None:
        blobs = self.store.blobs
        blobs.packs_dir.mkdir(parents=True, exist_ok=True)
        if blobs.pack_path(name).exists():  # a pack this store has under the same name holds the same bytes
            blobs.adopt_pack(_copy_aside(blobs.pack_path(name)), name)
            return
        tmp = blobs.packs_dir / f".tmp-remote-{name[:16]}-{os.getpid()}-{threading.get_ident()}"
        self.remote.download(f"packs/{name}.zst", tmp)
        size = tmp.stat().st_size
        try:
            blobs.adopt_pack(tmp, name)  # checked: its bytes hash to its name, each member to its digest
        except StoreError:
            raise remote_damage(f"packs/{name}.zst") from None
        self.count(size)

    def _frame(self, key: str) -> bytes:
        frame = self.remote.get(key)
        if frame is None:
            raise missing_object(key)
        self.count(len(frame))
        return frame

    def _small(self, key: str, digest: str) -> bytes:
        data = fetch_verified(self.remote, key, digest)
        self.count(len(data))
        return data

    def _store_deltas(self, wanted: list[tuple[StoredFile, DeltaRef, Future[bytes]]]) -> None:
        """Files held as deltas decoded against their base (now in this store), each checked against its digest,
        and stored; a damaged delta stops the pull naming it."""
        if not wanted:
            return
        decoded = []
        for entry, ref, frame in wanted:
            data = decode_delta(frame.result(), self.store.blobs.get(ref.base), entry.size, entry.digest)
            if data is None:
                raise remote_damage(ref.key)
            decoded.append(data)
        packer = self.store.blobs.packer()
        try:
            for data in decoded:
                packer.add(data)
            packer.close()
        except BaseException:
            packer.discard()
            raise


def _copy_aside(path: Path) -> Path:
    copy = path.with_name(f".tmp-relist-{path.name[:16]}-{os.getpid()}-{threading.get_ident()}")
    shutil.copyfile(path, copy)
    return copy
