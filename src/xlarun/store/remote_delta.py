"""Deltas on a remote: a file the remote lacks, sent as its difference from a like file the remote already holds.

A second capture of the same program differs from the first in a few hundred bytes of each of a few files (HLO
snapshots, memory reports, compile options carry module ids and paths), and a whole local pack holds those files:
sending the pack sent 46% of the first push again. A delta sends only the difference: the file compressed by zstd
with the base file's bytes as its dictionary (a 244 KB snapshot becomes about 100 bytes).

Below the remote's prefix::

    deltas/<digest>.<base digest>.<base pack>.zst

``<digest>`` names the file (the BLAKE3 of its bytes), ``<base digest>`` the file it is encoded against and
``<base pack>`` the remote pack that holds the base, so a listing alone tells which files the remote holds as deltas
and which packs they need (``gc --remote`` keeps those). Only a file held in a remote pack is ever a base: a delta
never needs another delta, so a pull decodes each in one step. A pull checks the decoded bytes against the digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import zstandard

from xlarun.store.pack_format import content_digest

#: A file larger than this is sent in its pack, never as a delta (a delta is encoded and decoded in memory).
DELTA_MAX_BYTES = 64 << 20
#: The largest zstd window a delta uses (base and file together): 128 MiB.
MAX_WINDOW_LOG = 27
#: zstd's level for deltas: 9 is within 10% of 19 on snapshots and 5 times faster.
LEVEL = 9
_KEY = re.compile(r"(?P<digest>[0-9a-f]{64})\.(?P<base>[0-9a-f]{64})\.(?P<pack>[0-9a-f]{64})\.zst")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class DeltaRef:
    """A file held on the remote as a delta: its digest, its base file's digest, the remote pack holding the base."""

    digest: str
    base: str
    base_pack: str

    @property
    def key(self) -> str:
        return f"deltas/{self.digest}.{self.base}.{self.base_pack}.zst"


def parse_delta_name(name: str) -> DeltaRef | None:
    """A delta from its key below ``deltas/`` (None for anything else)."""
    match = _KEY.fullmatch(name)
    return DeltaRef(match["digest"], match["base"], match["pack"]) if match else None


def _window_log(size: int) -> int:
    return max(10, min(MAX_WINDOW_LOG, size.bit_length() + 1))


def encode_delta(data: bytes, base: bytes) -> bytes:
    """``data`` compressed with ``base`` as a raw-content dictionary (one zstd frame, its size and checksum in it)."""
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL, window_log=_window_log(len(base) + len(data)), write_checksum=1, write_content_size=1
    )
    return zstandard.ZstdCompressor(dict_data=dictionary, compression_params=params).compress(data)


def decode_delta(frame: bytes, base: bytes, size: int | None, digest: str, limit: int = DELTA_MAX_BYTES) -> bytes | None:
    """The file a delta holds, or None when the frame does not decode to bytes whose digest is ``digest`` (and whose
    size is ``size``, when known; never more than ``limit`` bytes: the frame's own size is checked first)."""
    dictionary = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    decoder = zstandard.ZstdDecompressor(dict_data=dictionary, max_window_size=1 << MAX_WINDOW_LOG)
    try:
        said = zstandard.frame_content_size(frame)
        if said < 0 or said > limit or (size is not None and said != size):
            return None
        data = decoder.decompress(frame, max_output_size=said)
    except zstandard.ZstdError:
        return None
    return data if len(data) == said and content_digest(data) == digest else None


def like_path(path: str) -> str:
    """A file's path with its numbers blanked: the key a like file of another capture is found by when the path
    itself differs (a module numbered differently, a snapshot's id)."""
    return _DIGITS.sub("#", path)


def delta_worth_it(size: int, encoded: int) -> bool:
    """A delta is sent when it is at most half the file's size (else the pack, compressed with its neighbours)."""
    return encoded * 2 <= size


@dataclass(frozen=True)
class BaseFile:
    """A file the remote holds in a pack, a base for a like file: its digest and the remote pack holding it."""

    digest: str
    pack: str


class BaseFinder:
    """Bases by path, then by path with numbers blanked, from the files of earlier runs the remote holds in packs
    (the first run given wins: give the most recent first)."""

    def __init__(self) -> None:
        self._by_path: dict[str, BaseFile] = {}
        self._by_like: dict[str, BaseFile] = {}

    def add(self, path: str, base: BaseFile) -> None:
        self._by_path.setdefault(path, base)
        self._by_like.setdefault(like_path(path), base)

    def base_of(self, path: str, digest: str) -> BaseFile | None:
        found = self._by_path.get(path) or self._by_like.get(like_path(path))
        return found if found is not None and found.digest != digest else None
