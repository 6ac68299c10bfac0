"""errors.py: the one place a full disk or a read-only file system is recognised, and the words each caller says."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from xlarun.errors import disk_trouble, write_trouble, write_trouble_words


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "the disk is full"),
        (sqlite3.OperationalError("database or disk is full"), "the disk is full"),
        (OSError(errno.EROFS, "Read-only file system"), "the file system is read-only"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "the file system is read-only"),
        (OSError(errno.EACCES, "Permission denied"), None),
        (OSError(errno.ENOENT, "No such file or directory"), None),
        (ValueError("the disk space was fine"), None),
    ],
)
def test_a_full_disk_and_a_read_only_file_system_are_recognised_from_errno_and_sqlites_words(exc, words):
    assert disk_trouble(exc) == words


def test_the_store_says_read_only_and_names_the_permission_problem_it_meets():
    assert write_trouble_words(OSError(errno.EROFS, "Read-only file system")) == "the store is read-only"
    assert write_trouble_words(OSError(errno.EPERM, "Operation not permitted")) == "no permission to write into the store"
    trouble = write_trouble(OSError(errno.ENOSPC, "No space left on device"), "committing run 3")
    assert trouble is not None and trouble.exit_code == 3
    assert str(trouble).startswith("committing run 3: the disk is full") and "xlarun gc" in trouble.hint
    assert write_trouble(KeyError("x"), "committing") is None


def test_the_cli_says_which_file_could_not_be_written_and_why():
    from xlarun.cli import _refusal

    full = _refusal(OSError(errno.ENOSPC, "No space left on device", "/out/graph.svg"))
    assert str(full) == "cannot write /out/graph.svg: the disk is full" and full.hint == "free space on that disk"
    read_only = _refusal(OSError(errno.EROFS, "Read-only file system", "/mnt/r/x"))
    assert str(read_only) == "cannot write /mnt/r/x: the file system is read-only" and read_only.hint == "write somewhere else"
