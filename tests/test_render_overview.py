"""Big graphs, always (render/overview.py): a module over the node limit is drawn as its overview, in seconds."""

from __future__ import annotations

import json

import pytest

from xlarun.errors import InputError
from xlarun.hlo import parse_hlo_text
from xlarun.render import RenderOptions, render_bytes
from xlarun.render.overview import hlo_overview

from .corpus_support import ACCEPTED as CORPUS
from .corpus_support import require_corpus

LOOP = """HloModule loop

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[8] tanh(%x)
  ROOT %t = (s32[], f32[8]) tuple(%next, %y)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[8], b: f32[8]) -> (f32[8], f32[8]) {
  %a = f32[8] parameter(0)
  %b = f32[8] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]) tuple(%zero, %a)
  %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  %out = f32[8] get-tuple-element(%w), index=1
  %r = f32[8] reshape(%out)
  %m = f32[8] multiply(%r, %b)
  ROOT %res = (f32[8], f32[8]) tuple(%m, %out)
}
"""


def test_plumbing_folds_into_edges_and_a_loop_is_one_node():
    graph = hlo_overview(parse_hlo_text(LOOP))
    assert set(graph.nodes) == {"a", "b", "w", "m", "result"}
    assert "while: 2 computation(s), 11 instructions" in graph.nodes["w"].label  # body 7, condition 4
    edges = {(e.src, e.dst) for e in graph.edges}
    # a -> tuple -> while, while -> gte -> reshape -> multiply, b -> multiply, both outputs -> the result
    assert edges == {("a", "w"), ("w", "m"), ("b", "m"), ("m", "result"), ("w", "result")}
    assert graph.attributes["splines"] == "polyline" and "overview:" in graph.notes[0]


def test_over_the_limit_the_overview_is_drawn_and_with_full_the_module_is_refused():
    data = LOOP.encode()
    overview = render_bytes(data, "module_0000.loop.before_optimizations.txt", RenderOptions(format="dot", limit=5))
    assert overview.nodes == 5 and any(n.startswith("overview:") for n in overview.notes)
    with pytest.raises(InputError, match="more than the limit of 5"):
        render_bytes(data, "module_0000.loop.before_optimizations.txt", RenderOptions(format="dot", limit=5, full=True))


@pytest.mark.slow
def test_a_corpus_module_of_4000_instructions_renders_as_an_overview_in_seconds():
    """XLA's own module (shared/corpus) whose full drawing (3,041 nodes) ran past graphviz's 60 s limit."""
    require_corpus()
    text = next(row["text"] for row in map(json.loads, CORPUS.open()) if row["id"] == "d1403dbe97c30d0e")
    rendered = render_bytes(text.encode(), "module_0000.big.before_optimizations.txt", RenderOptions(format="svg", timeout_s=120))
    assert rendered.data.startswith(b"<?xml") and rendered.nodes < 1000
    assert "4052 instructions in 342 computations" in rendered.notes[0]


@pytest.mark.slow
def test_a_png_is_capped_and_says_it_was_scaled():
    from xlarun.render.layout import PNG_MAX_PIXELS

    chain = "\n".join(f"  n.{i} = f32[4]{{0}} negate(n.{i - 1})" for i in range(1, 400))
    text = (
        f"HloModule chain\n\nENTRY main {{\n  n.0 = f32[4]{{0}} parameter(0)\n{chain}\n  ROOT r = f32[4]{{0}} negate(n.399)\n}}\n"
    )
    rendered = render_bytes(text.encode(), "module_0000.chain.before_optimizations.txt", RenderOptions(format="png"))
    height = int.from_bytes(rendered.data[20:24], "big")
    assert height <= PNG_MAX_PIXELS and any("the PNG was scaled down" in note for note in rendered.notes)


def _chain_module(n: int, reads_weight: bool = True) -> str:
    """A chain of ``n`` elementwise ops; each also reads the weight %w when ``reads_weight``."""
    ops = []
    for i in range(1, n + 1):
        ops.append(
            f"  n.{i} = f32[4]{{0}} add(n.{i - 1}, w)" if reads_weight and i % 2 else f"  n.{i} = f32[4]{{0}} negate(n.{i - 1})"
        )
    body = "\n".join(ops)
    return (
        "HloModule chain\n\nENTRY main {\n  n.0 = f32[4]{0} parameter(0)\n  w = f32[4]{0} parameter(1)\n"
        f"{body}\n  ROOT r = f32[4]{{0}} negate(n.{n})\n}}\n"
    )


def _fanout_module(n: int) -> str:
    ops = "\n".join(f"  o.{i} = f32[4]{{0}} {'negate' if i % 2 else 'tanh'}(p)" for i in range(n))
    outs = ", ".join(f"o.{i}" for i in range(n))
    shapes = ", ".join(["f32[4]{0}"] * n)
    return f"HloModule fan\n\nENTRY main {{\n  p = f32[4]{{0}} parameter(0)\n{ops}\n  ROOT t = ({shapes}) tuple({outs})\n}}\n"


def test_a_long_chain_is_cut_into_segments_that_fit_and_a_wide_input_names_its_readers():
    graph = hlo_overview(parse_hlo_text(_chain_module(3000)), max_nodes=100)
    assert len(graph.nodes) <= 100
    chains = [n for n in graph.nodes.values() if n.label.startswith("chain of ")]
    # 3,000 ops in segments of the same length (the last may be shorter), covering every op once
    assert sum(int(n.label.split()[2]) for n in chains) == 3000 and len({n.label.split()[2] for n in chains[:-1]}) == 1
    assert "n.1 ... n." in chains[0].label
    # the weight read by every segment: its edges are left out, each reader names it
    assert not [e for e in graph.edges if e.src == "w"]
    assert "read by" in graph.nodes["w"].label and all("reads w" in n.label for n in chains)
    assert any(note.startswith("condensed to") for note in graph.notes)
    # what is left is still one path from the input to the root
    edges = {(e.src, e.dst) for e in graph.edges}
    assert ("n.0", "n.1") in edges and any(dst == "r" for _src, dst in edges)


def test_a_wide_fan_out_is_one_node_per_opcode():
    graph = hlo_overview(parse_hlo_text(_fanout_module(2000)), max_nodes=100)
    labels = sorted(n.label.split("\n")[0] for n in graph.nodes.values())
    assert labels == ["1000 x negate", "1000 x tanh", "parameter", "result"]
    assert {(e.src, e.dst) for e in graph.edges} == {("p", "o.0"), ("p", "o.1"), ("o.0", "result"), ("o.1", "result")}


def test_what_neither_chains_nor_siblings_shrink_is_grouped_in_bands():
    from .see_support import ladder_hlo

    graph = hlo_overview(parse_hlo_text(ladder_hlo(1000)), max_nodes=80)
    assert len(graph.nodes) <= 80 and "bands of depth" in graph.notes[-1]
    # every instruction of the ladder is in exactly one drawn node
    counted = sum(int(n.label.split()[0]) if n.label.split()[0].isdigit() else 1 for n in graph.nodes.values())
    assert counted == 2003


def test_a_module_of_some_hundreds_of_nodes_is_drawn_as_its_overview_unless_full():
    text = _chain_module(600, reads_weight=False).encode()
    overview = render_bytes(text, "module_0000.chain.before_optimizations.txt", RenderOptions(format="dot"))
    assert overview.nodes <= 600 and any(n.startswith("overview:") for n in overview.notes)
    full = render_bytes(text, "module_0000.chain.before_optimizations.txt", RenderOptions(format="dot", full=True))
    assert full.nodes == 603 and not any(n.startswith("overview:") for n in full.notes)
    unlimited = render_bytes(text, "module_0000.chain.before_optimizations.txt", RenderOptions(format="dot", limit=None))
    assert unlimited.nodes == 603


def test_a_drawing_of_some_hundreds_of_nodes_is_laid_out_with_less_effort_and_without_wide_inputs_unless_full():
    from xlarun.render import graph_of

    text = _chain_module(300).encode()  # 303 nodes, under the overview's threshold: drawn in full
    drawn = graph_of(text, "m.txt", RenderOptions())
    assert len(drawn.nodes) == 303 and drawn.attributes["mclimit"] == "0.3"
    assert not [e for e in drawn.edges if e.src == "w"] and "reads w" in drawn.nodes["n.1"].label
    full = graph_of(text, "m.txt", RenderOptions(full=True))
    assert len([e for e in full.edges if e.src == "w"]) == 150 and full.attributes["mclimit"] == "0.3"
    small = graph_of(_chain_module(100).encode(), "m.txt", RenderOptions())
    assert len([e for e in small.edges if e.src == "w"]) == 50 and not small.attributes


def test_a_big_drawing_places_its_edge_labels_after_the_layout():
    from xlarun.render import graph_of, to_dot

    big = to_dot(graph_of(_chain_module(300, reads_weight=False).encode(), "m.txt", RenderOptions(full=True)))
    small = to_dot(graph_of(_chain_module(20, reads_weight=False).encode(), "m.txt", RenderOptions()))
    assert "xlabel=" in big and " label=" not in big.split("->", 1)[1].split("\n", 1)[0]
    assert "xlabel=" not in small and "label=" in small.split("->", 1)[1].split("\n", 1)[0]
