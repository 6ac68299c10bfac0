"""Big graphs, always (render/overview.py): a module over the node limit is drawn as its overview, in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xlarun.errors import InputError
from xlarun.hlo import parse_hlo_text
from xlarun.render import RenderOptions, render_bytes
from xlarun.render.overview import hlo_overview

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "xla-hlo" / "accepted.jsonl"

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
    if not CORPUS.exists():
        pytest.skip("../shared/corpus is not beside the checkout")
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
