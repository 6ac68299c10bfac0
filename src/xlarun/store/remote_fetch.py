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
from typing import Protocol

from xlarun.errors import StoreError
from xlarun.store.remote import ObjectStore, RemoteSpec

#: The file at the top of a mirror store naming its remote.
MIRROR_MARKER = "remote.json"
#: The file in a mirrored run's folder saying which remote pack holds which of its files.
RUN_PACKS = "remote-packs.json"


class _Adopting(Protocol):
    packs_dir: Path

    def adopt_pack(self, source: Path, name: str) -> list[tuple[str, int, int]]: ...


def mirror_spec(store_root: Path) -> RemoteSpec | None:
    """The remote a mirror store mirrors; None for any other store."""
    try:
        entry = json.loads((store_root / MIRROR_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("bucket"), str):
        return None
    return RemoteSpec(str(entry.get("name", "")), entry["bucket"], str(entry.get("prefix", "")), entry.get("endpoint"))


class PackFetcher:
    """Fetches the pack holding a missing blob of a mirror store (one download at a time per process)."""

    def __init__(self, store_root: Path, spec: RemoteSpec):
        self.store_root, self.spec = store_root, spec
        self._where: dict[str, str] | None = None
        self._remote: ObjectStore | None = None
        self._lock = threading.Lock()
        self.fetched: list[str] = []  # packs this fetcher downloaded, in order

    @classmethod
    def for_store(cls, store_root: Path) -> PackFetcher | None:
        spec = mirror_spec(store_root)
        return cls(store_root, spec) if spec is not None else None

    def _pack_holding(self, digest: str) -> str | None:
        if self._where is None or digest not in self._where:  # a run mirrored since: read the maps again
            where: dict[str, str] = {}
            for listing in sorted((self.store_root / "runs").glob(f"*/{RUN_PACKS}")):
                try:
                    packs = json.loads(listing.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                for name, digests in packs.items() if isinstance(packs, dict) else ():
                    where.update((d, name) for d in digests if isinstance(d, str))
            self._where = where
        return self._where.get(digest)

    def fetch(self, digest: str, blobs: _Adopting) -> bool:
        """Download and adopt the pack that holds ``digest``; False when no mirrored run names it."""
        with self._lock:
            name = self._pack_holding(digest)
            if name is None:
                return False
            if self._remote is None:
                self._remote = ObjectStore(self.spec)
            blobs.packs_dir.mkdir(parents=True, exist_ok=True)
            tmp = blobs.packs_dir / f".tmp-fetch-{name[:16]}-{os.getpid()}-{threading.get_ident()}"
            self._remote.download(f"packs/{name}.zst", tmp)
            try:
                blobs.adopt_pack(tmp, name)
            except StoreError:
                raise StoreError(
                    f"remote object packs/{name}.zst is damaged",
                    "nothing of it was used; push the run again from a store that has it",
                ) from None
            self.fetched.append(name)
            return True
