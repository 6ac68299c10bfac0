"""The damaged-store sweep: real stores of two imported runs, every main command run against one damaged copy, and
what each ended with counted (exit 4 or a traceback is a crash; a command past its time is a hang)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "compat"
#: The two runs of a sweep's store: the first is the one damaged, the second must read back whole.
RUN_FIXTURES = ("jax-0.10.2", "jax-0.11.2")
#: A command that takes longer than this on a two-run store is stuck.
HANG_S = 120


def build_two_run_store(root: Path) -> list[str]:
    """Import the two fixture dumps into a new store at ``root``; returns the run ids, oldest first."""
    from typer.testing import CliRunner

    from xlarun.cli import app

    for fixture in RUN_FIXTURES:
        result = CliRunner().invoke(app, ["import", str(FIXTURES / fixture / "dumps.tar.gz"), "--store", str(root)])
        assert result.exit_code == 0, result.output
    settle(root)
    return sorted(p.name for p in (root / "runs").iterdir())


def settle(store: Path) -> None:
    """Every SQLite file's write-ahead log folded into it and removed, as after a clean exit."""
    for path in store.rglob("*.sqlite"):
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    for side in store.rglob("*.sqlite-*"):
        side.unlink()


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def commands(damaged_run: str, export_to: Path) -> list[tuple[str, ...]]:
    """The main commands, ``rm`` of the damaged run last."""
    return [
        ("runs",),
        ("modules",),
        ("show", "train_step"),
        ("cat", "train_step"),
        ("find", "dot"),
        ("check",),
        ("gc",),
        ("reindex",),
        ("export", damaged_run, str(export_to)),
        ("recover",),
        ("rm", "--yes", damaged_run),
    ]


@dataclass
class Swept:
    """What the commands of one sweep ended with."""

    codes: dict[str, int] = field(default_factory=dict)
    crashes: list[tuple[tuple[str, ...], int, str]] = field(default_factory=list)
    hangs: list[tuple[str, ...]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)


class _Stuck(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Stuck


def sweep(cli, store: Path, command_lines: list[tuple[str, ...]]) -> Swept:
    """Run each command line against ``store`` in this process, each within :data:`HANG_S`."""
    swept = Swept()
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for command in command_lines:
            signal.alarm(HANG_S)
            try:
                result = cli(*command, "--store", store)
            except _Stuck:
                swept.hangs.append(command)
                continue
            except Exception as exc:  # escaped the CLI's own handler: a crash
                swept.crashes.append((command, -1, repr(exc)))
                continue
            finally:
                signal.alarm(0)
            swept.codes[command[0]] = result.exit_code
            swept.outputs[command[0]] = result.output
            if result.exit_code not in (0, 1, 2, 3) or "Traceback" in result.output:
                swept.crashes.append((command, result.exit_code, result.output[-600:]))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return swept
