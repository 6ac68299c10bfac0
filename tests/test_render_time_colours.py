"""render --time (render/time_colours.py): a module drawn as a heat map of its measured time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xlarun.hlo import parse_hlo_text
from xlarun.render.hlo_graph import hlo_graph
from xlarun.render.time_colours import HEAT, HOT_BORDER, NOT_TIMED, colour_by_time

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FIXTURES = Path(__file__).parent / "fixtures" / "profile"


@pytest.fixture
def step_graph():
    module = parse_hlo_text((FIXTURES / "module_0004.jit_step.cpu_after_optimizations.txt").read_text())
    return hlo_graph(module, title="jit_step")


def test_each_node_is_filled_by_its_share_and_the_hottest_are_marked(step_graph):
    names = [n for n in step_graph.nodes if not step_graph.nodes[n].label.startswith("parameter")]
    hot, warm, cold = names[0], names[1], names[2]
    colour_by_time(step_graph, {hot.rsplit("/", 1)[-1]: 900.0, warm.rsplit("/", 1)[-1]: 90.0, cold.rsplit("/", 1)[-1]: 10.0})
    nodes = step_graph.nodes
    assert nodes[hot].fill == HEAT[-1][1] and nodes[hot].label.startswith("#1 by time: 90%")  # over half: darkest
    assert nodes[warm].fill == HEAT[2][1] and nodes[warm].label.startswith("#2 by time: 9%")  # 5-20%
    assert nodes[cold].fill == HEAT[1][1] and nodes[cold].border == HOT_BORDER  # 1-5%, and among the marked
    assert "measured: 900 ns, 90.0% of the module's time" in nodes[hot].tooltip
    untimed = [n for n in nodes.values() if n.id not in (hot, warm, cold)]
    assert untimed and all(n.fill == NOT_TIMED and n.border is None for n in untimed)
    assert any("coloured by measured time (1 us in all)" in note for note in step_graph.notes)


def test_a_module_whose_ops_took_no_time_says_so(step_graph):
    colour_by_time(step_graph, {})
    assert any("timed no op" in note for note in step_graph.notes)


@pytest.mark.slow
def test_render_time_of_a_profiled_step_marks_what_took_most(cli, tmp_path):
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.navigate.profile import module_profile
    from xlarun.navigate.refs import resolve_module
    from xlarun.store.facade import LocalStore

    spec = tmp_path / "spec.yaml"
    spec.write_text((CONFIGS / "jax-profile.yaml").read_text().replace("script: examples/", f"script: {CONFIGS}/examples/"))
    store = LocalStore.open(tmp_path / "store")
    result = capture(spec, store)
    assert result.ok, result.warnings
    out = tmp_path / "heat.dot"
    done = cli("render", "jit_train_step", "--time", "-f", "dot", "-o", str(out), "--store", str(tmp_path / "store"))
    assert done.exit_code == 0, done.output
    assert "cpu_after_optimizations" in done.output and "coloured by measured time" in done.output
    dot = out.read_text()
    top = module_profile(store, resolve_module(store.index, "jit_train_step")).ops[0]
    node = re.search(rf'"{re.escape(top.op)}" \[(.*?)\]', dot, re.S)
    assert node is not None, dot[:2000]
    attributes = node.group(1)  # the op that took most: marked first, in one of the two darkest shades
    assert "#1 by time" in attributes and (HEAT[-1][1] in attributes or HEAT[-2][1] in attributes), attributes
