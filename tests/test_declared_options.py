"""xlarun/declared_options.py: each option of replay and bisect is declared once, and the typer command, the builder
and ``Module.replay`` / ``Module.bisect`` are made from the declaration or refused when they are defined against it."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest

from xlarun.api.module import Module
from xlarun.bisect.bisect_options import BisectOptions, bisect_options
from xlarun.commands import DECLARED, with_declared
from xlarun.declared_options import (
    BISECT_OPTIONS,
    RENDER_OPTIONS,
    REPLAY_OPTIONS,
    Declared,
    keywords_of,
    signature_of,
    take,
)
from xlarun.errors import InputError
from xlarun.replay.options import ReplayOptions, replay_options

OPTIONS = (
    Declared("level", 2, int, "How deep.", ("--level", "-l"), minimum=1),
    Declared("mode", "a", str, "a or b.", choices=("a", "b")),
)


def test_take_fills_defaults_checks_each_value_and_refuses_an_unknown_keyword():
    assert take(OPTIONS, {"mode": "b"}, "demo") == {"level": 2, "mode": "b"}
    with pytest.raises(InputError, match="level must be at least 1, not 0"):
        take(OPTIONS, {"level": 0}, "demo")
    with pytest.raises(InputError, match="unknown mode 'c'") as refused:
        take(OPTIONS, {"mode": "c"}, "demo")
    assert refused.value.hint == "use one of: a, b"
    with pytest.raises(InputError, match="demo takes no option depth") as unknown:
        take(OPTIONS, {"depth": 3}, "demo")
    assert unknown.value.hint == "its options: level, mode"


def test_a_method_that_spells_its_keywords_differently_is_refused_when_defined():
    @keywords_of(OPTIONS, besides=("extra",))
    def fine(*, level: int = 2, extra: str = "", mode: str = "a") -> None: ...

    assert fine is not None
    with pytest.raises(TypeError, match="are not the declared options"):

        @keywords_of(OPTIONS)
        def other_default(*, level: int = 3, mode: str = "a") -> None: ...

    with pytest.raises(TypeError, match="are not the declared options"):

        @keywords_of(OPTIONS)
        def missing(*, level: int = 2) -> None: ...


def test_a_command_that_lists_other_options_than_the_declared_is_refused_when_defined():
    with pytest.raises(TypeError, match="lists the declared options"):

        @with_declared(OPTIONS)
        def short(level: Any = DECLARED) -> None: ...

    with pytest.raises(TypeError, match="no option 'depth' is declared"):

        @with_declared(OPTIONS)
        def extra(level: Any = DECLARED, mode: Any = DECLARED, depth: Any = DECLARED) -> None: ...


def test_the_builders_present_and_default_to_the_declaration():
    for builder, declared, default in (
        (replay_options, REPLAY_OPTIONS, ReplayOptions()),
        (bisect_options, BISECT_OPTIONS, BisectOptions()),
    ):
        assert inspect.signature(builder) == signature_of(declared)
        assert builder() == default  # the dataclass's field defaults are the declared ones
    assert ReplayOptions().max_data_bytes == 4 << 30 and BisectOptions().abs_tolerance == 1e-5
    with pytest.raises(InputError, match="replay takes no option tolerance"):
        replay_options(tolerance=1e-3)


@pytest.mark.parametrize(
    ("command", "declared"), [("replay", REPLAY_OPTIONS), ("bisect", BISECT_OPTIONS), ("render", RENDER_OPTIONS)]
)
def test_the_commands_help_and_defaults_come_from_the_declaration(cli, command, declared):
    shown = " ".join(cli(command, "--help").stdout.split())  # typer wraps the help: compare word by word
    for d in declared:
        assert " ".join(d.help.split()) in shown, d.name
        assert d.cli_flags[0].split("/")[0] in shown, d.name
    method = getattr(Module, command)
    keywords = {p.name: p.default for p in inspect.signature(method).parameters.values() if p.kind is p.KEYWORD_ONLY}
    assert {d.name: d.default for d in declared}.items() <= keywords.items()


def test_a_value_the_declaration_refuses_is_the_same_usage_error_from_the_cli_and_python(cli, tmp_path):
    code = cli("bisect", "jit_f", "--recompile", "some", "--json", "--store", str(tmp_path / "store"))
    assert code.exit_code == 2
    document = json.loads(code.stdout)
    with pytest.raises(InputError) as python:
        bisect_options(recompile="some")
    assert (document["error"], document["hint"]) == (str(python.value.message), python.value.hint)
    code = cli("replay", "x.txt", "--iterations", "0", "--json")
    assert code.exit_code == 2
    with pytest.raises(InputError) as python:
        replay_options(iterations=0)
    assert json.loads(code.stdout)["error"] == python.value.message == "iterations must be at least 1, not 0"


def test_render_options_are_the_same_from_the_cli_and_python_and_limit_0_means_no_limit():
    from xlarun.render import DEFAULT_NODE_LIMIT, DEFAULT_TIMEOUT_S, RenderOptions, render_options

    assert render_options() == RenderOptions() and (DEFAULT_NODE_LIMIT, DEFAULT_TIMEOUT_S) == (1500, 60.0)
    assert render_options(limit=0).limit is None  # ``--limit 0`` and ``render(limit=0)`` alike: every node drawn
    drawn = render_options("png", expand=["fusion.1"], expand_fusions=True, timeout_s=5.0)
    assert (drawn.format, drawn.expand, drawn.expand_all, drawn.timeout_s) == ("png", ("fusion.1",), True, 5.0)
