"""Push: a local run sent to a remote, each file's bytes sent only when no remote object holds them yet.

A file some remote pack holds (whichever store pushed it: :mod:`xlarun.store.remote_files`) is named in the record
by that pack; a file the remote holds as a delta, or that is worth sending as one against a like file of an earlier
run of the same name (:mod:`xlarun.store.remote_delta`), goes as a delta; the rest go in push packs cut by their
digests, so two hosts sending the same new files at once send the same objects. The run's small objects (folder
files, record, catalog) go 8 at once, each one put that the server refuses when it has the key; the run's index
object is published last.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING

import zstandard

from xlarun.killpoints import kill_point
from xlarun.store.facade import LocalStore
from xlarun.store.pack_format import content_digest
from xlarun.store.packs import STREAM_BYTES
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_bases import RemotePackReader, add_remote_bases, remote_runs_named
from xlarun.store.remote_delta import (
    DELTA_MAX_BYTES,
    BaseFile,
    BaseFinder,
    DeltaRef,
    delta_worth_it,
    encode_delta,
    parse_delta_name,
)
from xlarun.store.remote_files import RemoteFiles, build_pack, push_pack_groups
from xlarun.store.remote_index import mirror_root, run_catalog
from xlarun.store.remote_locks import remote_lock, same_name_turn
from xlarun.store.remote_records import (
    DELTA_OBJECTS,
    RECORD_FORMAT,
    RECORD_FORMAT_DELTAS,
    fetch_verified,
    read_remote_json,
)
from xlarun.store.rows import StoredFile

if TYPE_CHECKING:
    from pathlib import Path

    from xlarun.store.remote_sync import Transfer

#: The runs of the same name whose files are looked at as delta bases (the latest).
BASE_RUNS = 20
#: The runs of the same name whose index objects are read for a record to send the run's record against.
RECORD_BASE_RUNS = 5
#: Transfers at once: object stores answer many small requests in parallel much faster than in sequence.
WORKERS = 8


def run_folder_files(folder: Path) -> dict[str, Path]:
    """A committed run's own files but files.json (the record holds it), by their path in the folder."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and rel not in ("files.json", "owner.pid"):
            found[rel] = path
    return found


def files_cache(remote: ObjectStore) -> Path:
    """Where the remote's pack headers read are kept: beside its mirror (``runs --remote`` keeps its summaries there)."""
    mirror = mirror_root(remote.spec)
    return mirror.with_name(f"{mirror.name}.packs.json")


def index_object(run_id: str, record_digest: str, manifest: dict, files: list[StoredFile]) -> dict:
    return {
        "format": RECORD_FORMAT, "run": run_id, "record": record_digest,
        "name": manifest.get("name"), "status": manifest.get("status"),
        "started": manifest.get("started"), "tags": manifest.get("tags") or {},
        "files": len(files), "bytes": sum(f.size for f in files),
        "pushed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip


def _compressed(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=9, write_checksum=True).compress(data)


class PushSide:
    """The push half of :class:`xlarun.store.remote_sync.RemoteSync` (which gives the store, remote and counting)."""

    store: LocalStore
    remote: ObjectStore
    transfer: Transfer
    _files: RemoteFiles | None
    _remote_deltas: dict[str, DeltaRef] | None
    _locked: bool
    _same_name: tuple[str, list[tuple[str, dict]]] | None = None
    _indexes: dict[str, dict | None]  # remote index objects read by this push (never changed once written)

    def _count(self, size: int, sent: bool = True) -> None:
        raise NotImplementedError

    def push(self, run_ids: list[str]) -> Transfer:
        """Send each run the remote does not have: the files no remote object holds, its folder's files, its
        record, and last its index object. A run already there is left as it is (listed in ``already``)."""
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
        name = self.store.manifest(run_id).get("name")
        with self.store.lock(), ExitStack() as turn:  # shared: gc (exclusive) deletes no pack while it is read
            if isinstance(name, str):  # pushes of the same program at once: one sends its new files, the others find them
                turn.enter_context(same_name_turn(self.remote, name))
                self._files = None  # read again in the turn: what the pushes before it sent
            return self._push_run(run_id)

    def _unlocked(self) -> None:
        """What was listed under the lock is forgotten with it: a gc may delete once it is gone."""
        self._locked, self._files, self._remote_deltas = False, None, None

    def _push_run(self, run_id: str) -> bool:
        files = self.store.stored_files(run_id)
        manifest = self.store.manifest(run_id)
        view, _deltas = self._remote_holdings()
        by_pack: dict[str, list[int]] = {}
        lacking: dict[str, list[int]] = {}  # by local pack: the files no remote pack holds
        for i, entry in enumerate(files):
            held = view.pack_of(entry.digest)
            if held is not None:
                by_pack.setdefault(held, []).append(i)
            else:
                lacking.setdefault(self.store.blobs.pack_of(entry.digest), []).append(i)
        held_bytes = sum(files[i].size for members in by_pack.values() for i in members)
        if held_bytes:
            self._count(held_bytes, sent=False)
        with ThreadPoolExecutor(WORKERS) as pool:  # one pool a run: its small objects go while its packs do
            folder, catalog, sending = self._send_folder_and_catalog(run_id, manifest.get("name"), pool)
            deltas = self._send_deltas(run_id, manifest.get("name"), files, lacking)
            rest = sorted(i for members in lacking.values() for i in members if i not in deltas)
            self._send_new_files([files[i] for i in rest], pool)
            for i in rest:  # now in a push pack
                by_pack.setdefault(str(view.pack_of(files[i].digest)), []).append(i)
            by_pack = {name: sorted(members) for name, members in sorted(by_pack.items())}
            index = self._send_record(run_id, manifest, files, folder, by_pack, deltas, pool)
            index.update(catalog)
            for sent in sending:
                sent.result()
        kill_point("remote-record-sent")
        if not self.remote.put_once(f"runs/{run_id}.json", json.dumps(index, sort_keys=True).encode()):
            self.transfer.already.append(run_id)  # another push published it meanwhile
            return False
        self.transfer.runs.append(run_id)
        return True

    def _send_folder_and_catalog(
        self, run_id: str, name: object, pool: ThreadPoolExecutor
    ) -> tuple[dict[str, str], dict[str, str], list[Future]]:
        """The run's folder files and its catalog (its index rows: found on the remote without a blob), compressed and
        handed to ``pool``: the folder's files by digest, the index object's keys naming the catalog (and the base
        it was sent as a delta against, a same-name run's catalog: most rows differ by the run id alone), the sends."""
        folder, sending = {}, []
        for rel, path in run_folder_files(self.store.run_path(run_id)).items():
            data = path.read_bytes()
            folder[rel] = digest = content_digest(data)
            sending.append(pool.submit(self._send_once, f"files/{digest}.zst", _compressed(data)))
        catalog = run_catalog(self.store.index, run_id)
        named = {"catalog": content_digest(catalog)}
        base = self._whole_base(run_id, name, "catalog")
        delta = encode_delta(catalog, base[1]) if base is not None else b""
        if base is not None and delta_worth_it(len(catalog), len(delta)):
            named["catalog_base"] = base[0]
            sending.append(pool.submit(self._send_once, f"catalogs/{named['catalog']}.{base[0]}.zst", delta))
        else:
            sending.append(pool.submit(self._send_once, f"catalogs/{named['catalog']}.zst", _compressed(catalog)))
        return folder, named, sending

    def _send_record(
        self,
        run_id: str,
        manifest: dict,
        files: list[StoredFile],
        folder: dict[str, str],
        by_pack: dict[str, list[int]],
        deltas: dict[int, DeltaRef],
        pool: ThreadPoolExecutor,
    ) -> dict:
        """The run's record sent (through ``pool``: the caller waits), whole or as a delta; its index object."""
        record = {"format": RECORD_FORMAT_DELTAS if deltas else RECORD_FORMAT, "run": run_id, "folder": folder,
                  "packs": by_pack, "files": [{"path": f.path, "digest": f.digest, "size": f.size} for f in files]}  # fmt: skip
        if deltas:
            record["deltas"] = {str(i): [ref.base, ref.base_pack] for i, ref in sorted(deltas.items())}
        record_bytes = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        record_digest = content_digest(record_bytes)
        index = index_object(run_id, record_digest, manifest, files)
        base = self._whole_base(run_id, manifest.get("name"), "record")
        delta = encode_delta(record_bytes, base[1]) if base is not None else b""
        if base is not None and delta_worth_it(len(record_bytes), len(delta)):
            index["record_base"] = base[0]
            self._send_once(f"records/{record_digest}.{base[0]}.zst", delta)
        else:
            self._send_once(f"records/{record_digest}.zst", _compressed(record_bytes))
        return index

    def _remote_holdings(self) -> tuple[RemoteFiles, dict[str, DeltaRef]]:
        """The files the remote holds in packs and those it holds as deltas (listed once a push, under its lock)."""
        if self._files is None:
            self._files = RemoteFiles.read(self.remote, files_cache(self.remote))
        if self._remote_deltas is None:
            listed = (parse_delta_name(n) for n in self.remote.names("deltas/"))
            self._remote_deltas = {ref.digest: ref for ref in listed if ref is not None}
        return self._files, self._remote_deltas

    def _send_deltas(
        self, run_id: str, name: object, files: list[StoredFile], lacking: dict[str, list[int]]
    ) -> dict[int, DeltaRef]:
        """The lacking files sent (or found) as deltas, by their place in the run's list: a file the remote holds as a
        delta (its base there), or one whose delta against a like file the remote holds is worth sending; the others
        go in push packs. Like files are looked for in this store's runs of the same name, then the remote's."""
        places = sorted(i for members in lacking.values() for i in members if files[i].size <= DELTA_MAX_BYTES)
        if not places:
            return {}
        view, remote_deltas = self._remote_holdings()
        finder = self._base_finder(run_id, name, view)
        add_remote_bases(finder, self.remote, view, self._remote_runs_named(run_id, name))
        reader = RemotePackReader(self.remote)
        chosen: dict[int, DeltaRef] = {}
        for i in places:
            entry = files[i]
            held = remote_deltas.get(entry.digest)
            if held is not None and held.base_pack in view.members:  # a delta is used only with its base there
                self._count(entry.size, sent=False)
                chosen[i] = held
                continue
            base = finder.base_of(entry.path, entry.digest)
            if base is None:
                continue
            if self.store.blobs.has(base.digest):
                base_bytes: bytes | None = self.store.blobs.get(base.digest)
            else:
                base_bytes = reader.get(base.pack, base.digest)
            if base_bytes is None:
                continue
            delta = encode_delta(self.store.blobs.get(entry.digest), base_bytes)
            if not delta_worth_it(entry.size, len(delta)):
                continue
            ref = DeltaRef(entry.digest, base.digest, base.pack)
            self.remote.put(ref.key, delta)
            remote_deltas[ref.digest] = chosen[i] = ref
            self._count(len(delta))
            kill_point("remote-delta-sent")
        self.transfer.base_bytes += reader.fetched_bytes
        return chosen

    def _base_finder(self, run_id: str, name: object, view: RemoteFiles) -> BaseFinder:
        """Bases from the files of this store's other runs of the same name (the latest first) held in remote packs."""
        finder = BaseFinder()
        others = [r.run_id for r in self.store.index.runs(name=name) if r.run_id != run_id] if isinstance(name, str) else []
        for other in reversed(others[-BASE_RUNS:]):
            for entry in self.store.stored_files(other):
                pack = view.pack_of(entry.digest)
                if pack is not None and entry.size <= DELTA_MAX_BYTES:
                    finder.add(entry.path, BaseFile(entry.digest, pack))
        return finder

    def _send_new_files(self, files: list[StoredFile], pool: ThreadPoolExecutor) -> None:
        """Files no remote object holds, in push packs (built and sent through ``pool``, 8 at once). A file streamed into a local pack of
        its own (a large one) goes as that pack: its bytes, hence its name, are the same on every host."""
        view, _deltas = self._remote_holdings()
        alone = {f.digest for f in files if f.size > STREAM_BYTES}
        groups = [[f] for f in files if f.digest in alone] + push_pack_groups([f for f in files if f.digest not in alone])

        def send(group: list[StoredFile]) -> tuple[str, list[str]]:
            if group[0].digest in alone:
                name = self.store.blobs.pack_of(group[0].digest)
                path = self.store.blobs.pack_path(name)
                if self.remote.exists(f"packs/{name}.zst"):  # sent by another host meanwhile
                    self._count(path.stat().st_size, sent=False)
                else:
                    self.remote.upload(f"packs/{name}.zst", path)
                    self._count(path.stat().st_size)
            else:
                name, body = build_pack([(f.digest, self.store.blobs.get(f.digest)) for f in group])
                if not self.remote.put_once(f"packs/{name}.zst", body):
                    self._count(len(body), sent=False)  # the same files, sent by another host meanwhile
                else:
                    self._count(len(body))
            kill_point("remote-pack-sent")
            return name, [f.digest for f in group]

        for name, digests in pool.map(send, groups):
            view.add(name, digests)

    def _remote_runs_named(self, run_id: str, name: object) -> list[tuple[str, dict]]:
        """The latest remote runs of this name, whoever pushed them (read once a run)."""
        if self._same_name is None or self._same_name[0] != run_id:
            self._same_name = (run_id, remote_runs_named(self.remote, name, run_id, self._indexes))
        return self._same_name[1]

    def _whole_base(self, run_id: str, name: object, kind: str) -> tuple[str, bytes] | None:
        """The record or catalog (``kind``) of the latest other run of this name the remote holds whole, or the whole
        one that run's was sent against (a delta's base is never a delta), as (digest, bytes): this store's runs
        first, then any host's; None when there is none among the last few."""
        others = [r.run_id for r in self.store.index.runs(name=name) if r.run_id != run_id] if isinstance(name, str) else []
        local = (read_remote_json(self.remote, f"runs/{other}.json", None) for other in reversed(others[-RECORD_BASE_RUNS:]))
        for index in itertools.chain(local, (index for _other, index in self._remote_runs_named(run_id, name))):
            whole = (index or {}).get(f"{kind}_base") or (index or {}).get(kind)
            if isinstance(whole, str) and re.fullmatch(r"[0-9a-f]{64}", whole):
                return whole, fetch_verified(self.remote, f"{DELTA_OBJECTS[kind]}/{whole}.zst", whole)
        return None

    def _send_once(self, key: str, data: bytes) -> None:
        """An object named by its content, put unless the remote has it: one request (the server refuses the key
        it has), not a look-up and a put."""
        self._count(len(data), sent=self.remote.put_once(key, data))
