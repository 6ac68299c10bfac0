"""A tolerant reader of protobuf text format (``.pbtxt``), for TensorFlow's GraphDef dumps.

``google.protobuf.text_format`` refuses a whole file over one field its compiled schema does not
know (a newer TF's ``experimental_type``), a string that is not valid UTF-8, or a file cut short;
the seeds report exactly that. This reader needs no schema: every message is a list of
``(field, value)`` pairs, scalars are kept as text (strings unescaped to ``str``, bytes that are not
UTF-8 decoded with replacement), and it never raises on content: what it cannot read it skips,
counting the problems in :attr:`TextProto.problems`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*
    |(?P<string>"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)
    |(?P<open>[{<])|(?P<close>[}>])|(?P<colon>:)|(?P<list_open>\[)|(?P<list_close>\])|(?P<sep>[,;])
    |(?P<word>[^\s{}<>:\[\],;"'\#]+)""",
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{4}|.)", re.DOTALL)
_SIMPLE = {"n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v"}


@dataclass
class TextProto:
    """One message: its fields in file order (a field may repeat)."""

    fields: list[tuple[str, str | TextProto]] = field(default_factory=list)
    #: Things skipped while reading (only set on the top message).
    problems: list[str] = field(default_factory=list)

    def all(self, name: str) -> list[str | TextProto]:
        """Every value of field ``name``, in order."""
        return [v for k, v in self.fields if k == name]

    def first(self, name: str, default: Any = None) -> Any:
        """The first value of field ``name``, or ``default``."""
        return next((v for k, v in self.fields if k == name), default)

    def messages(self, name: str) -> list[TextProto]:
        return [v for v in self.all(name) if isinstance(v, TextProto)]


def _unescape(body: str) -> str:
    def one(m: re.Match) -> str:
        code = m.group(1)
        if code[0] == "x":
            return chr(int(code[1:], 16))  # a byte, kept as latin-1 until the whole string is decoded
        if code[0] in "01234567":
            return chr(int(code, 8) & 0xFF)
        if code[0] == "u":
            return "".join(chr(b) for b in chr(int(code[1:], 16)).encode("utf-8"))
        return _SIMPLE.get(code, code.encode("utf-8", "replace")).decode("latin-1")

    raw = _ESCAPE.sub(one, body)
    try:
        return raw.encode("latin-1").decode("utf-8", errors="replace")
    except UnicodeEncodeError:  # characters above 0xFF were written unescaped: already text
        return raw


def _tokens(text: str) -> Iterator[Any]:
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is not None:
            yield kind, m.group(kind)


def _string_value(token: str, problems: list[str]) -> str:
    closed = len(token) >= 2 and token[-1] == token[0]
    if not closed:
        problems.append("an unterminated string")
    return _unescape(token[1:-1] if closed else token[1:])


def parse_text_proto(text: str | bytes) -> TextProto:
    """Read protobuf text format without a schema; never raises on malformed content."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    top = TextProto()
    stack = [top]
    pending: str | None = None  # a field name waiting for its value
    in_list = False
    last_string: tuple[TextProto, int] | None = None  # "ab" "cd" is one string: where "ab" went
    for kind, value in _tokens(text):
        current = stack[-1]
        continued, last_string = last_string, None
        if kind == "string" and pending is None and continued is not None:
            message, position = continued
            name, before = message.fields[position]
            assert isinstance(before, str)  # last_string only ever points at a string value
            message.fields[position] = (name, before + _string_value(value, top.problems))
            last_string = continued
        elif kind in ("colon", "sep"):
            continue
        elif kind == "word" and pending is None and not in_list:
            pending = value
        elif kind in ("string", "word") and pending is not None:
            scalar = _string_value(value, top.problems) if kind == "string" else value
            current.fields.append((pending, scalar))
            if kind == "string" and not in_list:
                last_string = (current, len(current.fields) - 1)
            if not in_list:
                pending = None
        elif kind == "open":
            if pending is None:
                top.problems.append("a message without a field name")
            child = TextProto()
            current.fields.append((pending or "?", child))
            stack.append(child)
            pending, in_list = None, False
        elif kind == "close":
            if len(stack) > 1:
                stack.pop()
            else:
                top.problems.append("an unmatched closing bracket")
            pending, in_list = None, False
        elif kind == "list_open" and pending is not None:
            in_list = True
        elif kind == "list_close":
            pending, in_list = None, False
        else:
            top.problems.append(f"unexpected {value!r}")
            pending, in_list = None, False
    if len(stack) > 1:
        top.problems.append(f"{len(stack) - 1} messages not closed (the file is cut short)")
    return top
