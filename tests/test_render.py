"""render: real dumps drawn with graphviz, checked by reading the SVG back."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from xlarun.hlo import parse_hlo_text
from xlarun.navigate.refs import resolve_module
from xlarun.navigate.select import select_file
from xlarun.render import RenderOptions, graph_of, layout, render_bytes
from xlarun.render.graph import GraphTooBig
from xlarun.render.layout import LayoutTimeout
from xlarun.render.textproto import parse_text_proto

from .see_support import ladder_hlo, svg_clusters, svg_nodes


def _module_text(store, ref: str, stage: str) -> str:
    module = resolve_module(store.index, ref)
    return store.blobs.get(select_file(module, stage, purpose="graph").digest).decode()


def test_train_step_svg_holds_every_dot_and_parameter(jax_run, cli, tmp_path):
    store, _ = jax_run
    out = tmp_path / "step.svg"
    result = cli("render", "train_step", "--store", store.root, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "wrote" in result.stdout and "nodes" in result.stdout
    module = parse_hlo_text(_module_text(store, "train_step", "before_optimizations"))
    dots = {i.name for i in module.instructions() if i.opcode == "dot"}
    params = {i.name for i in module.entry.instructions if i.opcode == "parameter"}
    assert len(dots) >= 6 and len(params) == 9
    nodes = svg_nodes(out.read_bytes())
    assert dots | params <= set(nodes)
    some_dot = nodes[min(dots)]
    assert some_dot["fill"] == "#9fc5f8"  # compute colour
    assert (
        "op_name: jit(train_step)" in some_dot["tooltip"]
        and "source: " in some_dot["tooltip"]
        and "jax_mlp.py:" in some_dot["tooltip"]
    )
    assert nodes[min(params)]["fill"] == "#fff2b3"


def test_after_optimizations_fusions_are_one_node_unless_expanded(jax_run, cli, tmp_path):
    store, _ = jax_run
    module = parse_hlo_text(_module_text(store, "train_step", "after_optimizations"))
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    fused_names = {i.name for f in fusions for c in f.called_computations for i in module.computations[c].instructions}
    assert fusions and fused_names
    collapsed = tmp_path / "collapsed.svg"
    assert cli("render", "train_step", "-s", "after_optimizations", "--store", store.root, "-o", collapsed).exit_code == 0
    nodes = svg_nodes(collapsed.read_bytes())
    assert set(nodes) == {i.name for i in module.entry.instructions}
    assert not fused_names & set(nodes)
    assert "fusion" in " ".join(nodes[fusions[0].name]["text"])

    opened = tmp_path / "opened.svg"
    assert cli("render", "train_step", "-s", "after", "--expand-fusions", "--store", store.root, "-o", opened).exit_code == 0
    assert fused_names <= set(svg_nodes(opened.read_bytes()))
    assert any("calls of" in label for label in svg_clusters(opened.read_bytes()))

    one = tmp_path / "one.svg"
    assert (
        cli("render", "train_step", "-s", "after", "--expand", fusions[0].name, "--store", store.root, "-o", one).exit_code == 0
    )
    drawn = set(svg_nodes(one.read_bytes()))
    inside_first = {i.name for c in fusions[0].called_computations for i in module.computations[c].instructions}
    assert inside_first <= drawn and not (fused_names - inside_first) & drawn


def test_edges_carry_operand_shapes(jax_run, cli, tmp_path):
    store, _ = jax_run
    out = tmp_path / "g.dot"
    assert cli("render", "train_step", "--store", store.root, "-o", out).exit_code == 0  # format from the extension
    source = out.read_text()
    assert source.startswith("digraph G")
    assert 'label="f32[32,128]"' in source or 'label="0: f32[32,128]"' in source
    assert re.search(r"subgraph \"?cluster_", source) and "ENTRY %main" in source


def test_xla_dot_dump_is_laid_out_as_it_is(jax_passes_run, cli, tmp_path):
    store, _ = jax_passes_run
    out = tmp_path / "xla.svg"
    result = cli("render", "train_step", "--xla-dot", "--store", store.root, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "XLA's own .dot" in result.stdout and ".before_optimizations.dot" in result.stdout
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    module = parse_hlo_text(_module_text(store, "train_step", "before_optimizations"))
    dot_names = [i.name for i in module.instructions() if i.opcode == "dot"]
    assert any(name in svg for name in dot_names)  # XLA's own labels name the instructions


def test_pass_dump_rendered(jax_passes_run, cli, tmp_path):
    store, _ = jax_passes_run
    module = resolve_module(store.index, "train_step")
    assert module.passes, "the jax-passes capture has no per-pass dumps (is --xla_dump_hlo_pass_re reaching XLA unquoted?)"
    out = tmp_path / "fusion.svg"
    result = cli("render", "train_step", "--pass", "fusion", "--store", store.root, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "after_fusion" in result.stdout
    # the graph drawn is the module as the fusion pass left it (its first run): its entry, fusions as single nodes
    first = min((p for p in module.passes if p.after_pass == "fusion"), key=lambda p: p.step)
    after_fusion = parse_hlo_text(store.read_file(module.run_id, first.path).decode())
    fusions = {i.name for i in after_fusion.entry.instructions if i.opcode == "fusion"}
    assert fusions and set(svg_nodes(out.read_bytes())) == {i.name for i in after_fusion.entry.instructions}
    xla = tmp_path / "fusion-xla.svg"
    assert cli("render", "train_step", "--pass", "fusion", "--xla-dot", "--store", store.root, "-o", xla).exit_code == 0
    assert "<svg" in xla.read_text()


def test_tf_graphdef_draws_xla_clusters(tf1_run, cli, tmp_path):
    store, result = tf1_run
    out = tmp_path / "tf.svg"
    cli_result = cli(
        "render", result.run_id, "--file", "mark_for_compilation_annotated_1.pbtxt", "--store", store.root, "-o", out
    )
    assert cli_result.exit_code == 0, cli_result.stderr
    assert "TF GraphDef" in cli_result.stdout and "XLA clusters: cluster_0" in cli_result.stdout
    proto = parse_text_proto(store.read_file(result.run_id, "tf_graphs/mark_for_compilation_annotated_1.pbtxt"))
    clustered = {
        n.first("name") for n in proto.messages("node") if any(a.first("key") == "_XlaCluster" for a in n.messages("attr"))
    }
    everything = {n.first("name") for n in proto.messages("node")}
    assert clustered and clustered != everything
    nodes = svg_nodes(out.read_bytes())
    assert set(nodes) == everything
    assert {nodes[n]["fill"] for n in clustered} == {"#fbd5a6"}
    assert {nodes[n]["fill"] for n in everything - clustered} == {"#ffffff"}
    assert any(label.startswith(f"XLA cluster_0 ({len(clustered)} nodes)") for label in svg_clusters(out.read_bytes()))


@pytest.mark.slow
def test_textproto_reads_what_protobuf_refuses():
    text = (
        'node { name: "a/\\"quoted\\"\\\\" op: "Const" future_field { x: 1 } attr { key: "_XlaCluster" value { s: "cluster_7" } } }\n'
        'node { name: "b" op: "Identity" input: "a/\\"quoted\\"\\\\" attr { key: "bytes" value { s: "\\377\\376" } } }\n'
        'node { name: "c" op: "AddV2" input: ["b", "^a/\\"quoted\\"\\\\"]\n'  # cut short: no closing brace
    )
    proto = parse_text_proto(text)
    names = [n.first("name") for n in proto.messages("node")]
    assert names == ['a/"quoted"\\', "b", "c"]
    assert proto.messages("node")[2].all("input") == ["b", '^a/"quoted"\\']
    assert proto.problems == ["1 messages not closed (the file is cut short)"]
    svg = render_bytes(text.encode(), "graph.pbtxt", RenderOptions(format="svg")).data
    nodes = svg_nodes(svg)
    assert set(nodes) == {'a/"quoted"\\\\', "b", "c"}  # the SVG title keeps the DOT escaping of the backslash
    assert nodes["b"]["fill"] == "#ffffff" and nodes['a/"quoted"\\\\']["fill"] == "#fbd5a6"
    tf = pytest.importorskip("tensorflow")
    from google.protobuf import text_format

    with pytest.raises(text_format.ParseError):
        text_format.Parse(text, tf.compat.v1.GraphDef())


@pytest.mark.slow
def test_big_module_drawn_condensed_and_refused_with_full_and_the_around_hint(cli, tmp_path):
    path = tmp_path / "ladder.txt"
    path.write_text(ladder_hlo(3000))
    result = cli("render", path, "-f", "dot", "-o", tmp_path / "all.dot")
    assert result.exit_code == 0, result.stderr
    assert "condensed to" in result.stdout + result.stderr and "bands of depth" in result.stdout + result.stderr
    result = cli("render", path, "--full", "-o", tmp_path / "all.svg")
    assert result.exit_code == 2
    assert "6003 nodes, more than the limit of 1500" in result.stderr and "--around out --depth 3" in result.stderr
    assert not (tmp_path / "all.svg").exists()


def test_around_draws_only_the_neighbourhood_in_seconds(cli, tmp_path):
    path = tmp_path / "ladder.txt"
    path.write_text(ladder_hlo(3000))
    out = tmp_path / "part.svg"
    started = time.monotonic()
    result = cli("render", path, "--around", "x.1500", "--depth", "2", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started < 120  # the whole ladder takes dot many minutes; a loaded machine must pass
    nodes = svg_nodes(out.read_bytes())
    # within two edges of x.1500 on the ladder: rungs 1498..1502
    assert set(nodes) == {"x.1498", "y.1498", "x.1499", "y.1499", "x.1500", "y.1500", "x.1501", "y.1501", "x.1502", "y.1502"}
    assert "more neighbours not drawn" in nodes["x.1498"]["tooltip"] and "more neighbours" not in nodes["x.1500"]["tooltip"]
    assert "op_name: rung1500/add" in nodes["x.1500"]["tooltip"]


def test_around_inside_a_fusion_opens_it(jax_passes_run, tmp_path):
    store, _ = jax_passes_run
    module = parse_hlo_text(_module_text(store, "init_params", "after_optimizations"))
    fusion = next(i for i in module.entry.instructions if i.opcode == "fusion")
    inner = next(i for c in fusion.called_computations for i in module.computations[c].instructions if i.opcode != "parameter")
    text = _module_text(store, "init_params", "after_optimizations").encode()
    graph = graph_of(text, "m.txt", RenderOptions(around=inner.name, depth=2))
    assert inner.name in graph.nodes and graph.nodes[inner.name].bold
    assert len(graph.nodes) < 40 < module.instruction_count()
    assert any("calls of" in c.label for c in graph.clusters.values())


def test_node_limit_on_a_real_module(jax_passes_run, cli, tmp_path):
    store, _ = jax_passes_run
    # over the limit: the overview (the entry, plumbing folded), or, with --full, a refusal naming --around
    result = cli("render", "init_params", "-s", "after", "--limit", "200", "--store", store.root, "-o", tmp_path / "x.svg")
    assert result.exit_code == 0 and "overview:" in result.stdout + result.stderr
    result = cli(
        "render", "init_params", "-s", "after", "--limit", "50", "--full", "--store", store.root, "-o", tmp_path / "x.svg"
    )
    assert result.exit_code == 2
    assert "more than the limit of 50" in result.stderr and "--around" in result.stderr
    result = cli("render", "init_params", "--around", "no.such", "--store", store.root, "-o", tmp_path / "x.svg")
    assert result.exit_code == 2 and "has no instruction 'no.such'" in result.stderr


def test_missing_file_and_stage_errors(jax_run, cli, tmp_path):
    store, result = jax_run
    out = cli("render", result.run_id, "--file", "nothing.pbtxt", "--store", store.root)
    assert out.exit_code == 2 and "has no file nothing.pbtxt" in out.stderr
    out = cli("render", "train_step", "--pass", "fusion", "--store", store.root)
    assert out.exit_code == 2 and "no dump after a pass named 'fusion'" in out.stderr and "pass_re" in out.stderr


def test_default_output_name_and_png(jax_run, cli, tmp_path, monkeypatch):
    store, _ = jax_run
    monkeypatch.chdir(tmp_path)
    result = cli("render", "train_step", "-f", "png", "--store", store.root)
    assert result.exit_code == 0, result.stderr
    [png] = list(Path(tmp_path).glob("*.png"))
    # the dump's own name: module_NNNN.jit_train_step.before_optimizations, with the id this capture gave it
    assert png.name == f"{resolve_module(store.index, 'train_step').label}.before_optimizations.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_dot_is_an_environment_problem(jax_run, cli, tmp_path):
    store, _ = jax_run
    result = cli("render", "train_step", "--store", store.root, "-o", tmp_path / "x.svg", env={"PATH": str(tmp_path)})
    assert result.exit_code == 3
    assert "graphviz's `dot` is not installed" in result.stderr and "apt-get install graphviz" in result.stderr
    dot_text = tmp_path / "x.dot"
    assert (
        cli("render", "train_step", "--store", store.root, "-o", dot_text, env={"PATH": str(tmp_path)}).exit_code == 0
    )  # DOT needs no dot


def test_layout_time_limit(tmp_path):
    graph = graph_of(ladder_hlo(1400).encode(), "ladder.txt", RenderOptions(full=True))
    from xlarun.render import to_dot

    started = time.monotonic()
    with pytest.raises(LayoutTimeout, match=r"more than 0\.2 s"):
        layout(to_dot(graph), "svg", timeout_s=0.2)
    assert time.monotonic() - started < 60  # dot was stopped: the full layout takes many minutes


def test_graph_too_big_is_an_input_error():
    with pytest.raises(GraphTooBig) as caught:
        render_bytes(ladder_hlo(100).encode(), "ladder.txt", RenderOptions(limit=10, full=True))
    assert caught.value.exit_code == 2 and "--around out" in caught.value.hint


def test_a_shape_nested_100000_deep_is_drawn_with_its_label_cut(cli, tmp_path):
    depth = 100_000
    path = tmp_path / "deep.hlo"
    path.write_text(
        f"HloModule deep\nENTRY main {{\n  p = f32[] parameter(0)\n  ROOT r = {'(' * depth}f32[]{')' * depth} add(p, p)\n}}\n"
    )
    result = cli("render", path, "-o", tmp_path / "deep.svg")
    assert result.exit_code == 0, result.output
    svg = (tmp_path / "deep.svg").read_text()
    assert "…" in svg and len(svg) < 100_000  # dot refuses quoted strings past 16384 characters


def test_dot_runs_under_a_memory_limit_and_a_crash_is_named(tmp_path):
    import importlib

    layout_module = importlib.import_module("xlarun.render.layout")  # the package exports the function of that name
    assert layout_module.DOT_ADDRESS_SPACE >= 1 << 30
    assert b"<svg" in layout("digraph G { a -> b }", "svg")
    # dot killed by a signal (here: its address space cut to nothing by the same limit) is a named EnvironmentProblem
    from xlarun.errors import EnvironmentProblem

    saved = layout_module.DOT_ADDRESS_SPACE
    layout_module.DOT_ADDRESS_SPACE = 1 << 20
    try:
        with pytest.raises(EnvironmentProblem, match=r"dot (crashed \(SIG\w+\)|failed)"):
            layout(ladder_hlo_dot(), "svg")
    finally:
        layout_module.DOT_ADDRESS_SPACE = saved


def ladder_hlo_dot() -> str:
    from xlarun.render import to_dot

    return to_dot(graph_of(ladder_hlo(200).encode(), "ladder.hlo", RenderOptions(limit=None)))
