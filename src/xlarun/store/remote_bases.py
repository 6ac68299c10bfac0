"""Delta bases a push finds on the remote: like files of the latest runs of the same name, whoever pushed them.

A host's first push of a program another host pushed already finds most of its files on the remote by digest
(:mod:`xlarun.store.remote_files`); the few that differ (snapshots and memory reports carry module ids and paths) are
like files of the other host's run, which this host never had. Their bases are found in the records of the latest
remote runs of the same name (a bounded look: the index objects of the newest :data:`RECENT_RUNS` runs), and a base's
bytes are read from the remote pack holding it: the pack's frame checked against its name, the base against its digest.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import zstandard

from xlarun.errors import StoreError
from xlarun.store.pack_format import PACK_NAME_PREFIX, content_digest, pack_header_size, pack_members
from xlarun.store.remote import ObjectStore
from xlarun.store.remote_delta import DELTA_MAX_BYTES, BaseFile, BaseFinder
from xlarun.store.remote_files import RemoteFiles
from xlarun.store.remote_records import checked_record, read_record, read_remote_json

#: The newest remote runs whose index objects are read for runs of the same name.
RECENT_RUNS = 64
#: The runs of the same name whose records give bases (the latest first).
BASE_RECORDS = 3
#: The largest remote pack read for a base (a push pack is at most 32 MB of files, compressed far below this).
MAX_BASE_PACK = 64 << 20
#: The most a base's pack is decoded to (a push pack holds at most 32 MB of files).
MAX_BASE_PLAIN = 64 << 20
_RUN_ID = re.compile(r"[0-9A-Za-z._-]+")


def remote_runs_named(
    remote: ObjectStore, name: object, run_id: str, known: dict[str, dict | None] | None = None
) -> list[tuple[str, dict]]:
    """The latest runs on the remote named ``name`` (at most :data:`BASE_RECORDS`, newest first) and their index
    objects, among the newest :data:`RECENT_RUNS`; an index object that cannot be read is passed over. ``known``:
    index objects read before (one is never changed), filled with those read now."""
    if not isinstance(name, str):
        return []
    ids = sorted(n[:-5] for n in remote.names("runs/") if n.endswith(".json") and _RUN_ID.fullmatch(n[:-5]))
    recent = [other for other in reversed(ids[-RECENT_RUNS:]) if other != run_id]

    def index_of(other: str) -> dict | None:
        try:
            return read_remote_json(remote, f"runs/{other}.json", None)
        except StoreError:
            return None

    known = {} if known is None else known
    todo = [other for other in recent if other not in known]
    with ThreadPoolExecutor(8) as pool:
        known.update(zip(todo, pool.map(index_of, todo), strict=True))
    indexes = [known[other] for other in recent]
    same = [(other, index) for other, index in zip(recent, indexes, strict=True) if index and index.get("name") == name]
    return same[:BASE_RECORDS]


def add_remote_bases(finder: BaseFinder, remote: ObjectStore, view: RemoteFiles, runs: list[tuple[str, dict]]) -> None:
    """Add to ``finder`` (after what it holds: a local base wins) the files of remote ``runs`` held in remote packs,
    and for their files held as deltas those deltas' bases (a delta never needs a delta: the chain stays one long);
    a run whose record cannot be read is passed over (bases are an economy, never a need)."""
    for other, index in runs:
        try:
            files, _folder, packs, deltas = checked_record(read_record(remote, index, other), other)
        except StoreError:
            continue
        for pack, members in packs.items():
            if pack in view.members:
                for i in members:
                    if files[i].size <= DELTA_MAX_BYTES:
                        finder.add(files[i].path, BaseFile(files[i].digest, pack))
        for i, ref in deltas.items():  # a file of that run held as a delta: its own base is a like file in a pack
            if ref.base_pack in view.members:
                finder.add(files[i].path, BaseFile(ref.base, ref.base_pack))


class RemotePackReader:
    """Files read out of remote packs for delta bases, each pack fetched once, checked against its name."""

    def __init__(self, remote: ObjectStore):
        self.remote = remote
        self._packs: dict[str, tuple[list[tuple[str, int, int]], bytes]] = {}
        self.fetched_bytes = 0

    def get(self, pack: str, digest: str) -> bytes | None:
        """The bytes of ``digest`` from remote ``pack``, None when the pack is gone, damaged or lacks it."""
        if pack not in self._packs:
            self._packs[pack] = self._fetch(pack)
        members, plain = self._packs[pack]
        for member, offset, length in members:
            if member == digest:
                data = plain[offset : offset + length]
                return data if content_digest(data) == digest else None
        return None

    def _fetch(self, pack: str) -> tuple[list[tuple[str, int, int]], bytes]:
        raw = self.remote.get(f"packs/{pack}.zst")
        if raw is None or len(raw) > MAX_BASE_PACK:
            return [], b""
        self.fetched_bytes += len(raw)
        try:
            members, frame = pack_members(raw), memoryview(raw)[pack_header_size(raw) :]
            if content_digest(PACK_NAME_PREFIX + bytes(frame)) != pack:
                return [], b""
            with zstandard.ZstdDecompressor().stream_reader(bytes(frame)) as reader:
                chunks, size = [], 0
                while size <= MAX_BASE_PLAIN and (chunk := reader.read(1 << 20)):
                    chunks.append(chunk)
                    size += len(chunk)
            return (members, b"".join(chunks)) if size <= MAX_BASE_PLAIN else ([], b"")
        except (StoreError, zstandard.ZstdError):
            return [], b""
