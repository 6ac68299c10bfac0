"""The jaxlib adapter on the installed jaxlib (other versions: tests/test_compat_replay.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("jax")

from xlarun.errors import EngineError, EnvironmentProblem, InputError
from xlarun.replay import pjrt
from xlarun.replay.sources import entry_parameter_shapes

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
LOOKUP = FIXTURES / "lookup_large" / "module_0002.jit_lookup.before_optimizations.txt"


def test_installed_jaxlib_is_supported_and_every_name_resolves():
    names = pjrt.bindings()
    assert names.version == pjrt.jaxlib_version()
    assert callable(names.hlo_to_stablehlo) and callable(names.hlo_module_from_text)
    assert names.mlir_route == pjrt.ROUTE_STABLEHLO
    assert "cpu" in pjrt.available_platforms()


def test_a_missing_private_name_is_an_environment_problem_naming_the_version():
    bare = SimpleNamespace(hlo=SimpleNamespace(), _xla=SimpleNamespace(mlir=SimpleNamespace()))
    with pytest.raises(
        EnvironmentProblem, match=r"jaxlib 9\.9\.9 lacks .*hlo_to_stablehlo and xla_computation_to_mlir_module"
    ) as info:
        pjrt.resolve_bindings(bare, "9.9.9")
    assert "0.4.30 to 0.12" in info.value.hint


def test_without_hlo_to_stablehlo_the_xla_computation_route_is_taken():
    """jaxlib 0.4.30-0.5.3's names, borrowed from the installed jaxlib (which has both routes)."""
    from jax._src.lib import xla_client

    real = pjrt.bindings()
    mlir = SimpleNamespace(xla_computation_to_mlir_module=xla_client._xla.mlir.xla_computation_to_mlir_module)
    old = SimpleNamespace(
        hlo=SimpleNamespace(
            hlo_module_from_text=real.hlo_module_from_text,
            HloModule=xla_client.hlo.HloModule,
            hlo_module_to_dot_graph=real.hlo_module_to_dot_graph,
            HloPrintOptions=real.print_options,
        ),
        _xla=SimpleNamespace(mlir=mlir),
        XlaComputation=xla_client.XlaComputation,
        DeviceList=real.device_list,
        CompileOptions=real.compile_options,
    )
    names = pjrt.resolve_bindings(old, "0.5.3")
    assert names.hlo_to_stablehlo is None and names.mlir_route == pjrt.ROUTE_COMPUTATION
    mlir_text = names.computation_to_mlir(names.xla_computation(pjrt.text_to_module_proto(LOOKUP.read_text())))
    compiled = pjrt.Platform("cpu").compile(mlir_text.encode())
    assert compiled.compile_s > 0


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


# ---- modules of a newer XLA made readable by an older parser (replay/downgrade.py) ----


def _instruction_lines(text: str) -> list[str]:
    """Each instruction without its metadata (whose stack frames the printer numbers in its own order)."""
    lines = (line.strip().split(", metadata=")[0] for line in text.splitlines())
    return sorted(line for line in lines if " = " in line and not line.startswith("HloModule"))


def test_wide_instruction_ids_are_renumbered_and_the_schedule_dropped():
    from xlarun.replay.downgrade import has_wide_instruction_ids, renumber_instructions
    from xlarun.replay.sources import load_source

    source = load_source(FIXTURES / "mlp" / "module_0014.jit_train_step.cpu_after_optimizations.hlo.pb")
    assert has_wide_instruction_ids(source.module_proto)  # jax 0.10.2 numbers them computation << 32 | index
    narrow = renumber_instructions(source.module_proto)
    assert not has_wide_instruction_ids(narrow)
    before, after = pjrt.module_proto_to_text(source.module_proto), pjrt.module_proto_to_text(narrow)
    assert "is_scheduled=true" in before and "is_scheduled=true" not in after
    assert _instruction_lines(before) == _instruction_lines(after)  # same instructions, operands and attributes


def test_debug_info_is_stripped_and_nothing_else():
    from xlarun.replay.downgrade import strip_debug_info

    text = (FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt").read_text()
    assert "FileNames" in text and "metadata={" in text
    stripped = strip_debug_info(text)
    assert "FileNames" not in stripped and "StackFrames" not in stripped and "metadata=" not in stripped
    options = {"print_large_constants": True}
    plain = pjrt.module_proto_to_text(pjrt.text_to_module_proto(text), **options)
    assert _instruction_lines(pjrt.module_proto_to_text(pjrt.text_to_module_proto(stripped), **options)) == _instruction_lines(
        plain
    )


def test_xla_errors_keep_their_explanation_line():
    from xlarun.replay.pjrt import _first_line

    status_only = RuntimeError(
        "INVALID_ARGUMENT: Executable expected parameter 0 of size 16:\n  but got a buffer of size 64\n\tat ..."
    )
    assert _first_line(status_only) == "INVALID_ARGUMENT: Executable expected parameter 0 of size 16: but got a buffer of size 64"
    location = RuntimeError('<unknown>:0: error:\nloc("p"): dynamic dimension 0 of f32[<=4] has no runtime size')
    assert _first_line(location).endswith("dynamic dimension 0 of f32[<=4] has no runtime size")
    whole = RuntimeError("UNIMPLEMENTED: Custom call target PadToStatic is not implemented.\nStack trace follows")
    assert _first_line(whole) == "UNIMPLEMENTED: Custom call target PadToStatic is not implemented."
