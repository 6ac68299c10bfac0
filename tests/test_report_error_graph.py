"""report: a bisection's culprit step drawn coloured by each value's error (render/error_colours.py), from a real
bisection of the algsimp capture, in the page and in headless Chromium, and on a module too big to draw whole."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from xlarun.bisect.bisect_result import BisectResult, StepError
from xlarun.bisect.first_move import FirstMove, MovedValue
from xlarun.bisect.history import record_bisection
from xlarun.render.error_colours import FIRST_BORDER, LEVELS, NOT_COMPARED
from xlarun.report import build_run_report
from xlarun.store.facade import LocalStore

from .see_support import add_run
from .test_report import _page, browser, chromium  # noqa: F401 (chromium: the fixture)

SLIGHT, PAST = LEVELS[1][0], LEVELS[3][0]


@pytest.fixture(scope="module")
def bisected_report(bisect_store, tmp_path_factory):
    """A real bisection of the algsimp capture (its instruction search included), then the run's report."""
    from xlarun.bisect.bisect_options import bisect_options
    from xlarun.bisect.replay_mode import bisect_and_record
    from xlarun.navigate.refs import resolve_module

    store = LocalStore.open(bisect_store)
    module = resolve_module(store.index, "residual")
    result, record = bisect_and_record(store, module, bisect_options())
    assert result.culprit_pass == "algsimp" and result.first_move["moved"]["name"] == "mul.2"
    built = build_run_report(store, module.run_id, tmp_path_factory.mktemp("bisected") / "site")
    key = f"module_{module.module_id:04d}.bisect-{record.bisect_id}"
    return built, key, result, f"modules/module_{module.module_id:04d}.html"


def _svg_nodes(svg: str) -> dict[str, tuple[str, str, str, str]]:
    """Node name -> (fill, border colour, border width, tooltip) of an inlined graphviz SVG."""
    ns = {"svg": "http://www.w3.org/2000/svg"}
    nodes = {}
    for group in ET.fromstring(svg).iterfind(".//svg:g[@class='node']", ns):
        name = group.findtext("svg:title", namespaces=ns)
        box = group.find(".//svg:path", ns)
        if box is None:
            box = group.find(".//svg:polygon", ns)
        tooltip = group.findtext(".//svg:a/svg:title", default="", namespaces=ns)
        nodes[name] = (box.get("fill"), box.get("stroke"), box.get("stroke-width", "1"), tooltip)
    return nodes


@pytest.mark.slow
def test_the_culprit_steps_graph_is_coloured_by_each_values_error(bisected_report):
    built, key, result, page_path = bisected_report
    site = built.index_html.parent
    page = (site / page_path).read_text()
    assert f'id="graph-{key}"' in page and "coloured by error" in page
    assert 'class="legend"' in page and "past the tolerance (abs 1e-05 or rel 1e-05)" in page  # the legend, with the bound
    nodes = _svg_nodes((site / "graphs" / f"{key}.svg").read_text())
    errors = result.first_move["value_errors"]
    # (x / 3) * 3 became x * (1/3 * 3): the multiply moves first, by a rounding, and the sum x 1e6 is far past the bound
    fill, border, width, tooltip = nodes["mul.2"]
    assert (fill, border, width) == (LEVELS[1][0], FIRST_BORDER, "3.5")
    assert f"max abs error {errors['mul.2'][0]:.3g}, max rel error {errors['mul.2'][1]:.3g}" in tooltip
    assert "%mul.2 = f32[4096] multiply" in tooltip and "op_name: jit(residual)/mul" in tooltip
    fill, _border, _width, tooltip = nodes["mul.3"]
    assert fill == LEVELS[3][0] and "max abs error 1.56" in tooltip and "past the tolerance" in tooltip
    assert all(nodes[n][0] == LEVELS[3][0] for n in result.first_move["past_tolerance"])
    # what the pass created (the folded constant's broadcast) and the parameter have no error: grey, no numbers
    for name in ("broadcast.2", "x.1"):
        assert nodes[name][:3] == (NOT_COMPARED[0], "#555555", "1") and "max abs error" not in nodes[name][3]
    data = json.loads(built.index_json.read_text())
    (graph,) = [
        b["error_graph"] for m in data["modules"] for b in m["bisections"] if b["error_graph"] and key in b["error_graph"]["svg"]
    ]
    assert graph["view"] == "whole" and graph["nodes"] == len(nodes) and graph["problem"] is None


@pytest.mark.slow
def test_render_error_from_draws_the_bisections_culprit_step_coloured(bisected_report, bisect_store, cli, tmp_path):
    from xlarun.report.graphs import safe_inline_svg

    _built, key, result, _page_path = bisected_report
    bisect_id = key.rsplit(".bisect-", 1)[1]
    for chosen in (bisect_id, "latest"):  # the bisection just recorded is the newest with per-value errors
        out = tmp_path / f"{chosen}.svg"
        drawn = cli("render", "residual", "--error-from", chosen, "-o", out, "--store", bisect_store)
        assert drawn.exit_code == 0, drawn.stdout + drawn.stderr
        nodes = _svg_nodes(safe_inline_svg(out.read_text()))
        mul = result.first_move["value_errors"]["mul.2"]
        assert nodes["mul.2"][:3] == (SLIGHT, FIRST_BORDER, "3.5") and f"max abs error {mul[0]:.3g}" in nodes["mul.2"][3]
        assert nodes["x.1"][0] == NOT_COMPARED[0]
        assert ".0006.simplification.after_algsimp." in out.read_text()  # the culprit step, named in the graph's title
    wrong = cli("render", "residual", "--error-from", "nope", "--store", bisect_store)
    assert wrong.exit_code == 2 and "0 bisections match 'nope'" in wrong.stdout + wrong.stderr
    import xlarun  # the same from Python

    graph = xlarun.open_store(bisect_store).module("residual").render(error_from=bisect_id)
    assert _svg_nodes(safe_inline_svg(graph.data.decode()))["mul.2"][:3] == (SLIGHT, FIRST_BORDER, "3.5")
    assert any(note.startswith("values compared:") for note in graph.notes)


@browser
@pytest.mark.slow
@pytest.mark.browser
def test_the_error_graph_in_chromium(bisected_report, chromium, tmp_path):
    built, key, _result, page_path = bisected_report
    events: list[str] = []
    page = _page(chromium, events)
    page.goto((built.index_html.parent / page_path).resolve().as_uri())
    figure = page.locator(f"figure[id='graph-{key}']")
    figure.scroll_into_view_if_needed()
    assert figure.locator("ul.legend li").count() == 8 and figure.locator("ul.legend").is_visible()
    node = figure.locator("g.node", has=page.locator("title", has_text="mul.2")).first
    assert node.is_visible() and "first to move" in node.locator("text").first.text_content()
    assert "max abs error" in node.locator("a > title").text_content()  # what a hover shows
    figure.screenshot(path=str(tmp_path / "error-graph.png"))
    assert (tmp_path / "error-graph.png").stat().st_size > 10_000
    assert [e for e in events if e.startswith(("dialog", "network")) or "Security Policy" in e] == []


def _chain(length: int, convert_at: int) -> str:
    """A module of ``length`` adds in a chain, a convert (plumbing: folded by the overview) before add ``convert_at``."""
    lines = ["  %p = f32[8]{0} parameter(0)", "  %a0 = f32[8]{0} add(%p, %p)"]
    for i in range(1, length):
        if i == convert_at:
            lines += [f"  %c = f32[8]{{0}} convert(%a{i - 1})", f"  %a{i} = f32[8]{{0}} add(%c, %p)"]
        else:
            lines.append(f"  %a{i} = f32[8]{{0}} add(%a{i - 1}, %a{i - 1})")
    lines[-1] = lines[-1].replace(f"  %a{length - 1}", f"  ROOT %a{length - 1}")
    head = "HloModule big, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\nENTRY %main (p: f32[8]) -> f32[8] {\n"
    return head + "\n".join(lines) + "\n}\n"


@pytest.mark.slow
def test_a_module_too_big_to_draw_shows_the_first_movers_neighbourhood_coloured(tmp_path):
    store = LocalStore.open(tmp_path / "store", create=True)
    text = _chain(1600, 800)
    step = "module_0000.0001.pipe.after_algsimp.before_dce.txt"
    run_id = add_run(
        store,
        {
            "module_0000.before_optimizations.txt": text,
            "module_0000.0000.pipe.after_pipeline-start.before_algsimp.txt": text,
            step: text,
        },
    )
    # the convert moved first (folded into a800 by the overview), a800 on it a little, a900 on past the tolerance
    errors = {f"a{i}": (0.0, 0.0) if i < 800 else (1e-3, 1e-3) if i >= 900 else (1e-7, 1e-7) for i in range(1600)}
    errors["c"] = (2e-7, 2e-7)
    moved = MovedValue("c", "convert", "f32[8]{0}", "c", 2e-7, 2e-7)
    visible = MovedValue("a900", "add", "f32[8]{0}", "a900", 1e-3, 1e-3)
    found = FirstMove("step 1 (after algsimp (pipe))", "step 0", len(errors), 0, moved, visible, step_path=step)
    found.value_errors, found.past_tolerance = errors, [f"a{i}" for i in range(900, 1600)]
    after = StepError(1, "after algsimp (pipe)", "algsimp", "pipe", step, 1e-3, 1e-3, True)
    result = BisectResult("replay", f"{run_id}/module_0000", "diverged", "algsimp", "pipe", culprit_step=1, error_after=after)
    result.first_move, result.run_id, result.module_id = json.loads(json.dumps(found.to_dict())), run_id, 0
    record = record_bisection(store, result, {})
    built = build_run_report(store, run_id, tmp_path / "site")
    (module,) = json.loads(built.index_json.read_text())["modules"]
    graph = module["bisections"][0]["error_graph"]
    assert graph["svg"] == f"graphs/module_0000.bisect-{record.bisect_id}.svg"
    assert (graph["view"], graph["center"], graph["problem"]) == ("neighbourhood", "a800", None)
    assert graph["nodes"] < 20  # the first mover's neighbourhood of the overview, not 1,600 nodes
    site = built.index_html.parent
    nodes = _svg_nodes((site / graph["svg"]).read_text())
    fill, border, width, tooltip = nodes["a800"]
    assert (fill, border, width) == (SLIGHT, FIRST_BORDER, "3.5")  # its own error; the mark of the convert folded into it
    assert "max abs error 2e-07, max rel error 2e-07 of %c, folded into this node's inputs" in tooltip
    assert nodes["a799"][0] == LEVELS[0][0] and nodes["p"][0] == NOT_COMPARED[0]
    page = (site / "modules" / "module_0000.html").read_text()
    assert "this is the neighbourhood of the first value to move a800" in page and "first to move (%c, folded in)" in page
