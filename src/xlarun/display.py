"""How the Python front door's objects show themselves: as the CLI prints them (``str``, ``repr``) and as
HTML in Jupyter (``_repr_html_``).

One source for both: the CLI's own printer (:mod:`xlarun.present`) runs with stdout captured, and the
tables, ``label: value`` pairs and lines it prints are recorded on the way by :func:`xlarun.console.recording`
(:func:`capture_printed`). The text is what the CLI
prints; the HTML is built from the recorded blocks, every value escaped, as the report does.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

from xlarun.console import Block, PairsBlock, TableBlock

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class Printed:
    """What a printer wrote: the text as a terminal (piped) shows it, and the same as blocks."""

    text: str
    blocks: list[Block] = field(default_factory=list)


def capture_printed(printer: Callable[..., Any], *args: Any, **kwargs: Any) -> Printed:
    """Run a printer of :mod:`xlarun.present` with stdout captured: its text, and the blocks it printed."""
    from xlarun import console

    buffer = io.StringIO()
    with console.recording() as blocks, contextlib.redirect_stdout(buffer):
        printer(*args, **kwargs)
    # a kernel may force colours (FORCE_COLOR): the text is what a pipe gets, without escapes
    return Printed(_ANSI.sub("", buffer.getvalue()).rstrip("\n"), list(blocks))


# --- HTML ------------------------------------------------------------------------------------------

STYLE = """<style>
.xlarun { font-family: system-ui, sans-serif; font-size: 13px; }
.xlarun table { border-collapse: collapse; margin: 4px 0 10px; }
.xlarun th, .xlarun td { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
.xlarun th { border-bottom: 1px solid #999; }
.xlarun td.num, .xlarun th.num { text-align: right; }
.xlarun caption { text-align: left; font-weight: bold; }
.xlarun .pairs th { border: none; color: #555; font-weight: normal; white-space: nowrap; }
.xlarun .line { font-family: monospace; white-space: pre-wrap; }
.xlarun .bold { font-weight: bold; } .xlarun .warning { color: #a60; } .xlarun .error { color: #c00; } .xlarun .ok { color: #080; }
.xlarun .diff-add { color: #080; } .xlarun .diff-del { color: #c00; } .xlarun .diff-hunk { color: #088; }
.xlarun .graph { max-width: 100%; max-height: 640px; overflow: auto; border: 1px solid #ddd; }
</style>"""


def _e(text: str) -> str:
    """``text`` escaped for HTML (``html`` imported here: only Jupyter asks for HTML, never the CLI)."""
    import html

    return html.escape(text)


def table_html(block: TableBlock) -> str:
    def cell(tag: str, header: str, value: str) -> str:
        cls = ' class="num"' if header in block.right else ""
        return f"<{tag}{cls}>{_e(value)}</{tag}>"

    caption = f"<caption>{_e(block.title)}</caption>" if block.title else ""
    head = "".join(cell("th", h, h) for h in block.headers)
    body = "".join(
        "<tr>" + "".join(cell("td", h, v) for h, v in zip(block.headers, row, strict=False)) + "</tr>" for row in block.rows
    )
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def pairs_html(block: PairsBlock) -> str:
    caption = f"<caption>{_e(block.title)}</caption>" if block.title else ""
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in block.pairs)
    return f'<table class="pairs">{caption}{rows}</table>'


def blocks_html(blocks: Sequence[Block]) -> str:
    out = []
    for block in blocks:
        if isinstance(block, TableBlock):
            out.append(table_html(block))
        elif isinstance(block, PairsBlock):
            out.append(pairs_html(block))
        else:
            cls = f"line {block.tone}".strip()
            out.append(f'<div class="{cls}">{_e(block.text) or "&nbsp;"}</div>')
    return "".join(out)


def page_html(*parts: str) -> str:
    """Parts (already escaped HTML) in one styled ``div``, as a notebook cell shows it."""
    return f'<div class="xlarun">{STYLE}{"".join(parts)}</div>'


def printed_html(printed: Printed, *extra: str) -> str:
    return page_html(blocks_html(printed.blocks), *extra)


def graph_html(svg: str, caption: str) -> str:
    """An SVG already made safe to inline (no scripts, handlers or links), with an escaped caption."""
    return f'<div class="graph" title="{_e(caption)}"><div class="bold">{_e(caption)}</div>{svg}</div>'


def note_html(text: str, tone: str = "warning") -> str:
    return f'<div class="line {tone}">{_e(text)}</div>'


class Shown:
    """Prints as the CLI does (``str``/``repr``), displays as HTML in Jupyter (``_repr_html_``)."""

    def _printed(self) -> Printed:  # the CLI printer's output, recorded
        raise NotImplementedError

    @cached_property
    def _shown(self) -> Printed:
        return self._printed()

    def __str__(self) -> str:
        return self._shown.text

    def __repr__(self) -> str:
        return self._shown.text

    def _repr_html_(self) -> str:
        return printed_html(self._shown)


T = TypeVar("T")


class ShownList(Shown, Sequence[T], Generic[T]):
    """A list of the front door's objects that prints (and displays) as the CLI's table of them."""

    def __init__(self, items: list[T]):
        self._items = items

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> list[T]: ...
    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)
