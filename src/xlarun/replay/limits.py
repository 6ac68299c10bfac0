"""The explicit limits of a replay: how much data it may make, how deep a module's text may nest,
and the memory and time its child process gets.

A replay refuses, before allocating anything, a module whose arguments and results would take
more than ``ReplayOptions.max_data_bytes`` (``--max-data-size``); it refuses HLO text nested deeper
than :data:`MAX_TEXT_NESTING` (XLA's recursive parser would overflow its stack: a segfault); and its
child process runs under an address-space limit (:func:`address_space_limit`) and a time limit.
"""

from __future__ import annotations

import re

from xlarun.errors import InputError

#: Arguments + results a replay may make by default (``--max-data-size``).
DEFAULT_MAX_DATA_BYTES = 4 << 30
#: Brackets HLO text may nest: real modules stay under ~50 (tuple shapes, literals of high rank).
MAX_TEXT_NESTING = 1000
#: What jaxlib, XLA's thread pools and the compiler take besides the data (measured: ~1.5 GB of address space).
_ENGINE_ADDRESS_SPACE = 8 << 30
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_CHUNK = 1 << 22
_QUOTED = re.compile(rb'"(?:[^"\\]|\\.)*"')


def parse_size(text: str) -> int:
    """Bytes in ``"4G"``, ``"512MiB"``, ``"1.5GB"`` or ``"1000"`` (binary units); ``"0"``/``"none"``: 0, no limit."""
    if text.strip().lower() in ("none", "off", "0"):
        return 0
    match = _SIZE.match(text)
    if not match:
        raise InputError(f"not a size: {text!r}", "write it as 4G, 512M or a number of bytes")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(nbytes: int) -> str:
    """``7.6 GB`` style (binary units, one decimal)."""
    size = float(nbytes)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def check_data_size(argument_bytes: int, result_bytes: int, limit: int | None) -> None:
    """Raise InputError when the arguments and results would take more than ``limit`` bytes (0/None: no limit)."""
    total = argument_bytes + result_bytes
    if not limit or total <= limit:
        return
    raise InputError(
        f"the module's arguments and results need {format_size(total)} (arguments {format_size(argument_bytes)}, "
        f"results {format_size(result_bytes)}), more than the limit of {format_size(limit)}",
        "raise it with --max-data-size (0: no limit) on a machine with the memory, or replay a smaller module",
    )


def text_nesting(data: bytes) -> int:
    """The deepest bracket nesting ``(``/``{``/``[`` of HLO text, quoted strings left out (linear, in chunks)."""
    import numpy as np

    step = np.zeros(256, np.int8)
    step[list(b"({[")], step[list(b")}]")] = 1, -1
    text = _QUOTED.sub(b'""', data)
    depth = deepest = 0
    for start in range(0, len(text), _CHUNK):
        running = np.cumsum(step[np.frombuffer(text, np.uint8, min(_CHUNK, len(text) - start), start)], dtype=np.int64) + depth
        if running.size:
            deepest, depth = max(deepest, int(running.max())), int(running[-1])
    return deepest


def check_text_nesting(data: bytes, name: str, limit: int = MAX_TEXT_NESTING) -> None:
    """Raise InputError for HLO text nested deeper than ``limit``: XLA's parser recurses once per level."""
    if data.count(b"(") + data.count(b"{") + data.count(b"[") <= limit:
        return  # cannot nest deeper than it has brackets
    deepest = text_nesting(data)
    if deepest > limit:
        raise InputError(
            f"{name} nests brackets {deepest} deep, more than the limit of {limit}: XLA's parser would overflow its stack",
            "is this a real HLO dump? XLA itself never writes text nested this deep",
        )


def address_space_limit(max_data_bytes: int | None) -> int | None:
    """RLIMIT_AS for a replay's child: room for the engine and three copies of the data; ``None`` without a data limit."""
    if not max_data_bytes:
        return None
    return _ENGINE_ADDRESS_SPACE + 3 * max_data_bytes
