"""What ``xlarun gc`` does to the packs, holding the store's exclusive lock (no capture, pull or push is writing),
once the census found every header readable and ``packs.sqlite`` agreeing with them:

1. **Unused packs**: a pack whose own header lists no live file is removed (its rows forgotten first, so the
   table never names a deleted pack).
2. **Unlisted copies**: a pack no row of the table names is removed too. The census checked that every live file
   some pack holds is listed, so each live file of such a pack is listed in another pack, which stays. They come
   from two captures that packed the same file at once, from a kill between writing a pack and listing it, and
   from a merge (below) killed half way.
3. **Small packs merged**: a store of many tiny runs holds a pack of a few hundred bytes per run, each taking a
   block of the disk. When at least :data:`MIN_SMALL_PACKS` packs are under :data:`SMALL_PACK_BYTES`, their live
   files (the oldest packs first) are written into packs of about :data:`MERGED_BYTES` each: every file read back
   from its old pack, whose frame checksum is checked as it decodes, and hashed again against its digest; the new
   pack written whole under its own name, then, in one transaction, the old packs' rows replaced by the new
   pack's, then the old packs removed. A reader that looked a file up in an old pack just before finds it gone and
   looks again (:meth:`BlobStore.get`). A kill at any step loses nothing: before the transaction the new pack is an
   unlisted copy, after it the old packs are, and the next gc removes them (2). A pack that fails to decode, or a
   file that does not hash to its digest, is left where it is, for ``xlarun check`` to name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zstandard

from xlarun.errors import StoreError
from xlarun.killpoints import kill_point
from xlarun.store.pack_census import removal_failure
from xlarun.store.pack_format import PACK_NAME_PREFIX, content_digest, pack_header, pack_params

if TYPE_CHECKING:
    from xlarun.store.packs import BlobStore

#: A pack file smaller than this is small: merged with others once there are enough of them.
SMALL_PACK_BYTES = 32 << 10
#: Small packs are merged only when there are this many (fewer waste less than a few hundred KB of disk).
MIN_SMALL_PACKS = 16
#: A merged pack holds about this many bytes of files: reading one of them decodes at most this much (a millisecond).
MERGED_BYTES = 1 << 20

Members = list[tuple[str, int, int]]


@dataclass
class Collected:
    """What gc did to the packs."""

    removed: int = 0  # packs removed: unused, unlisted copies, and small packs merged into others
    freed: int = 0  # bytes of disk (blocks, not file sizes): what the removed packs took, less what merged packs take
    merged: int = 0  # small packs whose files went into merged packs
    written: int = 0  # merged packs written


def collect_packs(blobs: BlobStore, live: set[str], named: set[str]) -> Collected:
    """Remove the unused packs and the unlisted copies, then merge the small packs (see the module docstring).
    Refuses (StoreError, nothing deleted) as :meth:`BlobStore.collectable` does; a pack that cannot be removed is a
    StoreError naming it, after the others are."""
    census = blobs.collectable(live, named)
    rows = blobs._table.rows()
    listed = {row[1] for row in rows}
    dead = census.dead_packs(live)
    unused = set(dead)
    doomed = dead + [name for name in census.held if name not in listed and name not in unused]
    blobs._table.forget_packs(dead)  # first: a crash must never leave the table naming a deleted pack
    done, failures = Collected(), list[str]()
    _remove(blobs, doomed, done, failures)
    if failures:
        raise StoreError(
            f"gc removed {done.removed} of {len(doomed)} unused pack(s); {len(failures)} could not be removed: {failures[0]}",
            f"give this user write access to {blobs.packs_dir} (or run gc as the store's owner), then run gc again",
        )
    gone = set(doomed)
    kept = {name: members for name, members in census.held.items() if name not in gone}
    merge_small_packs(blobs, kept, live, {row[0]: row[1] for row in rows}, done)
    return done


def _remove(blobs: BlobStore, packs: list[str], done: Collected, failures: list[str]) -> None:
    for path in map(blobs.pack_path, packs):
        try:
            size = path.stat().st_blocks * 512  # the disk it takes: a pack of 400 bytes takes a 4 KiB block
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            failures.append(removal_failure(path, exc))
            continue
        done.removed, done.freed = done.removed + 1, done.freed + size


def merge_small_packs(
    blobs: BlobStore, held: dict[str, Members], live: set[str], listed_in: dict[str, str], done: Collected
) -> None:
    """Merge the small packs of ``held`` (each pack's members, from its header) into packs of about
    :data:`MERGED_BYTES`, taking each live file from the pack the table lists it in (``listed_in``: digest ->
    pack); counts what it did in ``done``."""
    small = []
    for name in held:
        try:
            st = os.stat(blobs.pack_path(name), follow_symlinks=False)
        except OSError:
            continue
        if st.st_size < SMALL_PACK_BYTES:
            small.append((st.st_mtime_ns, name, st.st_size))
    if len(small) < MIN_SMALL_PACKS:
        return
    group: list[tuple[str, int, Members]] = []
    size = 0
    for _mtime, name, nbytes in sorted(small):  # the oldest first: runs captured together are removed together
        taken = [(d, o, n) for d, o, n in held[name] if d in live and listed_in.get(d) == name]
        group.append((name, nbytes, taken))
        size += sum(n for _d, _o, n in taken)
        if size >= MERGED_BYTES:
            _merge(blobs, group, done)
            group, size = [], 0
    if len(group) >= 2:
        _merge(blobs, group, done)


def _merge(blobs: BlobStore, group: list[tuple[str, int, Members]], done: Collected) -> None:
    """One merged pack of ``group``'s files, each read back and checked; the packs that could not be read back whole
    stay as they are."""
    buffer, members, merged = bytearray(), [], []
    for old, nbytes, taken in group:
        try:
            decoded = blobs.decoded_pack(old)
        except (StoreError, OSError):
            continue  # damaged or unreadable: left for `xlarun check` to name
        part = [(digest, decoded[offset : offset + length], length) for digest, offset, length in taken]
        if any(len(data) != length or content_digest(data) != digest for digest, data, length in part):
            continue
        for digest, data, length in part:
            members.append((digest, len(buffer), length))
            buffer += data
        merged.append((old, nbytes))
    olds = [old for old, _n in merged]
    if len(olds) < 2:
        return
    written = 0
    if members:  # else the live files of these packs are all listed in others: they go without a merged pack
        frame = zstandard.ZstdCompressor(compression_params=pack_params(len(buffer))).compress(bytes(buffer))
        name = content_digest(PACK_NAME_PREFIX + frame)
        if name in olds:  # the same bytes as one of them: nothing to gain
            return
        try:
            blobs._write(blobs.pack_path(name), pack_header(members) + frame)
            written = blobs.pack_path(name).stat().st_blocks * 512
        except OSError as exc:  # a full disk, a store this user may not write: what gc removed stays removed
            raise StoreError(
                f"gc removed {done.removed} pack(s) but could not merge small packs: {removal_failure(blobs.packs_dir, exc)}",
                "free space on that disk (or run gc as the store's owner), then run gc again",
            ) from None
        kill_point("merge-written")
        blobs._table.move(olds, name, members)
        kill_point("merge-listed")
    else:
        blobs._table.forget_packs(olds)
    removed = Collected()
    _remove(blobs, olds, removed, [])  # one that cannot be removed is an unlisted copy now: the next gc tries again
    done.removed += removed.removed
    done.freed += removed.freed - written
    done.merged += len(olds)
    done.written += bool(members)
