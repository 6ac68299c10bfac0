"""The entries of xlarun's small caches (the XLA flag names a library defines, an interpreter's package versions):
one JSON file per entry under the cache's folder, named by a hash of the entry's key, which the entry also holds."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from xlarun.bounded_read import MAX_RECORD_BYTES, read_regular


def entry_path(folder: Path, key: str) -> Path:
    """Where the entry of ``key`` is kept in ``folder``."""
    return folder / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def read_entry(path: Path, key: str) -> dict[str, Any] | None:
    """The entry at ``path`` if it is a JSON object holding ``key``; None when it is missing, unreadable, damaged,
    not a regular file (a FIFO or a link there is never followed) or another key's."""
    try:
        stored = json.loads(read_regular(path, MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) and stored.get("key") == key else None


def write_entry(path: Path, record: dict[str, Any]) -> None:
    """Keep ``record`` at ``path`` whole or not at all (a temporary file renamed): readers see the whole entry or
    none. A cache that cannot be written (read-only, full disk) only costs the work again next time: nothing raised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(temp, path)
    except OSError:
        pass
