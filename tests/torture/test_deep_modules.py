"""`render` of a module whose computations call each other 100,000 deep drew them as nested clusters,
recursing once per call until RecursionError (exit 4). Clusters now stop at MAX_NESTING calls deep: the drawing
is made (exit 0) and says what was left out; asking for a part that is not drawn is exit 2 with the reason."""

from __future__ import annotations

import pytest

from xlarun.render.hlo_graph import MAX_NESTING

# Marked per test: torture: kills, signals, damaged stores, hostile inputs


def _chain(depth: int, opcode: str) -> str:
    """An HLO module whose entry calls c{depth-1}, which calls c{depth-2} ... down to c0 (``call`` or ``fusion``)."""
    via = "to_apply" if opcode == "call" else "kind=kLoop, calls"
    lines = ["HloModule jit_deep, entry_computation_layout={(f32[])->f32[]}", ""]
    lines.append("c0 {\n  p0 = f32[] parameter(0)\n  ROOT deepest = f32[] negate(p0)\n}\n")
    for i in range(1, depth):
        lines.append(f"c{i} {{\n  p{i} = f32[] parameter(0)\n  ROOT r{i} = f32[] {opcode}(p{i}), {via}=c{i - 1}\n}}\n")
    lines.append(f"ENTRY main {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] {opcode}(p), {via}=c{depth - 1}\n}}\n")
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize(("depth", "opcode", "options"), [(100_000, "call", ()), (20_000, "fusion", ("--expand-fusions",))])
def test_render_of_a_very_deep_call_chain_draws_the_top_and_says_so(tmp_path, cli, figures, depth, opcode, options):
    source = tmp_path / "module_0001.jit_deep.before_optimizations.txt"
    source.write_text(_chain(depth, opcode))
    out = tmp_path / "deep.svg"
    drawn = cli("render", source, "-o", out, *options)
    assert drawn.exit_code == 0, drawn.output
    svg = out.read_text()
    assert svg.startswith("<?xml") and f"c{depth - MAX_NESTING}" in svg  # the deepest drawn cluster
    assert f"c{depth - MAX_NESTING - 2}" not in svg
    assert f"nested more than {MAX_NESTING} calls deep are not drawn" in drawn.output
    around = cli("render", source, "-o", tmp_path / "part.svg", "--around", "deepest", *options)
    assert around.exit_code == 2 and "not drawn" in around.stderr and "Traceback" not in around.output, around.output
    codes = [drawn.exit_code, around.exit_code]
    figures(depth=depth, tried=len(codes), clean=len(codes), crashes=sum(c not in (0, 1, 2, 3) for c in codes), exit_codes=codes)
