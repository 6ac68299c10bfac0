"""Which files a remote holds, whichever store pushed them, and the packs a push builds for the files it lacks.

Two hosts capturing the same program make the same files (the same digests) in different local packs, so a
push that sent its own packs sent every byte again. A push reads instead the remote's **file view**: which digests
each remote pack holds, from the pack's own header (a ranged read of its first bytes: no new object to write or to
keep, and packs pushed by an older xlarun are read the same way). A pack's name is the hash of its compressed frame,
so its members never change: the headers read are kept in a cache file (pack -> digests), and a push reads only the
headers of packs new since (trusting the cache only for packs the listing shows). A file some remote pack holds is
named in the run's record by that pack (``packs: {remote pack: [places]}``, the format readers always read); a pull
adopts the whole pack, checking every member against its digest.

The files no remote pack holds go in **push packs**, built in the local pack format (:mod:`.pack_format`: readers
need nothing new) and cut where the files' own digests say (:func:`push_pack_groups`): two hosts pushing the same new
files at once build byte-identical packs, with the same name, and the conditional put stores each once; where their
files differ only the packs holding the differing files differ.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import zstandard

from xlarun.errors import StoreError
from xlarun.store.pack_format import PACK_BYTES, PACK_NAME_PREFIX, content_digest, pack_header, pack_members, pack_params
from xlarun.store.remote import ObjectStore
from xlarun.store.rows import StoredFile

#: The first bytes read of a pack: its header for up to ~1,300 members (a larger header is read in a second request).
HEADER_READ = 64 << 10
#: A push pack is cut only once it holds this many bytes (before compression): fewer, larger objects.
MIN_PUSH_PACK = 4 << 20
#: ... and then after a file whose digest's first 32 bits are 0 modulo this (one file in 8): a cut the files choose.
CUT_EVERY = 8
#: A push pack is cut at this size whatever the digests say.
MAX_PUSH_PACK = 2 * PACK_BYTES
_WORKERS = 8


def read_pack_digests(remote: ObjectStore, name: str) -> list[str] | None:
    """The digests a remote pack's header lists (one ranged read, two for a large header); None when the pack is
    gone or its header is not a pack's (damage: the pack is then not trusted to hold anything)."""
    key = f"packs/{name}.zst"
    head = remote.get_range(key, 0, HEADER_READ)
    if head is None or len(head) < 16:
        return None
    end = 8 + int.from_bytes(head[4:8], "little")
    if end > len(head):
        rest = remote.get_range(key, len(head), end - len(head))
        head += rest or b""
    try:
        return [digest for digest, _offset, _length in pack_members(head[:end])]
    except StoreError:
        return None


class RemoteFiles:
    """The files a remote holds: by digest, the remote pack holding it (listed once a push, under its lock)."""

    def __init__(self, members: dict[str, list[str]]):
        self.members = members
        self._pack_of: dict[str, str] = {}
        for name in sorted(members):
            for digest in members[name]:
                self._pack_of.setdefault(digest, name)

    @classmethod
    def read(cls, remote: ObjectStore, cache: Path | None = None) -> RemoteFiles:
        """The view of ``remote`` now: its ``packs/`` listed, the headers of packs not in ``cache`` read (8 at once)."""
        listed = sorted(n[:-4] for n in remote.names("packs/") if n.endswith(".zst") and len(n) == 68)
        known = _cached(cache)
        todo = [name for name in listed if name not in known]
        with ThreadPoolExecutor(_WORKERS) as pool:
            for name, digests in zip(todo, pool.map(lambda n: read_pack_digests(remote, n), todo), strict=True):
                if digests is not None:
                    known[name] = digests
        if cache is not None and todo:
            _write_cache(cache, known)
        return cls({name: known[name] for name in listed if name in known})

    def pack_of(self, digest: str) -> str | None:
        return self._pack_of.get(digest)

    def add(self, name: str, digests: Iterable[str]) -> None:
        """A pack this push sent (or found sent meanwhile)."""
        listed = self.members.setdefault(name, [])
        for digest in digests:
            listed.append(digest)
            self._pack_of.setdefault(digest, name)


def _cached(cache: Path | None) -> dict[str, list[str]]:
    try:
        value = json.loads(cache.read_text(encoding="utf-8")) if cache is not None else {}
    except (OSError, ValueError):
        return {}
    ok = isinstance(value, dict) and all(isinstance(v, list) and all(isinstance(d, str) for d in v) for v in value.values())
    return value if ok else {}


def _write_cache(cache: Path, known: dict[str, list[str]]) -> None:
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps(known, separators=(",", ":")), encoding="utf-8")
        os.replace(partial, cache)  # whole or not at all
    except OSError:  # a cache: the next push reads the headers again
        pass


def push_pack_groups(files: list[StoredFile]) -> list[list[StoredFile]]:
    """The files (each digest once, in the run's order: a series' dumps side by side compress against each other)
    split into push packs where their digests say: the same files give the same packs on every host."""
    groups: list[list[StoredFile]] = []
    group: list[StoredFile] = []
    seen: set[str] = set()
    size = 0
    for entry in files:
        if entry.digest in seen:
            continue
        seen.add(entry.digest)
        group.append(entry)
        size += entry.size
        chosen = int(entry.digest[:8], 16) % CUT_EVERY == 0
        if size >= MAX_PUSH_PACK or (size >= MIN_PUSH_PACK and chosen):
            groups.append(group)
            group, size = [], 0
    if group:
        groups.append(group)
    return groups


def build_pack(members: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """A pack of (digest, bytes) in the store's format, and its name: the same members in the same order always
    give the same bytes (one zstd frame at parameters fixed by the size)."""
    table, offset = [], 0
    for digest, data in members:
        table.append((digest, offset, len(data)))
        offset += len(data)
    frame = zstandard.ZstdCompressor(compression_params=pack_params(offset)).compress(b"".join(d for _g, d in members))
    return content_digest(PACK_NAME_PREFIX + frame), pack_header(table) + frame
