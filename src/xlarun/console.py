"""Terminal presentation shared by the commands: tables, JSON, sizes, warnings.

Everything xlarun prints for people goes through :func:`print_table`, :func:`print_pairs`, :func:`say`,
:func:`echo`, :func:`diff_line` and :func:`warn`. Inside :func:`recording`, each call is also kept as a
block (a table, pairs, a line with its tone): that is how the Python API shows the CLI's output as HTML,
without patching anything. The recorder lives in a context variable, so threads do not see each other's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


# What was printed, as recorded for Jupyter's HTML (xlarun.display): named tuples, which cost a fifth of a frozen
# dataclass to define, and every command imports this module
class TableBlock(NamedTuple):
    headers: tuple[str, ...]
    rows: list[list[str]]
    title: str | None = None
    right: tuple[str, ...] = ()


class PairsBlock(NamedTuple):
    pairs: list[tuple[str, str]]
    title: str | None = None


class LineBlock(NamedTuple):
    text: str
    tone: str = ""  # "", "ok", "warning", "error", "bold", "diff-add", "diff-del", "diff-hunk"


Block = TableBlock | PairsBlock | LineBlock
_RECORDER: ContextVar[list[Block] | None] = ContextVar("xlarun_console_recorder", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Block]]:
    """Keep what is printed in this context (and this thread) as blocks, while it is still printed."""
    blocks: list[Block] = []
    token = _RECORDER.set(blocks)
    try:
        yield blocks
    finally:
        _RECORDER.reset(token)


def _record(block: Block) -> None:
    blocks = _RECORDER.get()
    if blocks is not None:
        blocks.append(block)


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


_TONES = (("[red]", "error"), ("[bold red]", "error"), ("[yellow]", "warning"), ("[green]", "ok"), ("[bold]", "bold"))


def _tone_of(markup: str) -> str:
    head = markup.lstrip()
    return next((tone for prefix, tone in _TONES if head.startswith(prefix)), "")


def _console(stderr: bool = False, file: Any = None) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # piped output (grep, less, files) should not be folded to 80 columns
    width = 240 if file is not None or not stream.isatty() else None
    # force_jupyter=False: in a notebook too, text goes to stdout (where the API's recording captures it)
    return Console(stderr=stderr, file=file, highlight=False, soft_wrap=False, width=width, force_jupyter=False)


# --- what rich would print, written without rich ---------------------------------------------------------------
# Importing rich and drawing a 50-row table with it took longer than the rest of `xlarun runs` over 10,000 runs. Where
# rich would write no escape codes (not a terminal) and the text needs none of its work (markup, emoji codes, wide
# or control characters, wrapping), the same bytes are written here; anything else still goes through rich.

_RICH_WIDTH = 240  # _console's width off a terminal
_MARKUP_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")  # rich.markup's tags
_PLAIN_STYLES = {"bold", "dim", "italic", "underline", "red", "green", "yellow", "blue", "magenta", "cyan"}
_EMOJI_CODE = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")  # rich's emoji codes
DIGIT_EMOJI = {"100", "1234"}  # the emoji codes of digits alone (tests/test_console.py holds rich to it)


def _rich_styles(stream: Any) -> bool:
    """Whether rich would write escape codes to ``stream`` (rich.console.Console.is_terminal, in its order)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    if (force := os.environ.get("FORCE_COLOR")) is not None:
        return force != ""
    try:
        return stream.isatty()
    except ValueError:
        return False


def _as_is(text: str) -> bool:
    """Whether rich prints ``text`` (markup already taken out) as it is: printable ASCII, no emoji code it knows."""
    if not (text.isascii() and text.isprintable()):
        return False
    names = [m.group(2) for m in _EMOJI_CODE.finditer(text)] if ":" in text else []
    names = [n for n in names if not n.isdigit() or n in DIGIT_EMOJI]  # ":14:" of a time is none: no table to load
    if names:
        from rich.emoji import Emoji  # loads the table of names: 3 ms and more

        return all(Emoji.replace(f":{name}:") == f":{name}:" for name in names)
    return True


def _no_markup(text: str) -> bool:
    """Whether rich prints ``text``, read as markup, as it is (a bracket that opens no tag is text to rich)."""
    return ("[" not in text or (_MARKUP_TAG.search(text) is None and "\\[" not in text)) and _as_is(text)


def _without_markup(markup: str) -> str | None:
    """``markup`` as rich prints it off a terminal, or None where rich has work to do (escapes, a tag it would
    refuse, text it would change)."""
    if "\\" in markup:
        return None
    pieces, opened, start = [], [], 0
    for tag in _MARKUP_TAG.finditer(markup):
        pieces.append(markup[start : tag.start()])
        start = tag.end()
        name = tag.group(3).strip()
        if not name.startswith("/"):
            if not set(name.split(" ")) <= _PLAIN_STYLES:  # a style rich might refuse, a link, a handler: rich's
                return None
            opened.append(name)
        elif (closed := name[1:].strip()) in opened:
            del opened[len(opened) - 1 - opened[::-1].index(closed)]  # the latest of that name, as rich closes it
        elif closed == "" and opened:
            opened.pop()
        else:
            return None  # rich raises its MarkupError: let it
    pieces.append(markup[start:])
    if not all(_as_is(piece) for piece in pieces):
        return None
    return "".join(pieces)


def _write_as_rich(lines: Sequence[str], stderr: bool = False) -> bool:
    """Write ``lines`` as rich would print them off a terminal; False (nothing written) where rich must."""
    stream = sys.stderr if stderr else sys.stdout
    if _rich_styles(stream) or any(len(line) > _RICH_WIDTH for line in lines):
        return False
    stream.write("".join(f"{line}\n" for line in lines))
    stream.flush()  # as rich does after each print: lines keep their order against stderr's
    return True


def _table_as_rich(headers: Sequence[str], rows: list[list[str]], title: str | None, right: Sequence[str]) -> list[str] | None:
    """print_table's table as rich draws it (no box, no edge padding, columns two spaces apart), each line without
    the spaces rich pads it with, or None where rich has work to do (markup, wrapping, wide characters...)."""
    if not headers or any(len(row) != len(headers) for row in rows):
        return None
    if not all(_no_markup(cell) for cell in (*headers, *(c for row in rows for c in row))):
        return None
    ends_in_space = [i for i, h in enumerate(headers) if h in right and any(r[i].endswith(" ") for r in (headers, *rows))]
    if ends_in_space:  # rich trims a right-aligned cell's end
        return None
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    total = sum(widths) + 2 * (len(widths) - 1)
    if 0 in widths or total > _RICH_WIDTH:
        return None
    if title and (len(title) > total or title != title.strip() or not _no_markup(title)):
        return None  # rich wraps a long title and trims spaces around it
    aligned = [str.rjust if h in right else str.ljust for h in headers]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(align(c, w) for c, w, align in zip(cells, widths, aligned, strict=True)).rstrip()

    return ([title] if title else []) + [line(headers)] + [line(row) for row in rows]


def to_jsonable(value: Any) -> Any:
    """Dataclasses, pydantic models, enums and paths as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    return value


#: What ``note`` said since the last JSON document: the next one carries it as ``notes`` (a script reads there
#: what a person reads on stderr, e.g. which run a bare module name was taken from).
_notes: list[str] = []


def note(text: str) -> None:
    """One line on stderr about a choice xlarun made for the user; also in the next ``--json`` document."""
    _notes.append(text)
    _record(LineBlock(f"note: {text}", "warning"))
    sys.stderr.write(f"note: {text}\n")


def forget_notes() -> None:
    _notes.clear()


def print_json(value: Any) -> None:
    value = to_jsonable(value)
    if _notes and isinstance(value, dict):
        value = {**value, "notes": [*value.get("notes", []), *_notes]}
    _notes.clear()
    # default=str: a YAML date, set or binary value a spec's matrix carries prints as text instead of failing
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")


#: Above this many rows a table is printed as plain aligned text: rich takes ~0.4 ms a row, which made
#: `xlarun find` over a 120-run store spend more time drawing than searching.
PLAIN_TABLE_ROWS = 200


def _print_plain_table(headers: Sequence[str], rows: list[list[str]], title: str | None, right: Sequence[str]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(cells, widths, headers, strict=False)
        ).rstrip()

    out = [title] if title else []
    out.append(line(headers))
    out.extend(line(r) for r in rows)
    sys.stdout.write("\n".join(out) + "\n")


def print_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None, right: Sequence[str] = ()
) -> None:
    """A table on stdout; columns named in ``right`` are right-aligned (numbers)."""
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    _record(TableBlock(tuple(headers), cells, title, tuple(right)))
    if len(cells) > PLAIN_TABLE_ROWS:
        _print_plain_table(headers, cells, title, right)
        return
    drawn = _table_as_rich(headers, cells, title, right)
    if drawn is not None and _write_as_rich(drawn):
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    for header in headers:
        table.add_column(header, justify="right" if header in right else "left", overflow="fold")
    for row in cells:
        table.add_row(*row)
    if _rich_styles(sys.stdout):
        _console().print(table)
        return
    import io

    drawn_by_rich = io.StringIO()  # off a terminal, drawn into text whose lines end without rich's padding
    _console(file=drawn_by_rich).print(table)
    sys.stdout.write("".join(f"{line.rstrip()}\n" for line in drawn_by_rich.getvalue().splitlines()))
    sys.stdout.flush()


def print_pairs(pairs: Iterable[tuple[str, Any]], title: str | None = None) -> None:
    """``label: value`` lines, labels aligned."""
    pairs = [(k, v) for k, v in pairs if v not in (None, "", [], {})]
    _record(PairsBlock([(k, str(v)) for k, v in pairs], title))
    width = max((len(k) for k, _ in pairs), default=0)
    lines = [f"  {key.ljust(width)}  {value}" for key, value in pairs]
    heading = _without_markup(f"[bold]{title}[/bold]") if title else ""
    shown = None if heading is None else ([heading] if title else []) + lines
    if shown is not None and all(_as_is(line) for line in lines) and _write_as_rich(shown):
        return
    if title:
        _console().print(f"[bold]{title}[/bold]")
    for line in lines:
        _console().print(line, markup=False)


def echo(text: str = "") -> None:
    """Plain text on stdout, as it is (no markup)."""
    for line in str(text).split("\n"):
        _record(LineBlock(line))
    sys.stdout.write(f"{text}\n")


def say(markup: str) -> None:
    """A line with rich markup on stdout."""
    plain = [_without_markup(line) for line in markup.split("\n")]
    for line, text in zip(markup.split("\n"), plain, strict=True):
        _record(LineBlock(_plain(line) if text is None else text, _tone_of(line)))
    if None not in plain and _write_as_rich(plain):  # type: ignore[arg-type]
        return
    _console().print(markup)


_DIFF_STYLE = {"+": ("diff-add", "green"), "-": ("diff-del", "red"), "@": ("diff-hunk", "cyan")}


def diff_line(line: str) -> None:
    """A line of a unified diff, coloured on a terminal."""
    tone, colour = ("bold", "") if line.startswith(("+++", "---")) else _DIFF_STYLE.get(line[:1], ("", ""))
    _record(LineBlock(line, tone))
    if colour and tone != "bold" and sys.stdout.isatty():
        sys.stdout.write(f"\x1b[{ {'green': 32, 'red': 31, 'cyan': 36}[colour] }m{line}\x1b[0m\n")
    else:
        sys.stdout.write(f"{line}\n")


def warn(text: str) -> None:
    _record(LineBlock(f"warning: {text}", "warning"))
    _console(stderr=True).print(f"[yellow]warning:[/yellow] {escape_markup(text)}")


def error_line(text: str) -> None:
    _console(stderr=True).print(f"[bold red]error:[/bold red] {escape_markup(text)}")


def escape_markup(text: str) -> str:
    """``text`` printed as it is by rich (its square brackets not read as markup)."""
    from rich.markup import escape

    return escape(text)


def short_number(value: float | None) -> str:
    """A table cell's number in three significant digits; empty when there is none."""
    return "" if value is None else f"{value:.3g}"


def human_bytes(size: int | None) -> str:
    if size is None:
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def short_time(iso: str | None) -> str:
    """'2026-11-22T10:30:15.123+00:00' -> '2026-11-22 10:30:15'."""
    if not iso:
        return ""
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def count_or_blank(value: int | None) -> str:
    return "" if value is None else str(value)


class ProgressBar:
    """A progress bar on stderr for long work (silent below ``min_total`` items, and when stderr is not a terminal:
    in a log or a pipe it would leave a blank line whose presence depends on the machine's speed):
    ``update(done, total)``, ``close()``."""

    def __init__(self, label: str, enabled: bool = True, min_total: int = 200):
        self.label, self.enabled, self.min_total = label, enabled, min_total
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < self.min_total:
            return
        if self.bar is None:
            if not sys.stderr.isatty():
                self.enabled = False
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        assert self.task is not None
        self.bar.update(self.task, completed=done)
        if done >= total:  # finished: stop its refresh thread now (an index build after it may fork workers)
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
