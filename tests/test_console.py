"""console.py writes tables, pairs and lines without rich where rich would print them unchanged (off a terminal,
plain text): the bytes must be rich's, for every kind of content, and rich must still draw whatever needs it."""

from __future__ import annotations

import random

import pytest

from xlarun import console

PIECES = [
    "run", "a", "", " ", "  x ", "jit_f", "10:14:59", "2026-11-25 10:14:59", ":smile:", ":14:", "a:thumbs_up:b",
    "[x]", "[bold]b[/bold]", "\\[", "f32[64,64]", "[a", "\\[x]", "é", "中文", "tab\there", "line\nbreak", "7.7 KiB", "x" * 90, "y" * 250,
]  # fmt: skip


WRITE_AS_RICH = console._write_as_rich


def _both(monkeypatch, capsys, draw, *args, **kwargs) -> tuple[str, str, bool]:
    """``draw(*args, **kwargs)``'s stdout and stderr as console writes them, as rich alone writes them, and whether rich was skipped."""
    taken = []

    def spy(lines, stderr=False):
        done = WRITE_AS_RICH(lines, stderr)
        taken.append(done)
        return done

    monkeypatch.setattr(console, "_write_as_rich", spy)
    draw(*args, **kwargs)
    fast = capsys.readouterr()
    monkeypatch.setattr(console, "_write_as_rich", lambda lines, stderr=False: False)
    draw(*args, **kwargs)
    slow = capsys.readouterr()
    assert (fast.out, fast.err) == (slow.out, slow.err)
    return fast.out, slow.out, any(taken)


def _cell(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 2)))


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


def test_a_plain_table_is_written_as_rich_draws_it(monkeypatch, capsys):
    headers = ["run", "name", "modules", "batch"]
    rows = [["20261125-101459-3cba", "scale", "8", ""], ["20261125-101500-0001", "train step", "12", ""]]
    out, _, skipped = _both(monkeypatch, capsys, lambda: console.print_table(headers, rows, title="Runs", right=("modules",)))
    assert skipped
    assert out.splitlines() == [
        "Runs",
        "run                   name        modules  batch",
        "20261125-101459-3cba  scale             8",
        "20261125-101500-0001  train step       12",
    ]


def test_any_table_reads_the_same_with_or_without_rich(monkeypatch, capsys):
    rng = random.Random(27)
    skipped = 0
    for _ in range(300):
        width = rng.randint(1, 4)
        headers = [f"h{i}{_cell(rng) if rng.random() < 0.2 else ''}" for i in range(width)]
        rows = [[_cell(rng) for _ in range(width)] for _ in range(rng.randint(0, 4))]
        title = rng.choice([None, "Title", "A much longer title than the table", _cell(rng)])
        right = tuple(h for h in headers if rng.random() < 0.5)
        skipped += _both(monkeypatch, capsys, console.print_table, headers, rows, title=title, right=right)[2]
    assert 30 < skipped < 300  # both paths were exercised


def test_lines_and_pairs_read_the_same_with_or_without_rich(monkeypatch, capsys):
    rng = random.Random(11)
    markups = [
        "[dim]9950 older run(s) not shown (--last 0 lists every run)[/dim]", "[bold]x[/bold] [dim]y[/]", "plain",
        "[dim]unclosed", "[/dim] closes nothing", "[link=http://x]x[/link]", "a [b]c", "[bold red]e[/bold red]", "",
        "two\nlines", "[dim]:smile:[/dim]", "[dim]x:y[/dim]:smile:",
    ]  # fmt: skip
    skipped = 0
    for markup in markups + [_cell(rng) for _ in range(100)]:
        try:
            skipped += _both(monkeypatch, capsys, console.say, markup)[2]
        except Exception as exc:  # rich refuses it: so must the fast path have (it wrote nothing)
            assert type(exc).__module__.startswith("rich"), markup
            assert capsys.readouterr().out == ""
    for _ in range(100):
        pairs = [(f"k{i}", _cell(rng) or "v") for i in range(rng.randint(1, 3))]
        title = rng.choice([None, "module_0003.jit_step3.txt", _cell(rng)])
        skipped += _both(monkeypatch, capsys, console.print_pairs, pairs, title=title)[2]
    assert skipped > 40


def test_rich_draws_on_a_terminal_or_when_told_to(monkeypatch, capsys):
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not console._write_as_rich(["x"])
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert console._write_as_rich(["x"])
    assert capsys.readouterr().out == "x\n"


def test_times_are_told_from_emoji_codes_without_rich_s_table():
    from rich._emoji_codes import EMOJI

    assert {name for name in EMOJI if name.isdigit()} == console.DIGIT_EMOJI
    assert console._as_is("2026-11-25 10:14:59") and not console._as_is("a :100: b")
