"""The optimized-HLO rewrite: text transformations, bitcast semantics, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xlarun.replay.deoptimize import CannotDeoptimize, deoptimize_hlo_text, parse_instruction, split_top_level

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"

BITCASTS = """HloModule t, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0})->(f32[6]{0}, f32[3,2]{1,0}, f32[3,2]{0,1}, s32[2,3]{1,0})}

ENTRY %e (p: f32[2,3]) -> (f32[6], f32[3,2], f32[3,2], s32[2,3]) {
  %p = f32[2,3]{1,0} parameter(0)
  %c = f32[2,3]{0,1} copy(%p)
  %flat = f32[6]{0} bitcast(%c)
  %rows = f32[3,2]{1,0} bitcast(%c)
  %cols = f32[3,2]{0,1} bitcast(%p)
  %bits = s32[2,3]{1,0} bitcast(%p)
  ROOT %t = (f32[6]{0}, f32[3,2]{1,0}, f32[3,2]{0,1}, s32[2,3]{1,0}) tuple(%flat, %rows, %cols, %bits)
}
"""


def test_instruction_lines_split_with_nested_attributes():
    line = (
        "  ROOT %fusion.1 = (f32[2]{0}, /*index=1*/s32[]) fusion(%a, %b), kind=kLoop, calls=%fused, "
        'metadata={op_name="jit(f)/a, b" source_line=3}, backend_config={"x":{"y":[1,2]}}'
    )
    instr = parse_instruction(line)
    assert (instr.root, instr.name, instr.opcode, instr.operands) == (True, "%fusion.1", "fusion", "%a, %b")
    assert instr.shape == "(f32[2]{0}, /*index=1*/s32[])"
    assert instr.attributes[:2] == ["kind=kLoop", "calls=%fused"]
    assert instr.attributes[3] == 'backend_config={"x":{"y":[1,2]}}'
    assert instr.render() == line
    assert parse_instruction("ENTRY %main (p: f32[]) -> f32[] {") is None
    assert split_top_level('a, b={c, d}, e="f, g"') == ["a", "b={c, d}", 'e="f, g"']


def test_fusions_become_calls_and_backend_configs_go():
    text = (FIXTURES / "misc" / "module_0018.jit_misc.cpu_after_optimizations.txt").read_text()
    rewritten = deoptimize_hlo_text(text)
    assert " fusion(" not in rewritten.text and "backend_config=" not in rewritten.text
    assert "is_scheduled" not in rewritten.text.splitlines()[0]
    assert text.count(" fusion(") == rewritten.text.count("to_apply=%") - text.count("to_apply=%")
    assert rewritten.changes == ["13 fusions", "4 bitcasts", "1 backend_config"]


def test_bitcasts_read_memory_in_the_operand_layout():
    jax = pytest.importorskip("jax")
    del jax
    from xlarun.replay import pjrt

    rewritten = deoptimize_hlo_text(BITCASTS)
    assert rewritten.changes == ["4 bitcasts"]
    platform = pjrt.Platform("cpu")
    compiled = platform.compile(pjrt.module_proto_to_stablehlo(pjrt.text_to_module_proto(rewritten.text)))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    flat, rows, cols, bits = compiled.download(compiled.run(compiled.upload([x]))[0])
    # %c holds x column-major: memory x00 x10 x01 x11 x02 x12
    np.testing.assert_array_equal(flat, x.T.reshape(6))
    np.testing.assert_array_equal(rows, x.T.reshape(3, 2))
    # %p's row-major memory read as a column-major f32[3,2]
    np.testing.assert_array_equal(cols, x.reshape(2, 3).T)
    np.testing.assert_array_equal(bits, x.view(np.int32))


@pytest.mark.parametrize(
    "line, reason",
    [
        ("  %b = f32[6]{0:T(8)} bitcast(%p)", "tiled layout"),
        ("  %b = f64[3]{0} bitcast(%p)", "changes the element width"),
        (
            '  %c = (f32[2,3]{0,1}, s32[]) custom-call(%p), custom_call_target="lapack_spotrf_ffi", '
            "operand_layout_constraints={f32[2,3]{0,1}}",
            "needs operand layout f32[2,3]{0,1}",
        ),
    ],
)
def test_what_cannot_be_expressed_is_refused(line, reason):
    module = f"HloModule t\n\nENTRY %e (p: f32[2,3]) -> f32[6] {{\n  %p = f32[2,3]{{1,0}} parameter(0)\n{line}\n}}\n"
    with pytest.raises(CannotDeoptimize, match=reason.replace("[", r"\[").replace("{", r"\{")):
        deoptimize_hlo_text(module)


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["fp", "misc", "mlp", "tf", "lookup_elided"])
def test_every_optimized_fixture_matches_a_reference_run(folder):
    pytest.importorskip("jax")
    from xlarun.replay import ReplayOptions, replay_file

    optimized = next((FIXTURES / folder).glob("*cpu_after_optimizations.txt"))
    result = replay_file(optimized, ReplayOptions(reference_platform="cpu", seed=1))
    assert result.verdict == "match" and result.fell_back_to is None
    assert result.route.startswith("deoptimized")
