"""Blobs fetched on demand from a remote into a remote's local mirror store.

A mirror (see :mod:`xlarun.store.remote_index`) is a store folder with ``remote.json`` at its top naming its remote,
and in each mirrored run's folder ``remote-packs.json``: which remote pack holds which of the run's files. Its runs
are indexed but hold no blob until one is read: then :class:`PackFetcher` downloads the one pack that holds it,
and the blob store adopts it only once the pack hashes to its name and every member to its digest (as ``pull``
does). The pack stays: the next read of any of its files downloads nothing.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from xlarun.errors import StoreError

if TYPE_CHECKING:  # imported where a mirror is read: every store opens this module, few are mirrors
    from xlarun.store.remote import ObjectStore, RemoteSpec

#: The file at the top of a mirror store naming its remote.
MIRROR_MARKER = "remote.json"
#: The file in a mirrored run's folder saying which remote pack holds which of its files.
RUN_PACKS = "remote-packs.json"
#: The file in a mirrored run's folder saying which of its files the remote holds as deltas: digest -> [base, pack].
RUN_DELTAS = "remote-deltas.json"


class _Adopting(Protocol):
    packs_dir: Path

    def adopt_pack(self, source: Path, name: str) -> list[tuple[str, int, int]]: ...

    def has(self, digest: str) -> bool: ...

    def get(self, digest: str) -> bytes: ...

    def packer(self) -> Any: ...


def mirror_spec(store_root: Path) -> RemoteSpec | None:
    """The remote a mirror store mirrors; None for any other store."""
    try:
        entry = json.loads((store_root / MIRROR_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("bucket"), str):
        return None
    from xlarun.store.remote import RemoteSpec

    return RemoteSpec(str(entry.get("name", "")), entry["bucket"], str(entry.get("prefix", "")), entry.get("endpoint"))


class PackFetcher:
    """Fetches the pack holding a missing blob of a mirror store (one download at a time per process)."""

    def __init__(self, store_root: Path, spec: RemoteSpec):
        self.store_root, self.spec = store_root, spec
        self._where: dict[str, str] | None = None
        self._deltas: dict[str, list[str]] = {}
        self._remote: ObjectStore | None = None
        self._lock = threading.RLock()  # reading a delta's base may come back here
        self.fetched: list[str] = []  # packs this fetcher downloaded, in order

    @classmethod
    def for_store(cls, store_root: Path) -> PackFetcher | None:
        spec = mirror_spec(store_root)
        return cls(store_root, spec) if spec is not None else None

    def _maps(self, digest: str) -> tuple[dict[str, str], dict[str, list[str]]]:
        """Which remote pack holds each mirrored file, and which are deltas (read again when ``digest`` is in neither:
        a run mirrored since)."""
        if self._where is None or (digest not in self._where and digest not in self._deltas):
            where: dict[str, str] = {}
            deltas: dict[str, list[str]] = {}
            for folder in sorted((self.store_root / "runs").iterdir()) if (self.store_root / "runs").is_dir() else ():
                packs, as_deltas = _read_map(folder / RUN_PACKS), _read_map(folder / RUN_DELTAS)
                for name, digests in packs.items():
                    if isinstance(digests, list):
                        where.update((d, name) for d in digests if isinstance(d, str))
                deltas.update((d, b) for d, b in as_deltas.items() if isinstance(b, list) and len(b) == 2)
            self._where, self._deltas = where, deltas
        return self._where, self._deltas

    def fetch(self, digest: str, blobs: _Adopting) -> bool:
        """Download and adopt the pack that holds ``digest``, or the delta that holds it (with its base's pack), each
        checked; False when no mirrored run names it."""
        with self._lock:
            where, deltas = self._maps(digest)
            if digest in where:
                self._fetch_pack(where[digest], blobs)
                return True
            if digest not in deltas:
                return False
            base, base_pack = deltas[digest]
            if not blobs.has(base):
                self._fetch_pack(base_pack, blobs)
            key = f"deltas/{digest}.{base}.{base_pack}.zst"
            frame = self._object_store().get(key)
            if frame is None:
                raise StoreError(f"remote object {key} is missing", "the remote was damaged; push the run again")
            from xlarun.store.remote_delta import decode_delta

            data = decode_delta(frame, blobs.get(base), None, digest)
            if data is None:
                raise StoreError(
                    f"remote object {key} is damaged", "nothing of it was used; push the run again from a store that has it"
                )
            packer = blobs.packer()
            packer.add(data)
            packer.close()
            self.fetched.append(key)
            return True

    def _object_store(self) -> ObjectStore:
        if self._remote is None:
            from xlarun.store.remote import ObjectStore

            self._remote = ObjectStore(self.spec)
        return self._remote

    def _fetch_pack(self, name: str, blobs: _Adopting) -> None:
        blobs.packs_dir.mkdir(parents=True, exist_ok=True)
        tmp = blobs.packs_dir / f".tmp-fetch-{name[:16]}-{os.getpid()}-{threading.get_ident()}"
        self._object_store().download(f"packs/{name}.zst", tmp)
        try:
            blobs.adopt_pack(tmp, name)
        except StoreError:
            raise StoreError(
                f"remote object packs/{name}.zst is damaged",
                "nothing of it was used; push the run again from a store that has it",
            ) from None
        self.fetched.append(name)


def _read_map(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
