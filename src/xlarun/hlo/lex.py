"""Scanning HLO text: balanced brackets, string literals, /* comments */ and layouts.

The primitives :mod:`xlarun.hlo` builds its parser on, kept apart because they know nothing of
instructions or computations.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r'[(){}\[\]",]|/\*')
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_COMMENT_OR_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|/\*.*?\*/')
_LAYOUT = re.compile(r"\]\{[^{}]*\}")
_TOP_LEVEL_COMMA = re.compile(r"\s*,\s*(?![^\[]*\])")  # not between [ and ]
_ESCAPE = re.compile(r"\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


# XLA prints one instruction per line indented by exactly two spaces, and nothing else so indented; text
# with deeper indents (wrapped lines), indented comments or blank indented lines is hand-written. One
# search for any of them ("\n   ", "\n  //", "\n  \n", "\n \n", "\n\t"): five substring scans cost 3x more.
_NOT_AS_XLA_PRINTS = re.compile(rb"\n(?: (?: (?: |//|\n)|\n)|\t)")


def as_xla_prints(data: bytes) -> bool:
    """True for module text laid out as XLA prints it: each instruction on one line indented by two spaces,
    and no other line so indented (hand-written HLO may wrap lines, indent comments...)."""
    return data.startswith(b"HloModule ") and _NOT_AS_XLA_PRINTS.search(data) is None


class LineError(Exception):
    """A malformed line; turned into an InputError carrying the line number."""


def walk(text: str, pos: int, stop_at_comma: bool) -> int:
    """Scan balanced brackets, strings and /* comments */ from ``pos``.

    With ``stop_at_comma`` return the index of the first top-level comma (or the end of the text);
    otherwise ``text[pos]`` opens a bracket and the index just past its closing bracket is returned.
    """
    depth = 0
    while True:
        m = _SPECIAL.search(text, pos)
        if m is None:
            if depth or not stop_at_comma:
                raise LineError("unbalanced brackets (the line may be cut short)")
            return len(text)
        token, i = m.group(), m.start()
        if token == '"':
            s = _STRING.match(text, i)
            if s is None:
                raise LineError("unterminated string")
            pos = s.end()
        elif token == "/*":
            end = text.find("*/", i + 2)
            if end < 0:
                raise LineError("unterminated /* comment")
            pos = end + 2
        elif token == ",":
            if depth == 0 and stop_at_comma:
                return i
            pos = i + 1
        elif token in "({[":
            depth += 1
            pos = i + 1
        else:
            depth -= 1
            pos = i + 1
            if depth < 0:
                raise LineError(f"unexpected '{token}'")
            if depth == 0 and not stop_at_comma:
                return pos


def split_top_level(text: str) -> list[str]:
    pieces, pos = [], 0
    while pos <= len(text):
        end = walk(text, pos, True)
        pieces.append(text[pos:end])
        pos = end + 1
    return pieces


def strip_comments(text: str) -> str:
    """Drop /* comments */ (XLA prints /*index=5*/ in long lists), leaving string contents alone."""
    if "/*" not in text:
        return text
    return _COMMENT_OR_STRING.sub(lambda m: m.group() if m.group().startswith('"') else "", text)


def unquote(text: str) -> str:
    """Decode an HLO string literal (``"..."`` with C escapes, octal bytes for non-ASCII)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        text = text[1:-1]
    if "\\" not in text:
        return text

    def one(m: re.Match) -> str:
        code = m.group(1)
        if code[0] in "01234567":
            return chr(int(code, 8))
        if code[0] == "x" and len(code) == 3:
            return chr(int(code[1:], 16))
        return _SIMPLE_ESCAPES.get(code, code)

    decoded = _ESCAPE.sub(one, text)
    try:  # octal escapes spell UTF-8 bytes one by one
        return decoded.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return decoded


def strip_layouts(shape: str) -> str:
    """``(f32[8,4]{1,0}, /*index=1*/s32[])`` -> ``(f32[8,4], s32[])``."""
    shape = _LAYOUT.sub("]", strip_comments(shape))
    return _TOP_LEVEL_COMMA.sub(", ", shape).strip()
