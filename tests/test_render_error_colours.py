"""render/error_colours.py: a module's graph coloured by its values' errors (what a bisection's instruction search
measured), whole and as the overview of a big module, where a node takes its folded members' worst error."""

from __future__ import annotations

from xlarun.hlo import load_hlo
from xlarun.render import to_dot
from xlarun.render.error_colours import (
    FIRST_BORDER,
    LEVELS,
    NOT_COMPARED,
    REWRITTEN,
    WORST_BORDER,
    ValueErrors,
    error_graph,
    legend,
)
from xlarun.render.graph import neighbourhood

from .test_bisect_first_move import TEXT

PAST, WITHIN, SLIGHT, SAME = (LEVELS[i][0] for i in (3, 2, 1, 0))

# x -> convert (plumbing, folded into an edge by the overview) -> multiply -> ROOT tuple (plumbing: the "result" node)
PLUMBED = """HloModule plumbed, entry_computation_layout={(bf16[8]{0})->(f32[8]{0}, f32[8]{0})}

ENTRY %main (x: bf16[8]) -> (f32[8], f32[8]) {
  %x = bf16[8]{0} parameter(0)
  %wide = f32[8]{0} convert(%x), metadata={op_name="jit(g)/convert_element_type"}
  %two = f32[] constant(2)
  %b2 = f32[8]{0} broadcast(%two), dimensions={}
  %twice = f32[8]{0} multiply(%wide, %b2), metadata={op_name="jit(g)/mul" source_file="/u/g.py" source_line=3}
  %same = f32[8]{0} add(%wide, %wide)
  %out = f32[8]{0} copy(%twice)
  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%out, %same)
}
"""


def _values(errors: dict, past: set[str], first_moved: str | None = None, first_past: str | None = None) -> ValueErrors:
    return ValueErrors(errors, 1e-5, 1e-5, past, first_moved, first_past)


def test_nodes_are_filled_by_their_error_and_the_first_mover_and_the_worst_are_marked():
    values = _values(
        {"b3": (0.0, 0.0), "div": (4e-4, 1e-3), "sum": (3e-3, 1e-3)}, past={"div", "sum"}, first_moved="div", first_past="div"
    )
    graph = error_graph(load_hlo(TEXT.encode(), "t.txt"), values, "step 6")
    nodes = graph.nodes
    assert (nodes["div"].fill, nodes["sum"].fill, nodes["b3"].fill) == (PAST, PAST, SAME)
    for uncompared in ("x", "three", "zero"):  # a parameter and constants: known without a run, never compared
        assert nodes[uncompared].fill == NOT_COMPARED[0] and "max abs error" not in nodes[uncompared].tooltip
    div = nodes["div"]
    assert div.label.startswith("worst 2: 0.0004 abs, first to move, first past the tolerance\n")
    assert div.border == FIRST_BORDER and div.penwidth == 3.5  # the search's answer wins the border
    assert "%div = f32[4] divide" in div.tooltip and "op_name: jit(f)/div" in div.tooltip  # shape, op_name...
    assert "max abs error 0.0004, max rel error 0.001\npast the tolerance" in div.tooltip  # ...and its numbers
    assert nodes["sum"].label.startswith("worst 1: 0.003 abs\n") and nodes["sum"].border == WORST_BORDER
    assert nodes["b3"].border is None and "max abs error 0, max rel error 0\nidentical" in nodes["b3"].tooltip
    assert graph.suggested_center == "div"
    assert "values compared: 1 identical, 0 moved slightly, 0 moved within, 2 past, 0 rewritten" in graph.notes[-1]
    dot = to_dot(graph)
    assert f'color="{FIRST_BORDER}" fillcolor="{PAST}" penwidth=3.5' in dot


def test_levels_follow_the_tolerance_whichever_bound_is_met():
    values = _values({"a": (1e-7, 1.0), "b": (5e-6, 5e-6), "c": (2e-5, 0.5), "d": (0.0, 0.0)}, past={"c"})
    # a: far within the abs bound (its rel error does not matter: either bound matches); b: half of both
    assert [values.level(n) for n in "abcd"] == [1, 2, 3, 0] and values.level("unknown") is None
    assert values.worst(2) == ["c", "b"]  # those past the tolerance first, then by how close they come to it
    assert [style for style, _c, _m in legend(values)] == ["fill"] * 6 + ["border", "border"]
    assert "past the tolerance (abs 1e-05 or rel 1e-05)" in [m for _s, _c, m in legend(values)]
    rewritten = ValueErrors(values.errors, 1e-5, 1e-5, {"c"}, rewritten={"c"})
    assert rewritten.look("c") == REWRITTEN and rewritten.worst(2) == ["b", "a"]  # what the pass renamed is not "worst"


def test_the_overview_marks_what_it_folds_in_and_colours_a_node_without_a_value_by_its_worst_member():
    module = load_hlo(PLUMBED.encode(), "p.txt")
    values = _values(
        {"wide": (0.01, 0.004), "b2": (0.0, 0.0), "twice": (2e-7, 1e-7), "same": (0.0, 0.0), "out": (2e-7, 1e-7)},
        past={"wide"},
        first_moved="wide",
    )
    graph = error_graph(module, values, "step 3", limit=1)  # over the limit: the overview
    assert "overview" in graph.title and "wide" not in graph.nodes  # the convert is folded into the edges
    twice, same = graph.nodes["twice"], graph.nodes["same"]
    assert "wide" in graph.members["twice"] and twice.fill == SLIGHT  # its own value moved a little...
    assert (
        "max abs error 0.01, max rel error 0.004 of %wide, folded into this node's inputs" in twice.tooltip
    )  # ...its input more
    assert twice.label.startswith("worst 1: 0.01 abs (%wide, folded in), first to move (%wide, folded in)\n")
    assert twice.border == FIRST_BORDER and graph.suggested_center == "twice"
    assert same.fill == SAME and "%wide, folded into" in same.tooltip  # identical itself, though it reads the convert
    # the result (a tuple, no value of its own) takes its worst member's colour
    assert graph.members["result"] == ["out", "t"] and graph.nodes["result"].fill == SLIGHT
    assert "(of %out, folded in)" in graph.nodes["result"].tooltip
    part = neighbourhood(graph, "result", 1)  # the report's view of a big graph keeps the colours and marks
    assert part.nodes["twice"].fill == SLIGHT and part.nodes["twice"].border == FIRST_BORDER and "wide" in part.members["twice"]
