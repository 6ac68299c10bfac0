"""cli.py's plain values: typer 0.29 coerces every value through a pydantic TypeAdapter, and importing pydantic costs
more than the rest of a reading command. xlarun's commands take their plain values (strings, decimal ints within
bounds, unchecked paths, missing values) through :func:`xlarun.cli.plain_value` on typer's public parameter classes,
and leave the rest, with typer's messages, to typer. No private name of typer is used, so typer is not pinned."""

from __future__ import annotations

import enum
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer
from packaging.requirements import Requirement
from typer.testing import CliRunner

from xlarun.cli import PlainArgument, PlainCommand, PlainOption, app

ROOT = Path(__file__).resolve().parents[1]


class _Speed(str, enum.Enum):
    fast = "fast"
    slow = "slow"


def _plain_app() -> typer.Typer:
    demo = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)

    @demo.command(cls=PlainCommand)
    def show(
        name: str,
        count: int = 1,
        last: Annotated[int, typer.Option(min=0, max=100)] = 50,
        where: Path = Path("."),
        tag: str | None = None,
        label: Annotated[list[str] | None, typer.Option()] = None,
    ) -> None:
        print(json.dumps([name, count, last, type(where).__name__, str(where), tag, label]))

    return demo


def _app() -> typer.Typer:
    demo = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)

    @demo.command(cls=PlainCommand)
    def show(
        name: str,
        count: int = 1,
        last: Annotated[int, typer.Option(min=0, max=100)] = 50,
        speed: _Speed = _Speed.fast,
        shout: Annotated[str, typer.Option(parser=str.upper)] = "x",
    ) -> None:
        print(json.dumps([name, count, last, speed.value, shout]))

    return demo


def _run(demo: typer.Typer, args: list[str]) -> typer.testing.Result:
    return CliRunner().invoke(demo, args)


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import test_cli_values
import typer
command = typer.main.get_command(getattr(test_cli_values, sys.argv[2])())
try:
    command.main(args=json.loads(sys.argv[1]), prog_name="demo", standalone_mode=False)
finally:
    print("pydantic" in sys.modules, file=sys.stderr)
"""


def _pydantic_loaded(app: str, args: list[str]) -> tuple[list, bool]:
    child = subprocess.run(
        [sys.executable, "-c", CHILD.format(tests=str(ROOT / "tests")), json.dumps(args), app],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return json.loads(child.stdout), child.stderr.strip().splitlines()[-1] == "True"


def test_plain_values_load_no_pydantic_and_others_still_go_through_typer():
    args = ["abc", "--count", "3", "--last", "7", "--where", "/tmp/x", "--label", "a", "--label", "b"]
    values, loaded = _pydantic_loaded("_plain_app", args)
    assert values == ["abc", 3, 7, "PosixPath", "/tmp/x", None, ["a", "b"]] and not loaded
    values, loaded = _pydantic_loaded("_plain_app", ["abc", "--count", " 3_000 "])  # not a plain decimal: typer's
    assert values[1] == 3000 and loaded
    values, loaded = _pydantic_loaded("_app", ["abc", "--speed", "slow", "--shout", "hey"])  # a choice, a parser=
    assert values == ["abc", 1, 50, "slow", "HEY"] and loaded


def test_typer_still_checks_and_words_what_is_not_plain(tmp_path):
    bad = _run(_app(), ["abc", "--count", "many"])
    assert bad.exit_code == 2 and "Invalid value for '--count'" in bad.output
    for outside in ("-1", "101"):
        refused = _run(_app(), ["abc", "--last", outside])
        assert refused.exit_code == 2 and "Invalid value for '--last'" in refused.output, outside
    assert _run(_app(), ["--count", "3"]).exit_code == 2  # a missing required argument: typer's usage error

    checked = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)

    @checked.command(cls=PlainCommand)
    def read(
        where: Annotated[Path, typer.Argument(exists=True)], out: Annotated[Path, typer.Option(dir_okay=False)] = Path("o")
    ) -> None:
        print(type(where).__name__, where, out)

    missing = _run(checked, [str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    folder = _run(checked, [str(tmp_path), "--out", str(tmp_path)])
    assert folder.exit_code == 2 and "is a directory" in folder.output
    fine = _run(checked, [str(tmp_path), "--out", str(tmp_path / "o.txt")])
    assert fine.exit_code == 0 and fine.stdout.split() == ["PosixPath", str(tmp_path), str(tmp_path / "o.txt")]


def test_xlaruns_commands_and_their_help_take_plain_values(monkeypatch):
    root = typer.main.get_command(app)
    runs = root.commands["runs"]  # type: ignore[attr-defined]
    assert {type(p) for p in runs.params} == {PlainOption}
    assert {type(p) for p in root.commands["diff"].params} == {PlainOption, PlainArgument}  # type: ignore[attr-defined]
    ctx = runs.make_context("runs", ["--json"])
    assert type(runs.get_help_option(ctx)) is PlainOption  # built while parsing, after the command
    monkeypatch.setenv("XLARUN_TYPER_PATCH", "0")  # the benchmark's comparison: typer's own coercion
    assert {type(p) for p in typer.main.get_command(app).commands["runs"].params} == {typer.core.TyperOption}  # type: ignore[attr-defined]


def test_typer_is_not_pinned_below_a_release():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [typer_requirement] = [Requirement(d) for d in dependencies if Requirement(d).name == "typer"]
    assert typer_requirement.specifier.contains(importlib.metadata.version("typer"))
    assert typer_requirement.specifier.contains("1.0.0")  # no upper bound: xlarun uses typer's public API only
