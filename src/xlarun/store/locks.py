"""The store's lock files. ``lock``: shared while a run is written, exclusive while blobs are deleted (gc, rm).
``turn.lock``: the writers' turn, exclusive around every change of ``runs/`` (a commit and its indexing, a removal), so
the writer that changes ``runs/`` can note the index's agreement with it (:mod:`xlarun.store.agreement`) knowing that
nothing else changed ``runs/`` meanwhile."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xlarun.errors import StoreError

TURN = "turn.lock"


@contextmanager
def writers_turn(root: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the writers' turn of the store at ``root``; yields False (held by nobody here) when ``wait`` is False and
    another process holds it."""
    fd = open_lock(root / TURN)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def open_lock(path: Path) -> int:
    """The store's lock file, opened (created if missing; read-only on a read-only store); a folder, FIFO or
    link put in its place is refused with what to do, never waited on."""
    fd, why = -1, ""
    for mode in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):  # flock works on a file opened for reading
        try:
            fd = os.open(path, mode | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
            break
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                break
    if fd >= 0 and stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd >= 0:
        os.close(fd)
    raise StoreError(f"cannot lock the store with {path}: {why or 'not a file'}", f"remove it (`rm -r {path}`): it is made again")
