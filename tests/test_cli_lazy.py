"""cli.py builds a command only when it is looked up (``COMMANDS`` names each command's module): the table must say
what the command modules register, in the order an eager build lists them, and every help text must read as if all
of them were built at start-up."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import typer

from xlarun import cli


def _eager_group():
    """The root group as typer builds it when every module registers on the app before it is built."""
    app = typer.Typer(
        name="xlarun", cls=typer.core.TyperGroup, help=cli.app.info.help, no_args_is_help=True, add_completion=False,
        rich_markup_mode=None, pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
    )  # fmt: skip
    app.callback()(cli._root)
    for name in cli.COMMAND_MODULES:
        importlib.import_module(f"xlarun.commands.{name}").register(app)
    return typer.main.get_command(app)


def _help(group, *path: str) -> str:
    ctx = group.make_context("xlarun", list(path) or [], resilient_parsing=True, terminal_width=100, max_content_width=100)
    command = group
    for name in path:
        command = command.get_command(ctx, name)
        ctx = command.make_context(name, [], parent=ctx, resilient_parsing=True)
    return command.get_help(ctx)


def test_the_table_names_every_command_in_the_order_an_eager_build_lists_them():
    eager = _eager_group()
    assert list(cli.COMMANDS) == list(eager.commands)
    lazy = typer.main.get_command(cli.app)
    assert [lazy.get_command(None, name).name for name in cli.COMMANDS] == list(eager.commands)


def test_help_reads_the_same_as_an_eager_build():
    eager, lazy = _eager_group(), typer.main.get_command(cli.app)
    assert _help(lazy) == _help(eager)
    assert "runs" in _help(lazy) and "images" in _help(lazy)
    for name in cli.COMMANDS:
        assert _help(lazy, name) == _help(eager, name), name
    assert _help(lazy, "images", "build") == _help(eager, "images", "build")


def test_a_command_builds_only_itself():
    lazy = typer.main.get_command(cli.app)
    lazy.get_command(None, "runs")
    assert set(lazy.commands._built) == {"runs"}
    assert lazy.get_command(None, "rnus") is None
    assert "rnus" not in lazy.commands and len(lazy.commands) == len(cli.COMMANDS)


CHILD = """
import contextlib, json, os, sys
from xlarun.cli import main
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    code = main(["explain", "module_0000.jit_f.before_optimizations.txt"])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.startswith("xlarun.commands."))}))
"""


def test_running_a_command_imports_only_its_module():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "code": 0,
        "modules": ["xlarun.commands.completion", "xlarun.commands.navigate"],  # completion: main() asks it first
    }
