"""The jaxlib adapter on the installed jaxlib (the project supports 0.10.x)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("jax")

from xlarun.errors import EngineError, EnvironmentProblem, InputError  # noqa: E402
from xlarun.replay import pjrt  # noqa: E402
from xlarun.replay.sources import entry_parameter_shapes  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
LOOKUP = FIXTURES / "lookup_large" / "module_0002.jit_lookup.before_optimizations.txt"


def test_installed_jaxlib_is_supported_and_every_name_resolves():
    assert pjrt.jaxlib_version().startswith(pjrt.SUPPORTED_JAXLIB + ".")
    names = pjrt.bindings()
    assert callable(names.hlo_to_stablehlo) and callable(names.hlo_module_from_text)
    assert "cpu" in pjrt.available_platforms()


def test_a_missing_private_name_is_an_environment_problem_naming_the_version():
    bare = SimpleNamespace(hlo=SimpleNamespace(), _xla=SimpleNamespace(mlir=SimpleNamespace()))
    with pytest.raises(EnvironmentProblem, match=r"jaxlib 9\.9\.9 lacks .*hlo_to_stablehlo") as info:
        pjrt.resolve_bindings(bare, "9.9.9")
    assert "0.10" in info.value.hint


def test_text_proto_text_round_trip_keeps_large_constants():
    text = LOOKUP.read_text()
    proto = pjrt.text_to_module_proto(text)
    again = pjrt.module_proto_to_text(proto)
    assert "{...}" not in again and pjrt.module_name(proto) == "jit_lookup"
    assert pjrt.text_to_module_proto(again)  # still parses
    assert "{...}" in pjrt.module_proto_to_text(proto, print_large_constants=False)
    assert [s.hlo_text() for s in entry_parameter_shapes(proto)] == ["f32[]", "s32[]"]


def test_dot_rendering():
    dot = pjrt.module_to_dot(pjrt.text_to_module_proto(LOOKUP.read_text()))
    assert dot.lstrip().startswith("digraph")


def test_bad_text_is_an_input_error_and_bad_stablehlo_an_engine_error():
    with pytest.raises(InputError, match="HLO text does not parse"):
        pjrt.text_to_module_proto("HloModule broken\nENTRY {")
    with pytest.raises(EngineError, match="compile on cpu failed"):
        pjrt.Platform("cpu").compile(b"not mlir")
