"""How `xlarun diff` prints a module compared with another (a pass's effect, or the module across two runs): what is
compared, the structural summary, the peak memory of both, and the unified text diff."""

from __future__ import annotations

from typing import Any

from xlarun.console import diff_line, echo, human_bytes, say


def print_module_diff(result: Any, summary_only: bool = False) -> None:
    """A ModuleDiff as `xlarun diff` prints it: what is compared, the structural summary, the unified diff."""

    say(f"[bold]{result.after}[/bold]\n  against {result.before}")
    for line in result.summary.lines():
        echo(f"  {line}")
    if result.peak_bytes:
        echo(f"  {_peak_change(*result.peak_bytes)}")
    for note in result.notes:
        echo(f"  note: {note}")
    if not summary_only:
        _print_unified(result.unified)


def _peak_change(before: int | None, after: int | None) -> str:
    """``peak memory: 262.6 KiB -> 300.0 KiB (+14.2%)`` (`xlarun memory REF` tells what makes each up)."""
    shown = f"peak memory: {human_bytes(before) or 'not dumped'} -> {human_bytes(after) or 'not dumped'}"
    if before and after is not None:
        shown += f" ({100 * (after - before) / before:+.1f}%)"
    return shown


def _print_unified(lines: list[str]) -> None:
    if not lines:
        echo("(the texts are identical)")
        return
    echo("")
    for line in lines:
        diff_line(line)
