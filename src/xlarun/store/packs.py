"""Blob storage: file contents kept once, named by their digest, zstd-compressed, in packs.

Layout below ``<store>/blobs`` (the whole format: docs/store-format.md)::

    packs/<name>.zst      a pack: many files' bytes concatenated and compressed as one zstd frame
    packs.sqlite          where each packed file is: digest -> (pack, offset, length)

**Digests.** A file is named by the BLAKE3 (256-bit) hash of its bytes, in hex (:func:`content_digest`).
BLAKE3 hashes 2x faster than SHA-256 here (2.9 against 1.4 GB/s on one core, with the CPU's SHA instructions).

**Packs.** Successive dumps of a module (before_optimizations, each pass, after_optimizations, in one
format) differ by a few lines, so compressed together each is encoded against the one before: a pack is
30-50 times smaller than its members compressed one by one, and writing it is a single fast zstd pass
(one file per dump cost more in file creations than the compression). A pack begins with a zstd skippable
frame (tag ``b"XLRK"``) listing its members' digest, offset and length, so ``packs.sqlite`` is only a lookup
table: rebuilt from the pack headers when it is missing. A pack is named by the digest of ``b"xlarun-pack\\0"``
and its compressed frame (hashing the members again would double the cost of hashing). It holds about
``PACK_BYTES`` of members, so reading one file cold decodes at most that much (tens of milliseconds).

A pack outlives the files decoded from it: :meth:`BlobStore.collect` (``xlarun gc``) keeps it while its own
header lists a live file.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import IO, Any, cast

import zstandard
from blake3 import blake3

from xlarun.errors import StoreError
from xlarun.killpoints import kill_point
from xlarun.store.buffers import DecodedCache, give_buffer, take_buffer
from xlarun.store.pack_census import PackCensus, unlisted_folder_refusal
from xlarun.store.pack_collect import Collected, collect_packs
from xlarun.store.pack_format import (
    PACK_BYTES,
    PACK_NAME_PREFIX,
    content_digest,
    damaged,
    open_pack,
    pack_header,
    pack_header_size,
    pack_members,
    pack_params,
    read_headers,
    read_pack_members,
)
from xlarun.store.pack_table import PackTable
from xlarun.store.remote_fetch import PackFetcher

#: A file larger than this is streamed into a pack of its own, through a bounded buffer, never held whole.
STREAM_BYTES = 4 * PACK_BYTES
#: Chunk size when streaming a large file (read, hash and compress a chunk at a time).
_STREAM_CHUNK = 4 << 20
#: The first write buffer of a pack; it doubles as files come (a capture of a 466-byte dump allocated 32 MB).
FIRST_BUFFER_BYTES = 64 << 10
#: Decoded files and packs kept in memory: reading a module's dumps in order decodes each pack once.
CACHE_BYTES = 128 << 20
_thread_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_thread_local, "decompressor", None)
    if dec is None:
        dec = _thread_local.decompressor = zstandard.ZstdDecompressor()
    return dec


def _read_pack(path: Path) -> bytes:
    with open_pack(path) as handle:
        return handle.read()


def _missing(digest: str) -> StoreError:
    return StoreError(
        f"blob {digest[:12]} is missing from the store", "the store was damaged by hand; `xlarun check` lists what is damaged"
    )


class BlobStore:
    """Content-addressed, zstd-compressed file contents in packs (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.packs_dir = root / "packs"
        self._folders: set[str] = set()  # folders known to exist
        self._cache = DecodedCache(CACHE_BYTES)
        self._table = PackTable(root / "packs.sqlite", self.packs_dir)
        self.fetcher = PackFetcher.for_store(root.parent)  # a remote's mirror: a missing blob is fetched on demand

    def pack_path(self, name: str) -> Path:
        return self.packs_dir / f"{name}.zst"

    def close(self) -> None:
        """Close the pack table's connections (checkpointing its write-ahead log)."""
        self._table.close()

    # --- writing -----------------------------------------------------------------------------

    def has(self, digest: str) -> bool:
        return self._table.lookup(digest) is not None

    def stored_of(self, digests: list[str]) -> set[str]:
        """Those of ``digests`` the store holds (one query per 500, not one per digest)."""
        return self._table.existing(digests)

    def packer(self) -> PackWriter:
        """A writer of files into packs (see :class:`PackWriter`)."""
        return PackWriter(self)

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

    def store_stream(self, handle: IO[bytes]) -> tuple[str, int]:
        """Store a large file from an open binary ``handle`` as a pack of its own, a chunk at a time: memory
        stays bounded by the chunk and zstd's window, whatever the file's size. Returns (digest, bytes read)."""
        self.packs_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.packs_dir / f".tmp-stream-{os.getpid()}-{threading.get_ident()}"
        header_size = len(pack_header([("0" * 64, 0, 0)]))
        content, frame_hash, size = blake3(), blake3(PACK_NAME_PREFIX), 0
        try:
            with open(tmp, "wb") as out:
                out.write(bytes(header_size))  # the header names the digest, known only at the end

                class _Hashing:  # the pack is named by the hash of its frame: hash it as it is written
                    def write(self, data: Any) -> int:
                        frame_hash.update(data)
                        return out.write(data)

                params = zstandard.ZstdCompressionParameters(  # a 16 MB window: bounded memory, still long matches
                    window_log=24, strategy=zstandard.STRATEGY_FAST, write_checksum=1, write_content_size=0
                )
                with zstandard.ZstdCompressor(compression_params=params).stream_writer(
                    cast(IO[bytes], _Hashing()), closefd=False
                ) as writer:
                    while chunk := handle.read(_STREAM_CHUNK):
                        content.update(chunk)
                        writer.write(chunk)
                        size += len(chunk)
                digest = content.hexdigest()
                out.seek(0)
                out.write(pack_header([(digest, 0, size)]))
            if self.stored_of([digest]):
                tmp.unlink()
                return digest, size
            name = frame_hash.hexdigest()
            os.replace(tmp, self.pack_path(name))  # atomic: a reader never sees a partial pack
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        kill_point("pack-written")
        self._table.add(name, [(digest, 0, size)])  # after the pack is safely on disk
        kill_point("pack-listed")
        return digest, size

    def adopt_pack(self, source: Path, name: str) -> list[tuple[str, int, int]]:
        """Move a pack fetched from elsewhere (``source``, beside the packs) into the store once its frame hashes to
        ``name`` and each member to its digest; else delete it and raise StoreError (damaged). Returns its members."""
        try:
            raw = _read_pack(source)
            members, frame = pack_members(raw), memoryview(raw)[pack_header_size(raw) :]
            if blake3(PACK_NAME_PREFIX).update(frame).hexdigest() != name:
                raise damaged(f"pack {name[:12]} (its bytes do not hash to its name)")
            try:
                decoded = _decompressor().decompressobj().decompress(frame)
            except zstandard.ZstdError:
                raise damaged(f"pack {name[:12]}") from None
            if any(content_digest(decoded[o : o + n]) != d or o + n > len(decoded) for d, o, n in members):
                raise damaged(f"pack {name[:12]} (a member does not hash to its digest)")
            os.replace(source, self.pack_path(name))
        finally:
            source.unlink(missing_ok=True)
        self._table.add(name, members)
        return members

    # --- reading -----------------------------------------------------------------------------

    def get(self, digest: str) -> bytes:
        """The exact bytes of a stored file."""
        return self._get(digest)

    def pack_of(self, digest: str) -> str:
        """The name of the pack that holds a stored file."""
        where = self._table.lookup(digest)
        if where is None:
            raise _missing(digest)
        return where[0]

    def _get(self, digest: str, use_cache: bool = True) -> bytes:
        where = self._table.lookup(digest)
        if where is None and self.fetcher is not None and self.fetcher.fetch(digest, self):
            where = self._table.lookup(digest)
        if where is None:
            raise _missing(digest)
        for _attempt in range(3):
            try:
                return self._pack_slice(*where, use_cache)
            except FileNotFoundError:  # gc merged its pack into another since the lookup: the table says which
                moved = self._table.lookup(digest)
                if moved is None or moved == where:
                    break
                where = moved
        raise _missing(where[0])  # the pack, as check names it

    def _pack_slice(self, pack: str, offset: int, length: int, use_cache: bool) -> bytes:
        decoded = self._cache.get(pack) if use_cache else None
        if decoded is None:
            raw = _read_pack(self.pack_path(pack))  # FileNotFoundError: see _get
            frame = memoryview(raw)[pack_header_size(raw) :]
            try:
                if offset + length > self._cache.max_item:  # too big to keep: decode only up to the file
                    with _decompressor().stream_reader(frame) as reader:
                        return _read_exactly(reader, offset + length)[offset:]
                decoded = _decompressor().decompressobj().decompress(frame)
            except zstandard.ZstdError:
                raise damaged(f"pack {pack[:12]}") from None
            if use_cache:
                self._cache.put(pack, decoded)
        if offset + length > len(decoded):
            raise damaged(f"pack {pack[:12]}")
        return decoded[offset : offset + length]

    # --- checking and collecting -------------------------------------------------------------

    def verify(self, digest: str, use_cache: bool = False) -> str | None:
        """None when the file's bytes decode and hash to ``digest``; else what is wrong (``xlarun check``).
        ``use_cache``: packs decoded since :meth:`forget_decoded` may be reused (a check decodes each once)."""
        try:
            data = self._get(digest, use_cache=use_cache)
        except StoreError as exc:
            return exc.message
        except (OSError, ValueError) as exc:
            return f"blob {digest[:12]} cannot be read: {exc}"
        return None if content_digest(data) == digest else f"blob {digest[:12]} does not hash to its name"

    def forget_decoded(self) -> None:
        """Drop every decoded blob and pack kept in memory: what is read next comes from the disk."""
        self._cache = DecodedCache(CACHE_BYTES)

    def verify_pack(self, name: str) -> str | None:
        """None when a pack's bytes match its name and its header agrees with ``packs.sqlite``."""
        try:
            with open_pack(self.pack_path(name)) as handle:  # read a chunk at a time: a pack may be large
                members = read_pack_members(handle)
                hasher = blake3(PACK_NAME_PREFIX)
                while chunk := handle.read(_STREAM_CHUNK):
                    hasher.update(chunk)
            if hasher.hexdigest() != name:
                return f"pack {name[:12]} does not hash to its name"
        except StoreError as exc:
            return exc.message
        except FileNotFoundError:  # gone since it was listed: merged or removed by gc, unless the table still names it
            return f"pack {name[:12]} is missing" if self._table.members_of(name) else None
        except OSError as exc:
            return f"pack {name[:12]} cannot be read: {exc.strerror or exc}"
        # The table may list fewer members than the header holds: two writers that packed the same file at
        # once (each checked the table before the other listed it) keep one copy listed, and a file a pack
        # still holds after gc may be listed nowhere. Neither loses a byte. What the table does list must
        # be where the header says: a row pointing elsewhere would read the wrong bytes.
        held = {digest: (offset, length) for digest, offset, length in members}
        wrong = [digest for digest, offset, length in self._table.members_of(name) if held.get(digest) != (offset, length)]
        if wrong:
            return f"packs.sqlite places {len(wrong)} file(s) in pack {name[:12]} where its header does not"
        return None

    def pack_names(self) -> list[str]:
        if not self.packs_dir.is_dir():
            return []
        return sorted(p.name[:-4] for p in self.packs_dir.glob("*.zst"))

    def census(self) -> PackCensus:
        """Every pack's members read from its own header (StoreError when the packs' folder cannot be listed)."""
        try:
            held, unread = read_headers(self.packs_dir)
        except OSError as exc:
            raise unlisted_folder_refusal(self.packs_dir, exc) from None
        return PackCensus(self.packs_dir, held, unread)

    def collectable(self, live: set[str], named: set[str]) -> PackCensus:
        """The census of the packs, once it is safe to collect with ``live`` (else its refusal, a StoreError)."""
        census = self.census()
        refusal = census.refusal(live, named, self._table.rows(), self._table.path)
        if refusal is not None:
            raise refusal
        return census

    def collect(self, live: set[str], named: set[str] | None = None) -> Collected:
        """Remove the packs no live file needs and merge the small ones (:func:`xlarun.store.pack_collect.collect_packs`,
        which says what it relies on). The caller holds the store's exclusive lock."""
        return collect_packs(self, live, named or set())

    def decoded_pack(self, name: str) -> bytes:
        """A pack's members' bytes, decoded whole (its frame's checksum checked on the way): StoreError when damaged."""
        raw = _read_pack(self.pack_path(name))
        try:
            return _decompressor().decompressobj().decompress(memoryview(raw)[pack_header_size(raw) :])
        except zstandard.ZstdError:
            raise damaged(f"pack {name[:12]}") from None

    def disk_usage(self) -> int:
        """Bytes the packs and pack table take on disk."""
        files = [*self.root.glob("packs/*.zst"), *self.root.glob("packs.sqlite*")]
        return sum(p.stat().st_size for p in files if p.exists())


class NotRegularFile(OSError):
    """A path that was a regular file when listed is something else when opened (a FIFO, a socket...)."""


class PackWriter:
    """Stores files, one by one, in packs (see the module docstring).

    Files are read straight into the open pack's buffer (:meth:`add_file`; :meth:`add` copies bytes in),
    hashed there, and the whole buffer is compressed in one call when the pack is written: no copy of a
    file's bytes is made on the way. :meth:`add_file` returns the digest at once, but the file is safely
    stored only after :meth:`flush` (called when the pack is full, and by the archiver when a series ends),
    which writes the pack and then lists its members in ``packs.sqlite``. A file equal to one already in
    the open pack is not added again (the one just before it is compared, not hashed), and files the store
    already holds are taken out when the pack is written (one lookup per pack, not one per file).
    """

    def __init__(self, blobs: BlobStore):
        self.blobs = blobs
        self.size = 0
        self._buffer: bytearray | None = None
        self._members: list[tuple[str, int, int]] = []  # (digest, offset, length) in the open pack
        self._pending: set[str] = set()
        self._last: tuple[int, int, str] | None = None  # offset, length and digest of the last file added, if in the buffer
        # bytes the caller expects to add (the archiver's scan saw them): the first buffer's size (grown by doubling
        # from 64 KiB, the first packs of a 784 MB dump zero-filled and copied 64 MB more than they held)
        self.expected = 0

    @property
    def pending(self) -> int:
        """Files added since the last pack was written."""
        return len(self._members)

    def add(self, data: bytes) -> str:
        """Store bytes; returns their digest."""
        view = self._reserve(len(data))
        view[:] = data
        return self._commit(len(data))[0]

    def add_file(self, path: str | Path) -> tuple[str, memoryview | None, int, tuple[int, int]] | None:
        """Store a file: (digest, its bytes (valid until the next call; None for a file larger than ``STREAM_BYTES``,
        streamed into a pack of its own), its size as read, (size, mtime_ns) as stat said), or None when the file is
        gone (a job's temporary file, renamed or deleted). Never blocks on a FIFO: the file is opened non-blocking and
        refused unless it is a regular file (:class:`NotRegularFile`)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:  # read with the descriptor alone: a file object per file cost more than hashing a small file
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotRegularFile(path)
            if st.st_size > STREAM_BYTES:
                with open(fd, "rb", buffering=0, closefd=False) as handle:
                    digest, got = self.blobs.store_stream(handle)
                return digest, None, got, (st.st_size, st.st_mtime_ns)
            view, got = self._reserve(st.st_size), 0
            while got < st.st_size:  # a read may return less than asked
                n = os.readv(fd, [view[got:]])
                if not n:
                    break  # the file shrank while being read: its new stamp makes the archiver read it again
                got += n
        finally:
            os.close(fd)
        digest, data = self._commit(got)
        return digest, data, got, (st.st_size, st.st_mtime_ns)

    def _reserve(self, size: int) -> memoryview:
        """Room for ``size`` bytes after the open pack's members. The buffer starts small and doubles as the pack
        fills (a run of a few small files never touches a pack-sized buffer); past twice a pack's size the open
        pack is written first."""
        if self.size + size > 2 * PACK_BYTES and self._members:
            self.flush()
        capacity = len(self._buffer) if self._buffer is not None else 0
        if self._buffer is None or self.size + size > capacity:  # no buffer yet (even for an empty file), or too small
            self._grow(self.size + size, capacity)
        assert self._buffer is not None, "_grow gives the buffer"
        return memoryview(self._buffer)[self.size : self.size + size]

    def _grow(self, need: int, capacity: int) -> None:
        """A buffer of at least ``need`` bytes (double the last, or :attr:`expected`; at most twice a pack's size
        unless one file needs more), the open pack's members copied into it."""
        bigger = take_buffer(max(need, min(2 * PACK_BYTES, max(FIRST_BUFFER_BYTES, 2 * capacity, self.expected))))
        if self._buffer is not None and self.size:
            bigger[: self.size] = memoryview(self._buffer)[: self.size]
        self._release_buffer()
        self._buffer = bigger

    def _commit(self, size: int) -> tuple[str, memoryview]:
        buffer, start = self._buffer, self.size
        assert buffer is not None, "_reserve gives the buffer before a file is read into it"
        data = memoryview(buffer)[start : start + size]
        last = self._last
        if last is not None and last[1] == size and buffer.startswith(memoryview(buffer)[last[0] : last[0] + size], start):
            return last[2], data  # an unchanged pass: no hashing, nothing stored
        digest = content_digest(data)
        if digest in self._pending:
            self._last = None
            return digest, data
        self._members.append((digest, start, size))
        self._pending.add(digest)
        self._last = (start, size, digest)
        self.size += size
        if self.size >= PACK_BYTES and len(self._members) >= 2:
            self.flush()
        return digest, data

    def flush(self) -> int:
        """Write the pending files as one pack and list them in the table; returns the bytes written."""
        if not self._members:
            return 0
        stored = self.blobs.stored_of([digest for digest, _o, _n in self._members])  # one query per pack, not per file
        if stored:
            self._drop(stored)
        if not self._members:
            self._forget_pending()
            return 0
        assert self._buffer is not None, "a pending file is in the buffer"
        frame = zstandard.ZstdCompressor(compression_params=pack_params(self.size)).compress(
            memoryview(self._buffer)[: self.size]
        )
        name = content_digest(PACK_NAME_PREFIX + frame)
        header = pack_header(self._members)
        written = self.blobs._write(self.blobs.pack_path(name), header + frame)
        kill_point("pack-written")
        self.blobs._table.add(name, self._members)  # after the pack is safely on disk
        kill_point("pack-listed")
        self._forget_pending()
        return written

    def _forget_pending(self) -> None:
        self._members, self.size, self._last, self._pending = [], 0, None, set()

    def _drop(self, stored: set[str]) -> None:
        """Take files the store already holds out of the open pack, moving the others up."""
        buffer, kept, size = self._buffer, [], 0
        assert buffer is not None, "a pending file is in the buffer"
        for digest, offset, length in self._members:
            if digest not in stored:
                buffer[size : size + length] = buffer[offset : offset + length]
                kept.append((digest, size, length))
                size += length
        self._members, self.size = kept, size

    def close(self) -> int:
        """Write the open pack and give the buffer back; returns the bytes written."""
        written = self.flush()
        self._release_buffer()
        return written

    def discard(self) -> None:
        """Forget the pending files (the capture failed: their raw files stay where they are)."""
        self._forget_pending()
        self._release_buffer()

    def _release_buffer(self) -> None:
        if self._buffer is not None:
            give_buffer(self._buffer)
            self._buffer = None


def _read_exactly(reader: Any, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        chunk = reader.read(min(size - got, 16 << 20))
        if not chunk:
            raise damaged("a pack")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
