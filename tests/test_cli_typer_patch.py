"""cli.py patches typer's private coercion (``typer.core.build_runtime_param``, ``typer._coercion.RuntimeParam``) so
that a plain ``str`` parameter given a string builds no pydantic TypeAdapter: importing pydantic costs about 90 ms of
every command (0.23 s against 0.32 s for ``xlarun runs`` with typer 0.29.2). pyproject.toml pins typer to the minor
version these tests were written against; they fail when typer changes what the patch relies on."""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import inspect
import json
from pathlib import Path
from typing import Annotated

import pytest
import typer
from packaging.requirements import Requirement
from typer import _adapters, _coercion, core
from typer.testing import CliRunner

import xlarun.cli  # noqa: F401 (applies the patch)

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_typer_is_the_one_pyproject_pins():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [typer_requirement] = [Requirement(d) for d in dependencies if Requirement(d).name == "typer"]
    assert typer_requirement.specifier.contains(importlib.metadata.version("typer"))
    assert typer_requirement.specifier.contains("0.29.2") and not typer_requirement.specifier.contains(
        "0.30.0"
    )  # pinned to a minor


def test_typer_has_the_private_interface_the_patch_replaces():
    assert core.build_runtime_param.__module__ == "xlarun.cli"  # the patch is in place (typer.core calls it by that name)
    assert {f.name for f in dataclasses.fields(_coercion.RuntimeParam)} == {"parameter_info", "annotation"}
    assert _coercion.RuntimeParam.__abstractmethods__ == frozenset({"_coerce_value"})
    assert list(inspect.signature(_coercion.RuntimeParam._coerce_value).parameters) == ["self", "value", "param", "ctx"]
    assert {"annotation", "parameter_info", "file_annotation"} <= {f.name for f in dataclasses.fields(_coercion.TypeDescriptor)}
    assert isinstance(inspect.getattr_static(_coercion.TypeDescriptor, "is_choice"), property)
    assert list(inspect.signature(_adapters.try_build_adapter).parameters) == ["annotation", "parameter_info"]


class _Speed(str, enum.Enum):
    fast = "fast"
    slow = "slow"


def test_plain_strings_build_no_adapter_and_everything_else_is_still_coerced(monkeypatch):
    built: list[tuple[object, bool]] = []  # (annotation, has a parser) of each adapter built
    real = _adapters.try_build_adapter

    def recording(annotation, parameter_info):
        built.append((annotation, parameter_info.parser is not None))
        return real(annotation, parameter_info)

    monkeypatch.setattr(_adapters, "try_build_adapter", recording)
    app = typer.Typer()

    @app.command()
    def show(
        name: str,
        count: int = 1,
        where: Path = Path("."),
        speed: _Speed = _Speed.fast,
        tag: str | None = None,
        shout: Annotated[str, typer.Option(parser=str.upper)] = "x",
    ) -> None:
        print(json.dumps([name, count, type(where).__name__, str(where), speed.value, tag, shout]))

    result = CliRunner().invoke(app, ["abc", "--count", "3", "--where", "/tmp/x", "--speed", "slow", "--shout", "hey"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == ["abc", 3, "PosixPath", "/tmp/x", "slow", None, "HEY"]
    # the plain strings (name, tag), the decimal int and the unchecked path went through untouched...
    assert (str, False) not in built and (int, False) not in built and (Path, False) not in built
    assert (str, True) in built  # ...the str with a parser through typer's adapters
    odd = CliRunner().invoke(app, ["abc", "--count", " 3_000 "])  # not a plain decimal: typer (pydantic) reads it
    assert odd.exit_code == 0 and json.loads(odd.stdout)[1] == 3000 and (int, False) in built
    bad = CliRunner().invoke(app, ["abc", "--count", "many"])
    assert bad.exit_code == 2 and "Invalid value for '--count'" in bad.output  # typer's own usage error, as before


def test_a_bounded_int_within_its_bounds_needs_no_adapter_and_outside_them_gets_typers_message(monkeypatch):
    built: list[object] = []
    real = _adapters.try_build_adapter

    def recording(annotation, parameter_info):
        built.append(annotation)
        return real(annotation, parameter_info)

    monkeypatch.setattr(_adapters, "try_build_adapter", recording)
    app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)

    @app.command()
    def last(n: Annotated[int, typer.Option(min=0, max=100)] = 50) -> None:
        print(n)

    assert CliRunner().invoke(app, ["--n", "7"]).stdout.strip() == "7"
    assert CliRunner().invoke(app, []).stdout.strip() == "50"
    assert built == []  # the default and a decimal within bounds: no pydantic adapter (``xlarun profile`` saved 0.14 s)
    for outside in ("-1", "101"):
        refused = CliRunner().invoke(app, ["--n", outside])
        assert refused.exit_code == 2 and "Invalid value for '--n'" in refused.output, outside
    assert built == [int, int]  # typer's own check and message


def test_a_path_with_checks_still_gets_typers_checks_and_messages(tmp_path):
    app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)

    @app.command()
    def read(
        where: Annotated[Path, typer.Argument(exists=True)], out: Annotated[Path, typer.Option(dir_okay=False)] = Path("o")
    ) -> None:
        print(type(where).__name__, where, out)

    missing = CliRunner().invoke(app, [str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    folder = CliRunner().invoke(app, [str(tmp_path), "--out", str(tmp_path)])
    assert folder.exit_code == 2 and "is a directory" in folder.output
    fine = CliRunner().invoke(app, [str(tmp_path), "--out", str(tmp_path / "o.txt")])
    assert fine.exit_code == 0 and fine.stdout.split() == ["PosixPath", str(tmp_path), str(tmp_path / "o.txt")]
