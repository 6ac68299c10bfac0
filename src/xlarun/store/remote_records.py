"""A run's record and the small objects of a remote, read back checked: what push writes and pull, ``gc --remote``
and on-demand reads trust only after these checks (the layout: :mod:`xlarun.store.remote_sync`)."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import TypeVar

import zstandard

from xlarun.errors import StoreError
from xlarun.safe_names import checked_relative_path
from xlarun.store.pack_format import content_digest
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_delta import DeltaRef, decode_delta, parse_delta_name
from xlarun.store.rows import StoredFile, listed_files
from xlarun.store.store_json import parse_store_json

#: The record's format; a pull refuses one it does not know. A record naming deltas is format 2, which a puller
#: that does not know deltas refuses rather than commit a run whose files it did not fetch.
RECORD_FORMAT = 1
RECORD_FORMAT_DELTAS = 2
#: The largest record or run file a pull decompresses (a file list of 100,000 files is about 15 MB).
MAX_SMALL_BYTES = 256 << 20


_T = TypeVar("_T")
_R = TypeVar("_R")

#: Objects a :class:`ReadOnce` keeps: enough for the folder files and base records many runs share.
READ_ONCE_ENTRIES = 512


def remote_damage(what: str) -> StoreError:
    return StoreError(f"remote object {what} is damaged", "nothing of it was used; push the run again from a store that has it")


def fetch_verified(remote: ObjectStore, key: str, digest: str) -> bytes:
    """A small object (zstd-compressed, named by the digest of its bytes): its bytes, checked; StoreError naming it
    when it is missing or damaged."""
    data = remote.get(key)
    if data is None:
        raise missing_object(key)
    try:  # bounded: no small object of a run is larger than a file list may be
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            chunks, size = [], 0
            while size <= MAX_SMALL_BYTES and (chunk := reader.read(1 << 20)):
                chunks.append(chunk)
                size += len(chunk)
        plain = b"".join(chunks)
    except zstandard.ZstdError:
        raise remote_damage(key) from None
    if len(plain) > MAX_SMALL_BYTES or content_digest(plain) != digest:
        raise remote_damage(key)
    return plain


def read_remote_json(remote: ObjectStore, key: str, digest: str | None) -> dict | None:
    """A JSON object on the remote (checked against ``digest`` when one is given), None when there is no such key."""
    data = remote.get(key) if digest is None else fetch_verified(remote, key, digest)
    return None if data is None else parsed_object(data, key)


def parsed_object(data: bytes, key: str) -> dict:
    """The JSON object an object of the remote holds (``key`` names it in the error when it holds anything else)."""
    try:
        value = parse_store_json(data)
    except ValueError:
        raise remote_damage(key) from None
    if not isinstance(value, dict):
        raise remote_damage(key)
    return value


def missing_object(key: str) -> StoreError:
    return StoreError(f"remote object {key} is missing", "the remote was damaged; push the run again from a store that has it")


def checked_record(
    record: dict, run_id: str
) -> tuple[list[StoredFile], dict[str, str], dict[str, list[int]], dict[int, DeltaRef]]:
    """A run's record read back: its files, its folder's files, its packs' members and its deltas, by place in
    its file list; StoreError (the record is damaged) for anything a push does not write."""
    key = f"the record of run {run_id}"
    if record.get("format") not in (RECORD_FORMAT, RECORD_FORMAT_DELTAS) or record.get("run") != run_id:
        raise remote_damage(key)
    try:
        files = listed_files(record.get("files"), key)
    except StoreError:
        raise remote_damage(key) from None
    folder, packs, raw_deltas = record.get("folder"), record.get("packs"), record.get("deltas", {})
    if not isinstance(folder, dict) or not isinstance(packs, dict) or not isinstance(raw_deltas, dict):
        raise remote_damage(key)
    for rel, digest in folder.items():
        checked_relative_path(rel, key, error=lambda m, h: remote_damage(key))
        if rel == "files.json" or not (isinstance(digest, str) and len(digest) == 64):
            raise remote_damage(key)
    for name, members in packs.items():
        ok = len(name) == 64 and isinstance(members, list)
        if not ok or not all(isinstance(i, int) and 0 <= i < len(files) for i in members):
            raise remote_damage(key)
    deltas: dict[int, DeltaRef] = {}
    for place, base in raw_deltas.items():
        ok = place.isdigit() and int(place) < len(files) and isinstance(base, list) and len(base) == 2
        ref = parse_delta_name(f"{files[int(place)].digest}.{base[0]}.{base[1]}.zst") if ok else None
        if ref is None:
            raise remote_damage(key)
        deltas[int(place)] = ref
    return files, folder, packs, deltas


#: The small objects of a run that a push may send as a delta against another run's (which is always whole): the
#: index object's key naming it, and its folder on the remote.
DELTA_OBJECTS = {"record": "records", "catalog": "catalogs"}
_DIGEST = re.compile(r"[0-9a-f]{64}")


def object_keys(index: dict, kind: str) -> list[str]:
    """The objects a run's ``kind`` (record or catalog) is read from: ``<folder>/<digest>.zst``, or (sent as a delta
    against another run's) ``<folder>/<digest>.<base>.zst`` and the base's own ``<folder>/<base>.zst``."""
    folder, digest, base = DELTA_OBJECTS[kind], str(index.get(kind)), index.get(f"{kind}_base")
    if base is None:
        return [f"{folder}/{digest}.zst"]
    return [f"{folder}/{digest}.{base}.zst", f"{folder}/{base}.zst"]


def record_keys(index: dict) -> list[str]:
    """The objects a run's record is read from (see :func:`object_keys`)."""
    return object_keys(index, "record")


def read_run_object(remote: ObjectStore, index: dict, run_id: str, kind: str) -> dict | None:
    """A run's record or catalog (its index object given), checked against its digest whether sent whole or as a
    delta against another run's (which is always sent whole); None when a whole one is missing; StoreError naming
    what is damaged, or a missing delta or base."""
    folder, digest, base = DELTA_OBJECTS[kind], str(index.get(kind)), index.get(f"{kind}_base")
    if base is None:
        return read_remote_json(remote, f"{folder}/{digest}.zst", digest)
    if not (isinstance(base, str) and _DIGEST.fullmatch(base)):
        raise remote_damage(f"runs/{run_id}.json")
    key = f"{folder}/{digest}.{base}.zst"
    frame = remote.get(key)
    if frame is None:
        raise missing_object(key)
    plain = decode_delta(frame, fetch_verified(remote, f"{folder}/{base}.zst", base), None, digest, limit=MAX_SMALL_BYTES)
    if plain is None:
        raise remote_damage(key)
    return parsed_object(plain, key)


def read_record(remote: ObjectStore, index: dict, run_id: str) -> dict:
    """A run's record, checked (see :func:`read_run_object`); StoreError naming what is missing or damaged."""
    return read_run_object(remote, index, run_id, "record") or {}


class ReadOnce(ObjectStore):
    """A remote whose content-named small objects (``files/``, whole ``records/`` and ``catalogs/``) are fetched once however many
    threads ask: the runs of one spec share their spec file and their record's base, and a pull or a mirror's sync
    reads them for every run. Checking stays with the reader (each read is checked as before)."""

    def __init__(self, remote: ObjectStore):  # the same client: boto3's clients are safe to share between threads
        self.spec, self.client = remote.spec, remote.client
        self._kept: dict[str, Future[bytes | None]] = {}
        self._guard = threading.Lock()

    def get(self, name: str) -> bytes | None:
        if not (name.startswith("files/") or re.fullmatch(r"(records|catalogs)/[0-9a-f]{64}\.zst", name)):
            return super().get(name)
        with self._guard:
            kept = self._kept.get(name)
            mine = kept is None
            if kept is None:
                kept = self._kept[name] = Future()
                while len(self._kept) > READ_ONCE_ENTRIES:
                    del self._kept[next(iter(self._kept))]
        if mine:
            try:
                kept.set_result(super().get(name))
            except BaseException as exc:
                kept.set_exception(exc)
        return kept.result()


def in_order_ahead(pool: Executor, work: Callable[[_T], _R], items: Iterable[_T], ahead: int) -> Iterator[_R]:
    """``work`` of each item, in order, done by ``pool`` at most ``ahead`` items before the one the caller takes:
    what is fetched waits for its reader in bounded memory (``Executor.map`` would start every item at once)."""
    pending: deque[Future[_R]] = deque()
    for item in items:
        pending.append(pool.submit(work, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
