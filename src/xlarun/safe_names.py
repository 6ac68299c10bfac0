"""The names xlarun writes under: run ids, the names of a run's metadata files, and file paths in a run.

Every name that reaches a write from outside the code (a ``files.json`` read back for ``export``, a shipment from a
Ray node, an archive or folder being imported, a bundle, a report) is checked here before anything is written, so
that a write lands below its target and nowhere else. A bad name is refused with ``error`` (InputError, exit 2, for
what a user gave; the caller passes StoreError for a store's own damaged list), naming the name and where it came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from xlarun.errors import ExitCode, InputError, StoreError, XlarunError

#: What a run id may be: letters, digits, ``.``, ``_`` and ``-``, not starting with a dot (xlarun's own are
#: ``20261122-103015-a1b2``; a leading dot names the store's own temporary folders).
_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_DRIVE = re.compile(r"^[A-Za-z]:")

#: The refusal to raise: called with the message and the hint.
Refusal = Callable[[str, str], XlarunError]


def store_damage(message: str, hint: str) -> StoreError:
    """The refusal for a name in a store's own list (``files.json``): damage, exit 1, as ``check`` reports it."""
    return StoreError(message, f"{hint}; `xlarun check` names the damage", exit_code=ExitCode.FAILED)


def _shown(name: object) -> str:
    text = repr(name)
    return text if len(text) <= 90 else f"{text[:40]}...{text[-40:]}"


def relative_path_problem(path: str) -> str | None:
    """Why ``path`` is not a relative posix path that stays below the folder it is joined to (``..`` parts, an
    absolute path or drive, a NUL, nothing at all), or None when it is one."""
    if "\x00" in path:
        return "NUL in name"
    if path.startswith("/") or _DRIVE.match(path):
        return "absolute path"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "path traversal ('..')"
    return None if parts else "empty name"


def checked_relative_path(path: object, source: str, error: Refusal = InputError) -> str:
    """``path`` when it is a relative path that stays below its folder (see :func:`relative_path_problem`), else
    ``error`` naming it and ``source`` (where it came from: ``run X's files.json``)."""
    problem = relative_path_problem(path) if isinstance(path, str) else "not a string"
    if problem:
        raise error(
            f"{source} names the file {_shown(path)}: {problem}", "nothing was written there; the list is not to be trusted"
        )
    return path  # type: ignore[return-value]  # a str: relative_path_problem ran


def checked_member_name(name: object, source: str, allowed: tuple[str, ...] | None = None, error: Refusal = InputError) -> str:
    """``name`` when it is one plain file name (no ``/``, not ``.`` or ``..``, no NUL, not hidden) and, when
    ``allowed`` is given, one of those; else ``error`` naming it and ``source``."""
    if not isinstance(name, str):
        problem = "not a string"
    elif allowed is not None and name not in allowed:
        problem = f"not one of {', '.join(allowed)}"
    elif not name or "/" in name or "\x00" in name or name.startswith("."):
        problem = "not a plain file name"
    else:
        return name
    raise error(f"{source} names the file {_shown(name)}: {problem}", "nothing was written there")


def checked_run_id(run_id: object, source: str, error: Refusal = InputError) -> str:
    """``run_id`` when it is a run id (letters, digits, ``.``, ``_``, ``-``; not hidden; at most 128 characters),
    else ``error`` naming it and ``source``."""
    if isinstance(run_id, str) and _RUN_ID.fullmatch(run_id):
        return run_id
    raise error(
        f"{source} gives the run id {_shown(run_id)}: not a run id (letters, digits, '.', '_' and '-' only)",
        "nothing was written; a run id never holds '/' or starts with '.'",
    )
