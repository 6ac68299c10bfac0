"""Reading a file within fixed bounds: a regular file only, never waited on, never read past a limit.

Every read of a file in a store (a run's ``files.json``, ``manifest.json`` and logs, a staging folder's
``archived.json``, a recorded bisection or replay, what export copies and a shipment carries) and of a run spec
goes through here. The file is opened with
``O_NONBLOCK`` (a FIFO put in its place is refused at once, not waited on) and, for store files, ``O_NOFOLLOW``
(a symbolic link, to ``/dev/zero`` or anywhere, is refused); anything but a regular file is refused after
``fstat``; and at most ``limit`` bytes are read (a log is read from its end: its last ``limit`` bytes). A
refusal is a :class:`FileRefused`, which :func:`read_store_file` turns into one :class:`StoreError` line that
names the file and what to do.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xlarun.errors import ExitCode, StoreError, os_error_words

#: The largest file list (``files.json``, ``archived.json``) read: a run of 100,000 files lists about 15 MB.
MAX_LIST_BYTES = 64 << 20
#: The largest manifest read (its file notes included; a real one is a few KB, one with every file noted some MB).
MAX_MANIFEST_BYTES = 32 << 20
#: The largest small record read (a recorded bisection or replay, a cached list of flag names).
MAX_RECORD_BYTES = 16 << 20
#: How much of a log is read to be shown: its last 32 MiB (what came before is said, with the file that holds it).
LOG_TAIL_BYTES = 32 << 20
#: How much of a log is copied (by ``export``, into a shipment to another store): its last 256 MiB.
MAX_LOG_BYTES = 256 << 20

_CHUNK = 1 << 16
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(OSError):
    """A file that is not a regular one (a FIFO, a device, a folder, a link where links are refused), or one past
    its size limit; ``reason`` says which in a few words (``is a FIFO (named pipe), not a file``), ``kind`` what
    was found instead (``a FIFO (named pipe)``; None for a file too large)."""

    def __init__(self, path: Path | str, reason: str, kind: str | None = None):
        super().__init__(errno.EINVAL, reason, str(path))
        self.reason, self.kind = reason, kind


def _refused_kind(path: Path | str, kind: str) -> FileRefused:
    return FileRefused(path, f"is {kind}, not a file", kind)


def open_regular(path: Path | str, *, follow_links: bool = False) -> tuple[int, os.stat_result]:
    """An fd opened for reading on the regular file at ``path``, with its fstat: never blocks on a FIFO; a link is
    refused unless ``follow_links``. FileNotFoundError when there is none; :class:`FileRefused` for anything but a
    regular file; OSError for the rest (no permission)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise _refused_kind(path, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a socket (a FIFO opens without a writer with O_NONBLOCK)
            raise _refused_kind(path, "a socket") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused_kind(path, next((name for test, name in _KINDS if test(st.st_mode)), "a special file"))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: Path | str, limit: int, *, follow_links: bool = False, tail: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`), at most ``limit`` of them:
    :class:`FileRefused` past that, or, with ``tail``, its last ``limit`` bytes."""
    fd, st = open_regular(path, follow_links=follow_links)
    try:
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        data = _read_at_most(fd, limit + 1)  # one more than allowed: a file growing past its fstat size is caught
    finally:
        os.close(fd)
    if len(data) > limit:
        if tail:
            return data[-limit:]
        raise FileRefused(path, f"is larger than {_size_words(limit)}, the most xlarun reads of it")
    return data


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(_CHUNK, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _size_words(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} bytes"


#: What to do about a store file that is refused, unless the caller says better.
STORE_FILE_HINT = "only a regular file belongs there: restore it from a backup, or remove it (`rm {path}`)"


def read_store_file(path: Path, limit: int, *, hint: str | None = None, tail: bool = False) -> bytes:
    """The bytes of a file in a store, read as :func:`read_regular` reads (no links, no FIFOs, at most ``limit``
    bytes, or the last ``limit`` with ``tail``). FileNotFoundError passes through (the caller knows whether a
    missing file is damage); any other trouble is one :class:`StoreError` (exit 1: the store is damaged, or 3: it
    cannot be read) that names the file and, in ``hint``, what to do."""
    with _as_store_error(path, hint):
        return read_regular(path, limit, tail=tail)


@contextmanager
def _as_store_error(path: Path, hint: str | None) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise
    except FileRefused as exc:
        raise StoreError(f"{path} {exc.reason}", (hint or STORE_FILE_HINT).format(path=path), exit_code=ExitCode.FAILED) from None
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {os_error_words(exc)}", "check the store's permissions") from None


def read_store_files(folder: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    """Those of the files ``names`` in ``folder`` there are, read as :func:`read_store_file` reads them: a log
    (``.log``) its last :data:`MAX_LOG_BYTES` (:func:`read_store_tail`), any other at most :data:`MAX_MANIFEST_BYTES`."""
    out = {}
    for name in names:
        try:
            if name.endswith(".log"):
                out[name] = read_store_tail(folder / name, MAX_LOG_BYTES)
            else:
                out[name] = read_store_file(folder / name, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            continue
    return out


def read_store_json(path: Path, limit: int, *, hint: str | None = None) -> Any:
    """The JSON value in a store file (see :func:`read_store_file`); a file that is not JSON is a
    :class:`StoreError` (exit 1) naming it. FileNotFoundError passes through."""
    data = read_store_file(path, limit, hint=hint)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise StoreError(
            f"{path} is damaged: not JSON ({reason})", (hint or STORE_FILE_HINT).format(path=path), exit_code=ExitCode.FAILED
        ) from None


def read_store_log(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """A log in a store as text (bytes that are not UTF-8 replaced), as :func:`read_store_tail` reads it; empty
    when there is none."""
    try:
        return read_store_tail(path, limit).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def read_store_tail(path: Path, limit: int) -> bytes:
    """A log's last ``limit`` bytes (from a whole line on), after a first line saying how much was left out and
    where it is; all of it when it is no larger. A link, FIFO or folder there: :class:`StoreError`;
    FileNotFoundError passes through."""
    size = os.lstat(path).st_size
    data = read_store_file(path, limit, tail=True)
    if size <= len(data):
        return data
    cut = data.find(b"\n") + 1
    data = data[cut:] if 0 < cut < len(data) else data
    return f"[xlarun: the first {size - len(data):,} bytes of this log are left out; {path} holds them]\n".encode() + data
