"""Blob storage: file contents kept once, named by their sha256, zstd-compressed.

Layout: ``<root>/ab/<sha256>.zst``. A blob file is one of two things, both valid zstd containers:

* a **plain blob**: one zstd frame holding the file's bytes (all that store format 1 has);
* a **delta blob**: a zstd skippable frame (magic ``0x184D2A5E``, 37 bytes of payload: ``b"XLRD"``, one byte
  of chain depth, the 32-byte sha256 of a *base* blob), then one zstd frame compressed with the base's
  bytes as a raw-content dictionary. Successive pass dumps of a module differ by a few lines, so a delta
  is tens of times smaller than the file compressed alone.

Reading a delta blob decodes its base first (recursively; writers keep chains at most ``MAX_DELTA_DEPTH``
deep, and recently decoded blobs are cached, so reading a module's dumps in order costs about one
decompression each). A base blob must outlive its deltas: ``Store.gc`` keeps the bases of live blobs.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

import zstandard

from .errors import StoreError

ZSTD_LEVEL = 3
#: Delta chains are cut (a plain blob stored instead) beyond this many bases.
MAX_DELTA_DEPTH = 16
#: Decoded blobs kept in memory for reading delta chains.
CACHE_BYTES = 64 << 20
_thread_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    comp = getattr(_thread_local, "compressor", None)
    if comp is None:
        comp = _thread_local.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_thread_local, "decompressor", None)
    if dec is None:
        dec = _thread_local.decompressor = zstandard.ZstdDecompressor()
    return dec


class BlobStore:
    """Content-addressed, zstd-compressed file contents: plain and delta blobs (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self._folders: set[str] = set()  # prefix folders known to exist
        self._depths: dict[str, int] = {}  # chain depth of blobs seen by this process
        self._cache = _DecodedCache(CACHE_BYTES)

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / f"{sha256}.zst"

    def has(self, sha256: str) -> bool:
        return self.path_for(sha256).exists()

    def put(self, data: bytes) -> tuple[str, int, bool]:
        """Store bytes as a plain blob; return (sha256, stored size, whether it was new)."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        if target.exists():
            return digest, target.stat().st_size, False
        return digest, self._write(target, _compressor().compress(data)), True

    def put_delta(self, data: bytes, base: "DeltaBase") -> tuple[str, int, bool]:
        """Store bytes as a delta of ``base`` (a blob already stored); like :meth:`put`.

        Falls back to a plain blob when the base's chain is already ``MAX_DELTA_DEPTH`` deep.
        """
        if len(data) == len(base.data) and memoryview(data) == memoryview(base.data):
            return base.sha256, self.path_for(base.sha256).stat().st_size, False  # an unchanged pass: no hashing
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_for(digest)
        if target.exists():
            return digest, target.stat().st_size, False
        depth = self.depth(base.sha256) + 1
        if depth > MAX_DELTA_DEPTH:
            return digest, self._write(target, _compressor().compress(data)), True
        header = _DELTA_MAGIC + _DELTA_PAYLOAD_SIZE + _DELTA_TAG + bytes([depth]) + bytes.fromhex(base.sha256)
        stored = self._write(target, header + base.compressor().compress(data))
        self._depths[digest] = depth
        return digest, stored, True

    def get(self, sha256: str) -> bytes:
        """The exact bytes of a blob."""
        return self._get(sha256, 0)

    def base_of(self, sha256: str) -> str | None:
        """The blob a delta blob is decoded against; None for a plain blob."""
        return _parse_header(self._read_head(sha256))[1]

    def depth(self, sha256: str) -> int:
        """How many bases must be decoded before this blob (0 for a plain blob)."""
        depth = self._depths.get(sha256)
        if depth is None:
            depth = self._depths[sha256] = _parse_header(self._read_head(sha256))[0]
        return depth

    def _get(self, sha256: str, hops: int) -> bytes:
        data = self._cache.get(sha256)
        if data is not None:
            return data
        try:
            raw = self.path_for(sha256).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"blob {sha256[:12]} is missing from the store", "the store was damaged by hand; `xlarun check` lists what is missing") from None
        _depth, base_sha = _parse_header(raw[:_DELTA_HEADER_SIZE])
        if base_sha is None:
            data = _decompressor().decompress(raw)
        else:
            if hops > MAX_DELTA_DEPTH:
                raise StoreError(f"blob {sha256[:12]} has a delta chain deeper than {MAX_DELTA_DEPTH}", "the store was damaged; re-capture the run")
            base = self._get(base_sha, hops + 1)
            decoder = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT))
            data = decoder.decompress(raw[_DELTA_HEADER_SIZE:])
        self._cache.put(sha256, data)
        return data

    def _read_head(self, sha256: str) -> bytes:
        try:
            with open(self.path_for(sha256), "rb") as handle:
                return handle.read(_DELTA_HEADER_SIZE)
        except FileNotFoundError:
            raise StoreError(f"blob {sha256[:12]} is missing from the store", "the store was damaged by hand; `xlarun check` lists what is missing") from None

    def _write(self, target: Path, payload: bytes) -> int:
        folder = target.parent
        if folder.name not in self._folders:
            folder.mkdir(parents=True, exist_ok=True)
            self._folders.add(folder.name)
        tmp = folder / f".tmp-{target.name[:16]}-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as out:
                out.write(payload)
            os.replace(tmp, target)  # atomic: a reader never sees a partial blob
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return len(payload)


class DeltaBase:
    """A stored blob that others are written as deltas of: its sha256, its bytes, and (made once) a compressor
    that uses those bytes as dictionary: a base serves several deltas, and loading a dictionary is the costly part."""

    def __init__(self, sha256: str, data: bytes):
        self.sha256 = sha256
        self.data = data
        self._compressor: zstandard.ZstdCompressor | None = None

    def compressor(self) -> zstandard.ZstdCompressor:
        if self._compressor is None:
            params = _delta_params(len(self.data))
            dictionary = zstandard.ZstdCompressionDict(self.data, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            dictionary.precompute_compress(compression_params=params)
            self._compressor = zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params)
        return self._compressor


#: Delta blobs: a skippable frame (magic, payload size 37, b"XLRD", depth byte, base sha256), then the zstd frame.
_DELTA_MAGIC = (0x184D2A5E).to_bytes(4, "little")
_DELTA_TAG = b"XLRD"
_DELTA_PAYLOAD_SIZE = (37).to_bytes(4, "little")
_DELTA_HEADER_SIZE = 8 + 37


def _delta_params(base_size: int) -> zstandard.ZstdCompressionParameters:
    """Fast matching with a hash table sized to the base: measured on pass dumps, twice smaller than level 3
    with a dictionary, and about as fast as level 3 without one."""
    table = min(20, max(14, base_size.bit_length() - 2))
    return zstandard.ZstdCompressionParameters(
        window_log=min(27, max(20, (2 * base_size).bit_length())), hash_log=table, chain_log=table, search_log=1,
        min_match=6, target_length=0, strategy=zstandard.STRATEGY_FAST,
    )


def _parse_header(head: bytes) -> tuple[int, str | None]:
    """(chain depth, base sha256) of a delta blob's first bytes; (0, None) for a plain blob."""
    if head[:4] != _DELTA_MAGIC or head[8:12] != _DELTA_TAG:
        return 0, None
    return head[12], head[13:45].hex()


class _DecodedCache:
    """The most recently decoded blobs, up to a byte budget (bases of delta chains are read again and again)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.items: OrderedDict[str, bytes] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self.lock:
            data = self.items.get(key)
            if data is not None:
                self.items.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.max_bytes // 4:
            return
        with self.lock:
            if key in self.items:
                return
            self.items[key] = data
            self.bytes += len(data)
            while self.bytes > self.max_bytes:
                _old, evicted = self.items.popitem(last=False)
                self.bytes -= len(evicted)
