"""What gc may trust before it deletes a pack: every pack's own header, read, and ``packs.sqlite`` agreeing with
them. The headers are the authority on what a pack holds; the table is a cache of them, and a stale (restored from
a backup), garbled or partly built table is a reason to refuse, never a list of what is unused."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from xlarun.errors import StoreError, os_error_words

_NOTHING_DELETED = "nothing was deleted"


@dataclass
class PackCensus:
    """Each pack's members as its header lists them (pack name -> (digest, offset, length)), and the packs whose
    header could not be read, with why."""

    packs_dir: Path
    held: dict[str, list[tuple[str, int, int]]]
    unread: dict[str, Exception]

    def holding(self) -> set[str]:
        """Every digest some pack's header lists."""
        return {digest for members in self.held.values() for digest, _offset, _length in members}

    def dead_packs(self, live: set[str]) -> list[str]:
        """The packs whose header lists no digest of ``live``."""
        return [name for name, members in self.held.items() if not any(digest in live for digest, _o, _n in members)]

    def refusal(self, live: set[str], named: set[str], rows: list[tuple], table: Path) -> StoreError | None:
        """Why gc must delete nothing, or None: a pack that cannot be read, a digest of ``named`` (what runs list)
        in no pack, or ``rows`` (the table's) disagreeing with the headers on where a live file is."""
        if self.unread:
            return self._unread_refusal()
        missing = named - self.holding()
        if missing:
            return StoreError(
                f"gc refuses to run: {len(missing)} file(s) that runs list are in no pack (blob {min(missing)[:12]}...)",
                f"{_NOTHING_DELETED}; `xlarun check` names the damaged runs: re-capture them or `xlarun rm` them",
            )
        where = {(name, digest): (offset, length) for name, members in self.held.items() for digest, offset, length in members}
        misplaced = sum(where.get((pack, digest)) != (offset, length) for digest, pack, offset, length in rows)
        listed = {row[0] for row in rows}
        unlisted = len((live & self.holding()) - listed)
        if misplaced or unlisted:
            return StoreError(
                f"gc refuses to run: the pack table disagrees with the packs' headers ({misplaced} row(s) place a file "
                f"where no header does, {unlisted} file(s) in use are listed nowhere)",
                f"{_NOTHING_DELETED}; delete {table} and any {table.name}-wal, -shm beside it (the next command rebuilds "
                "it from the packs' headers), then run gc again",
            )
        return None

    def _unread_refusal(self) -> StoreError:
        name, why = next(iter(sorted(self.unread.items())))
        path = self.packs_dir / f"{name}.zst"
        count = f"{len(self.unread)} pack(s) cannot be read, the first"
        if isinstance(why, OSError) and why.errno in (errno.EACCES, errno.EPERM):
            return StoreError(
                f"gc refuses to run: {count} {path}: {os_error_words(why)}",
                f"{_NOTHING_DELETED}; run gc as a user who can read every pack, or make the packs readable to this one",
            )
        problem = why.message if isinstance(why, StoreError) else (why.strerror if isinstance(why, OSError) else None)
        return StoreError(
            f"gc refuses to run: {count} {path}: {problem or why}",
            f"{_NOTHING_DELETED}; `xlarun check` names the runs it damages: `xlarun rm` them, then move the pack out of "
            f"{self.packs_dir}",
        )


def unlisted_folder_refusal(folder: Path, exc: OSError) -> StoreError:
    """gc's refusal when a folder it must read whole (the packs', the runs') cannot be listed."""
    return StoreError(
        f"gc refuses to run: {folder} cannot be listed: {os_error_words(exc)}", f"{_NOTHING_DELETED}; run gc as the store's owner"
    )


def removal_failure(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be removed (or read), in words."""
    return f"{path}: {os_error_words(exc)}"
