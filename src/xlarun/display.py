"""How the Python front door's objects show themselves: as the CLI prints them (``str``, ``repr``) and as
HTML in Jupyter (``_repr_html_``).

One source for both: the CLI's own printer runs with stdout captured, and the tables, ``label: value``
pairs and lines it prints are recorded on the way (:func:`capture_printed`). The text is what the CLI
prints; the HTML is built from the recorded blocks, every value escaped, as the report does.
"""

from __future__ import annotations

import contextlib
import html
import io
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class TableBlock:
    headers: tuple[str, ...]
    rows: list[list[str]]
    title: str | None = None
    right: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairsBlock:
    pairs: list[tuple[str, str]]
    title: str | None = None


@dataclass(frozen=True)
class LineBlock:
    text: str
    tone: str = ""  # "", "warning", "error", "bold", "diff-add", "diff-del", "diff-hunk"


Block = TableBlock | PairsBlock | LineBlock


@dataclass
class Printed:
    """What a CLI printer wrote: the text as a terminal (piped) shows it, and the same as blocks."""

    text: str
    blocks: list[Block] = field(default_factory=list)


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


def _tone_of(markup: str) -> str:
    head = markup.lstrip()[:16]
    if head.startswith("[red]") or head.startswith("[bold red]"):
        return "error"
    if head.startswith("[yellow]"):
        return "warning"
    if head.startswith("[green]"):
        return "ok"
    if head.startswith("[bold]"):
        return "bold"
    return ""


def _diff_tone(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "bold"
    return {"+": "diff-add", "-": "diff-del", "@": "diff-hunk"}.get(line[:1], "")


@contextlib.contextmanager
def _recording(blocks: list[Block]) -> Iterator[None]:
    """Record what ``xlarun.console`` and ``typer.echo`` print while the real printers still print it."""
    from unittest import mock

    import typer

    from . import console

    real_table, real_pairs, real_say, real_echo, real_warn = console.print_table, console.print_pairs, console.say, console.echo, console.warn
    real_typer_echo, real_secho = typer.echo, typer.secho

    def print_table(headers, rows, title=None, right=()):
        rows = [["" if cell is None else str(cell) for cell in row] for row in rows]
        blocks.append(TableBlock(tuple(headers), rows, title, tuple(right)))
        real_table(headers, rows, title=title, right=right)

    def print_pairs(pairs, title=None):
        pairs = [(k, v) for k, v in pairs if v not in (None, "", [], {})]
        blocks.append(PairsBlock([(k, str(v)) for k, v in pairs], title))
        real_pairs(pairs, title=title)

    def say(markup):
        for line in markup.split("\n"):
            blocks.append(LineBlock(_plain(line), _tone_of(line)))
        real_say(markup)

    def echo(text=""):
        blocks.append(LineBlock(str(text)))
        real_echo(text)

    def warn(text):
        blocks.append(LineBlock(f"warning: {text}", "warning"))
        real_warn(text)

    def typer_echo(message=None, file=None, nl=True, err=False, color=None):
        if not err:
            for line in str(message if message is not None else "").split("\n"):
                blocks.append(LineBlock(line, _diff_tone(line)))
        real_typer_echo(message, file=file, nl=nl, err=err, color=color)

    def typer_secho(message=None, file=None, nl=True, err=False, color=None, **_style):
        typer_echo(message, file=file, nl=nl, err=err, color=False)

    # rich prints straight into the notebook when it sees Jupyter; here its output must go to our buffer
    with mock.patch("rich.console._is_jupyter", lambda: False), \
         mock.patch.multiple(console, print_table=print_table, print_pairs=print_pairs, say=say, echo=echo, warn=warn), \
         mock.patch.multiple(typer, echo=typer_echo, secho=typer_secho):  # fmt: skip
        yield


def capture_printed(printer: Callable[..., Any], *args: Any, **kwargs: Any) -> Printed:
    """Run a CLI printer with stdout captured: its text, and the blocks it printed."""
    import typer

    blocks: list[Block] = []
    buffer = io.StringIO()
    with _recording(blocks), contextlib.redirect_stdout(buffer):
        try:
            printer(*args, **kwargs)
        except typer.Exit:  # a command's exit code: the text is what matters here
            pass
    # a kernel may force colours (FORCE_COLOR): the text is what a pipe gets, without escapes
    return Printed(_ANSI.sub("", buffer.getvalue()).rstrip("\n"), blocks)


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

_e = html.escape


def table_html(block: TableBlock) -> str:
    def cell(tag: str, header: str, value: str) -> str:
        cls = ' class="num"' if header in block.right else ""
        return f"<{tag}{cls}>{_e(value)}</{tag}>"

    caption = f"<caption>{_e(block.title)}</caption>" if block.title else ""
    head = "".join(cell("th", h, h) for h in block.headers)
    body = "".join("<tr>" + "".join(cell("td", h, v) for h, v in zip(block.headers, row)) + "</tr>" for row in block.rows)
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
