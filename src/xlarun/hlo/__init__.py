"""HLO modules: the model (:mod:`.model`), the text reader (:mod:`.text`, with XLA's grammar in
:mod:`.grammar` and shape inference in :mod:`.shapes`), the proto reader (:mod:`.proto`), the whole-text
scan the index uses (:mod:`.scan`) and the lexing they share (:mod:`.lex`).

:func:`load_hlo` is the one loader: render, the index, the report, diff, view and replay read modules
through it (or :func:`read_hlo_file` for a path).
"""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.errors import InputError
from xlarun.hlo.patterns import LazyPattern

if TYPE_CHECKING:
    from xlarun.hlo.lex import LineError, as_xla_prints, split_top_level, strip_comments, strip_layouts, unquote, walk  # noqa: F401
    from xlarun.hlo.model import (  # noqa: F401
        CALLED_COMPUTATION_KEYS,
        INSTRUCTION_REF_KEYS,
        OPCODES,
        PER_RUN_ATTRIBUTES,
        HloComputation,
        HloInstruction,
        HloModule,
        assemble_module,
        format_signature,
        signature_of,
    )
    from xlarun.hlo.scan import TextFacts, scan_hlo_text  # noqa: F401
    from xlarun.hlo.text import parse_hlo_text  # noqa: F401

#: Names importable from ``xlarun.hlo`` and the module each lives in, loaded on first use: a command that only
#: decodes dump names (``xlarun files``, ``cat``: ``xlarun.hlo.names``) never loads the model and the readers.
_REEXPORTED = {
    **dict.fromkeys(
        ("LineError", "as_xla_prints", "split_top_level", "strip_comments", "strip_layouts", "unquote", "walk"), "lex"
    ),
    **dict.fromkeys(
        (
            "CALLED_COMPUTATION_KEYS",
            "INSTRUCTION_REF_KEYS",
            "OPCODES",
            "PER_RUN_ATTRIBUTES",
            "HloComputation",
            "HloInstruction",
            "HloModule",
            "assemble_module",
            "format_signature",
            "signature_of",
        ),
        "model",
    ),
    "TextFacts": "scan",
    "scan_hlo_text": "scan",
    "parse_hlo_text": "text",
}


def __getattr__(name: str) -> Any:
    if name not in _REEXPORTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_REEXPORTED[name]}"), name)
    globals()[name] = value
    return value


# What HLO text starts with, after comments: the HloModule line, or a computation (name, maybe its
# parameters and result, '{', then an instruction), as XLA's parser reads a file without an HloModule line.
_HLO_TEXT_START = LazyPattern(
    rb"(?:\s|//[^\n]*|/\*.*?\*/)*(?:HloModule\s|(?:ENTRY\s+)?%?[A-Za-z_][\w.\-]*(?:[ \t]*\([^\n=]*?|\s*)"
    rb"\{(?:\s|//[^\n]*|/\*.*?\*/)*(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=)",
    re.S,
)
_GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = LazyPattern(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_FORMATS_HINT = (
    "xlarun reads HLO text (.txt, .hlo), HLO protos (.pb, .hlo.pb: HloProto, HloModuleProto, HloSnapshot), gzipped or not"
)


def looks_like_hlo_text(data: bytes) -> bool:
    """The one test of "is this HLO text": after comments and blank lines, an ``HloModule`` line or a
    computation (``[ENTRY] name [(params) -> shape] {`` and an instruction) starts the bytes."""
    return _HLO_TEXT_START.match(data[:65536]) is not None


def looks_like_text(data: bytes) -> bool:
    """No control characters in the first 4 KiB (protos have them); empty data is not text."""
    return bool(data) and _CONTROL.search(data[:4096]) is None


def gunzip(data: bytes, name: str = "the file") -> bytes:
    """``data`` decompressed when it is gzip (``--xla_dump_compress_protos``), else as it is."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    import gzip

    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as error:
        raise InputError(f"{name} is not a valid gzip file: {error}") from None


def load_hlo(data: bytes, name: str = "", kind: str | None = None, summary: bool = False) -> HloModule:
    """An HLO module from a file's bytes: the one loader (render, the index and replay use it).

    Gzipped or not; HLO text (as XLA prints it, hand-written, comments first) or a binary HloProto,
    HloModuleProto or HloSnapshot. ``kind`` (``"text"`` or ``"proto"``) says which when the caller knows;
    else ``name``'s extension (``.txt``/``.hlo``, ``.pb``) does; else the content. ``summary``: see
    :func:`parse_hlo_text`. Raises :class:`InputError` for anything else.
    """
    label = name or "the file"
    data = gunzip(data, label)
    base = name.removesuffix(".gz")
    if kind is None:
        if base.endswith(".pb"):
            kind = "proto"
        elif base.endswith((".txt", ".hlo")) or looks_like_hlo_text(data):
            kind = "text"
        elif looks_like_text(data):
            raise InputError(f"{label} is text but not an HLO module", _FORMATS_HINT)
        else:
            kind = "proto"
    if kind == "text":
        from xlarun.hlo.text import parse_hlo_text

        return parse_hlo_text(data.decode("utf-8", errors="replace"), summary=summary)
    from xlarun.hlo.proto import summarize_hlo_proto  # loaded when a proto is read

    return summarize_hlo_proto(data)


def read_hlo_file(path: str | Path) -> HloModule:
    """Read a module from a file (see :func:`load_hlo`); by extension where it says, else by content.

    A ``.pb`` may hold an HloProto (XLA's dump), a bare HloModuleProto or an HloSnapshot.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = "check the path; dumps are named module_NNNN.<name>.<stage>.txt"
        raise InputError(f"no such HLO file: {path}", hint) from None
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    try:
        if not path.name.removesuffix(".gz").endswith((".pb", ".txt", ".hlo")) and not looks_like_hlo_text(gunzip(data)):
            raise InputError(f"cannot tell the format of {path}", _FORMATS_HINT)
        return load_hlo(data, path.name)
    except InputError as error:
        if error.message.startswith("cannot tell the format"):
            raise
        raise InputError(f"{path}: {error.message}", error.hint) from None
