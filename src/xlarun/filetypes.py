"""What kind of file a stat mode is, in the words xlarun's messages use (one home for the archiver and import)."""

from __future__ import annotations

import stat


def file_type(mode: int) -> str:
    """``file``, ``dir``, ``symbolic link``, ``device file``, ``FIFO``, ``socket`` or ``special file``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
