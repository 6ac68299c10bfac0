"""``xlarun gc``: what killed captures left, and the packs no run needs, deleted only once everything that says
what is in use was read.

What is live comes from every run's own ``files.json``, the recoverable staging folders and what the caller
keeps; what a pack holds comes from its own header (:meth:`BlobStore.collect`), never from ``packs.sqlite``.
Anything that cannot be read (a run's list, a pack, the folders holding them) is a refusal with nothing deleted,
and what gc reports removed is what it removed: a folder or pack it could not remove is named, with why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from xlarun.errors import StoreError
from xlarun.store.pack_census import removal_failure, unlisted_folder_refusal
from xlarun.store.rows import Leftover, read_file_list
from xlarun.store.runs import ARCHIVED_LIST, RunStore, read_archived_list


class GcResult(NamedTuple):
    """What gc removed: staging folders, packs (unused, unlisted copies and small packs merged), the bytes that
    freed (less what merged packs take), and how many small packs were merged into how many."""

    folders: int
    packs: int
    freed: int
    merged: int = 0
    merged_into: int = 0


def collect_garbage(
    store: RunStore,
    discard_recoverable: bool = False,
    keep: frozenset[str] = frozenset(),
    checked: Callable[[], frozenset[str]] | None = None,
) -> GcResult:
    """Remove what killed captures left that holds nothing to recover (and, with ``discard_recoverable``, what
    could be recovered too), and the packs whose header lists no live file, and merge small packs (see
    :mod:`xlarun.store.pack_collect`).
    Blobs a recoverable staging folder lists, and those in ``keep``, are live. Refuses (StoreError, nothing
    deleted) while a run's list, a pack's header, or a folder holding them cannot be read, or while the pack
    table disagrees with the headers (see :meth:`BlobStore.collect`). ``checked`` runs first under the exclusive
    lock (so no ``rm`` or commit moves a run while it reads them), may refuse, and returns more live digests."""
    with store.lock(exclusive=True):
        if checked is not None:
            keep = keep | checked()
        named, leftovers = digests_runs_name(store), store.leftovers()
        staged = set() if discard_recoverable else digests_staging_lists(leftovers)  # discarded folders keep nothing
        store.blobs.collectable(named | staged | keep, named)  # refuse before deleting anything
        doomed = [lo.path for lo in leftovers if discard_recoverable or not lo.recoverable]
        trash = store.trash_folders()
        failures = [why for folder in doomed + trash if (why := _remove_folder(folder))]
        failures += [why for tmp in store.blobs.root.glob("*/.tmp-*") if (why := _remove_file(tmp))]  # a killed writer's
        if failures:
            removed = sum(not os.path.lexists(folder) for folder in doomed)
            raise StoreError(
                f"gc removed {removed} of {len(doomed)} abandoned staging folder(s) and no pack; "
                f"{len(failures)} path(s) could not be removed, the first {failures[0]}",
                "give this user write access to the store (or run gc as its owner), then run gc again",
            )
        done = store.blobs.collect(named | staged | keep, named)
        return GcResult(len(doomed), done.removed, done.freed, done.merged, done.written)


def digests_runs_name(store: RunStore) -> set[str]:
    """Every digest a committed run's ``files.json`` lists; StoreError when a run or its list cannot be read."""
    try:
        run_ids = store.run_ids()
    except OSError as exc:
        raise unlisted_folder_refusal(store.runs_dir, exc) from None
    named: set[str] = set()
    for run_id in run_ids:
        try:
            named.update(entry.digest for entry in store.stored_files(run_id))
        except OSError as exc:
            raise StoreError(
                f"gc refuses to run: run {run_id} cannot be read: {removal_failure(Path(exc.filename or run_id), exc)}",
                "nothing was deleted; run gc as a user who can read every run",
            ) from None
        except StoreError as exc:
            raise StoreError(f"gc refuses to run: {exc.message}", f"nothing was deleted; {exc.hint}") from None
    return named


def digests_staging_lists(leftovers: list[Leftover]) -> set[str]:
    """Every digest a killed capture's ``archived.json`` or ``files.json`` lists (kept for ``xlarun recover``);
    StoreError when its folder or one of those lists cannot be read: what it names is then unknown."""
    live: set[str] = set()
    for leftover in leftovers:
        if leftover.path.name.startswith("."):
            continue  # a folder being made or deleted: it lists nothing
        try:
            present = set(os.listdir(leftover.path))
        except OSError as exc:
            raise _staging_refusal(f"{removal_failure(leftover.path, exc)}") from None
        try:  # both read within bounds, never waited on (a FIFO, a link, /dev/zero in their place is refused)
            if ARCHIVED_LIST in present:
                listed = read_archived_list(leftover.path)
                if listed is None:
                    raise _staging_refusal(f"{leftover.path / ARCHIVED_LIST} cannot be read or is damaged")
                live.update(entry.digest for entry in listed[0])
            if "files.json" in present:
                live.update(entry.digest for entry in read_file_list(leftover.path / "files.json"))
        except FileNotFoundError:
            continue  # removed since it was listed: a capture that ended, or recover
        except StoreError as exc:
            if exc.message.startswith("gc refuses"):
                raise
            raise _staging_refusal(exc.message) from None
    return live


def _staging_refusal(what: str) -> StoreError:
    return StoreError(
        f"gc refuses to run: a killed capture's {what}",
        "nothing was deleted; `xlarun recover` keeps what it holds (as its owner), `xlarun gc --discard-recoverable` gives it up",
    )


def _remove_folder(folder: Path) -> str | None:
    """Remove a folder and what it holds; None once it is gone, else why not (the first error met)."""
    errors: list[str] = []

    def note(_function: Any, path: Any, exc_info: Any) -> None:
        exc = exc_info[1]
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and not errors:
            errors.append(removal_failure(Path(path), exc))

    shutil.rmtree(folder, onerror=note)
    if not os.path.lexists(folder):
        return None
    return errors[0] if errors else f"{folder}: still there after its removal"


def _remove_file(path: Path) -> str | None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        return removal_failure(path, exc)
    return None
