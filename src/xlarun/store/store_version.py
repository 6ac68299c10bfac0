"""A store's folder and its ``VERSION`` file: made so that no interruption and no other process making the same
store at the same moment leaves a folder xlarun refuses, and read and checked on every open
(docs/store-format.md)."""

from __future__ import annotations

import os
from pathlib import Path

from xlarun import bounded_read
from xlarun.errors import StoreError

#: The store format this xlarun reads and writes, described in docs/store-format.md. Formats 1 to 3 were
#: written only by development versions of xlarun and are refused.
STORE_VERSION = 4
#: What a store holds before its VERSION is written: a creation cut short (a Ctrl-C, a kill) leaves only these.
_FIRST_FOLDERS = ("blobs", "runs", "staging")
_VERSION_TMP = ".VERSION.tmp-"


def make_store(root: Path) -> None:
    """Make a store at ``root``: its folders, then ``VERSION`` written under another name and renamed into place, so
    it is whole or absent. A folder holding only what a creation cut short leaves (empty first folders, a
    temporary VERSION) is finished; one another process finished meanwhile is left as it is; any other folder is
    refused (StoreError)."""
    try:
        names = set(os.listdir(root))
    except FileNotFoundError:
        names = set()
    except OSError as exc:
        raise StoreError(f"cannot create a store at {root}: {exc.strerror or exc}", "choose a writable --store folder") from None
    if "VERSION" in names:
        return  # made meanwhile by another xlarun
    if not _unfinished(root, names):
        raise StoreError(f"{root} exists and is not an xlarun store", "choose another --store folder")
    tmp = root / f"{_VERSION_TMP}{os.getpid()}"
    try:
        for sub in _FIRST_FOLDERS:
            (root / sub).mkdir(parents=True, exist_ok=True)
        tmp.write_text(f"{STORE_VERSION}\n")
        os.replace(tmp, root / "VERSION")
    except OSError as exc:
        raise StoreError(f"cannot create a store at {root}: {exc.strerror or exc}", "choose a writable --store folder") from None
    finally:
        tmp.unlink(missing_ok=True)


def _unfinished(root: Path, names: set[str]) -> bool:
    """Whether ``names`` (a folder's entries, no VERSION among them) are at most what making a store writes first."""
    if any(name not in _FIRST_FOLDERS and not name.startswith(_VERSION_TMP) for name in names):
        return False
    try:
        return not any(os.listdir(root / name) for name in names if name in _FIRST_FOLDERS)
    except OSError:  # not a folder, or unreadable: not ours
        return False


def read_version(path: Path) -> str:
    """What a store's VERSION file says (at most 64 bytes), every byte decoded (odd ones are shown escaped)."""
    try:  # a FIFO, link or folder there is refused, never waited on
        return bounded_read.read_regular(path, 64).decode("latin-1").strip()
    except OSError as exc:
        why = exc.reason if isinstance(exc, bounded_read.FileRefused) else exc.strerror or str(exc)
        raise StoreError(f"cannot read {path}: {why}", "restore the store's VERSION file") from None


def check_format(root: Path, version: str) -> None:
    """Refuse a store of another format than :data:`STORE_VERSION` with a message saying which."""
    if version == str(STORE_VERSION):
        return
    if version in ("1", "2", "3"):
        raise StoreError(
            f"store {root} has format {version}, which this xlarun no longer reads (it reads format {STORE_VERSION} only)",
            "formats 1-3 were written only by development versions; capture the runs again into a new store",
        )
    raise StoreError(
        f"store {root} has format {version!r}; this xlarun reads format {STORE_VERSION} only",
        "use the xlarun version that wrote it",
    )
