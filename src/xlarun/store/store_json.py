"""What the store's own JSON files may hold: parsed within a nesting bound, then checked for the shape xlarun writes.

A run's ``manifest.json`` and ``files.json``, and a staging folder's ``archived.json``, are read by every command that
meets them (the index is rebuilt from them). One changed by hand or by a disk error must be named as damage, never
reach a ``RecursionError`` in the JSON parser, a ``TypeError`` in a caller, or an overflow in SQLite. Reading the
bytes is the caller's; these functions only judge what was read (:class:`StoreJsonDamage`, a ``ValueError``, says why).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from xlarun.errors import StoreError, os_error_words

#: Deeper than anything xlarun writes (a manifest's matrix or backend details nest a few levels), far below the
#: parser's recursion limit.
MAX_DEPTH = 64
#: What SQLite stores in an INTEGER column.
MAX_INT = (1 << 63) - 1

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class StoreJsonDamage(ValueError):
    """A store's JSON file is not what xlarun writes; the message says how, in words for a user."""


def parse_store_json(data: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``data`` (UTF-8 bytes or text), refused (:class:`StoreJsonDamage`) when it is not UTF-8,
    not JSON, or nested deeper than ``max_depth``: the depth is measured before the parser recurses."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreJsonDamage(f"not UTF-8 (byte {exc.start})") from None
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub('""', data)):
        depth += 1 if bracket in "[{" else -1
        if depth > deepest:
            deepest = depth
            if deepest > max_depth:
                raise StoreJsonDamage(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: not reached within max_depth; kept as a last guard
        raise StoreJsonDamage(f"not valid JSON ({exc})") from None


#: The manifest keys the index and the commands read, with the types xlarun writes (None: may be null).
_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "name": (str,),
    "kind": (str,),
    "status": (str,),
    "exit_code": (int, type(None)),
    "error": (str, type(None)),
    "backend": (str,),
    "framework": (str, type(None)),
    "started": (str,),
    "ended": (str,),
    "duration_s": (int, float),
    "spec_path": (str, type(None)),
    "batch_id": (str, type(None)),
    "matrix": (dict, type(None)),
    "tags": (dict,),
    "files": (int,),
    "dump_bytes": (int,),
    "command": (list,),
    "xlarun_command": (list,),
    "xla_flags": (list,),
    "tf_xla_flags": (list,),
    "versions": (dict,),
    "host": (dict,),
    "env_delta": (dict,),
    "warnings": (list,),
    "file_notes": (list,),
    "backend_details": (dict,),
    "git": (dict, type(None)),
    "recovered": (dict, type(None)),
    "imported_from": (dict, type(None)),
}


def judged_object(text: str, path: Path) -> dict:
    """The JSON object a store file at ``path`` holds (``text``), or StoreError naming the file and the damage."""
    try:
        value = parse_store_json(text)
    except StoreJsonDamage as exc:
        raise StoreError(f"{path} is damaged: {exc}", "restore it from a backup") from None
    if not isinstance(value, dict):
        raise StoreError(f"{path} is damaged: a JSON {_json_type(value)}, not an object", "restore it from a backup")
    return value


def checked_manifest(data: Any) -> dict:
    """``data`` (a parsed ``manifest.json``) as it is, once each key the index reads has the type xlarun writes."""
    if not isinstance(data, dict):
        raise StoreJsonDamage(f"a JSON {_json_type(data)}, not an object")
    for key, types in _MANIFEST_TYPES.items():
        if key in data and type(data[key]) not in types:
            raise StoreJsonDamage(f"its {key!r} is a JSON {_json_type(data[key])}")
        if key in data and type(data[key]) is int and abs(data[key]) > MAX_INT:
            raise StoreJsonDamage(f"its {key!r} is a number past what the index stores: {str(data[key])[:24]}")
    tags = data.get("tags") or {}
    if not all(isinstance(v, str) for v in tags.values()):
        raise StoreJsonDamage("its 'tags' hold a value that is not text")
    return data


def checked_file_entries(data: Any) -> list[tuple[str, str, int]]:
    """(path, digest, size) of each entry of a parsed file list (``files.json``, ``archived.json``'s ``files``):
    a list of objects with a text path and digest and a size SQLite can store, no path twice."""
    if not isinstance(data, list):
        raise StoreJsonDamage(f"a JSON {_json_type(data)}, not a list")
    entries, seen = [], set()
    for n, item in enumerate(data):
        if not isinstance(item, dict):
            raise StoreJsonDamage(f"entry {n} is a JSON {_json_type(item)}, not an object")
        path, digest, size = item.get("path"), item.get("digest"), item.get("size")
        if not isinstance(path, str) or not isinstance(digest, str):
            raise StoreJsonDamage(f"entry {n} lacks a text path or digest")
        if type(size) is not int or not 0 <= size <= MAX_INT:
            raise StoreJsonDamage(f"entry {n} ({path[:80]!r}) has a size that is not a byte count: {str(size)[:24]}")
        if path in seen:
            raise StoreJsonDamage(f"the path {path[:80]!r} is listed twice")
        seen.add(path)
        entries.append((path, digest, size))
    return entries


def unreadable_words(exc: OSError | ValueError) -> str:
    """Why a store's JSON file could not be read, in words (a permission problem names the user)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    if isinstance(exc, IsADirectoryError):
        return "a folder, not a file"
    return f"unreadable ({os_error_words(exc)})" if isinstance(exc, OSError) else f"unreadable ({exc})"


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
