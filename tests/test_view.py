"""``view`` and ``export --format model-explorer``: a real capture's module in Model Explorer, in Chromium."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from .see_support import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="module")
def train_step(jax_run):
    from xlarun.navigate.refs import resolve_module

    store, _result = jax_run
    return store, resolve_module(store.index, "jit_train_step")


def _hlo(store, module, stage):
    from xlarun.hlo import load_hlo
    from xlarun.navigate.select import select_file

    chosen = select_file(module, stage, purpose="graph")
    return load_hlo(store.blobs.get(chosen.digest), chosen.path)


def test_graph_json_mirrors_the_module(train_step, tmp_path):
    from xlarun.see.view import write_model_explorer_json

    store, module = train_step
    path = write_model_explorer_json(store, module, tmp_path / "g.json")
    collection = json.loads(path.read_text())
    hlo = _hlo(store, module, "before_optimizations")
    entry = collection["graphs"][0]
    assert entry["id"] == f"entry: {hlo.entry_computation}"
    assert len(collection["graphs"]) == len(hlo.computations)
    assert len(entry["nodes"]) == len(hlo.computations[hlo.entry_computation].instructions)
    graph_ids = {g["id"] for g in collection["graphs"]}
    for graph in collection["graphs"]:
        node_ids = {n["id"] for n in graph["nodes"]}
        for node in graph["nodes"]:
            assert all(e["sourceNodeId"] in node_ids for e in node["incomingEdges"])
            assert set(node["subgraphIds"]) <= graph_ids
    dots = [n for n in entry["nodes"] if n["label"] == "dot"]
    assert dots and all(n["namespace"].startswith("jit(train_step)") for n in dots)
    attrs = {a["key"]: a["value"] for a in dots[0]["attrs"]}
    assert attrs["source"].split(":")[0].endswith("jax_mlp.py") and attrs["shape"].startswith("f32[")


def test_after_optimizations_graph_says_which_fusion_each_node_is_in(train_step, tmp_path):
    from xlarun.see.view import write_model_explorer_json

    store, module = train_step
    collection = json.loads(write_model_explorer_json(store, module, tmp_path / "a.json", "after_optimizations").read_text())
    entry = collection["graphs"][0]
    fusions = [n for n in entry["nodes"] if n["label"] == "fusion"]
    assert fusions and all(len(n["subgraphIds"]) == 1 for n in fusions)
    fused = next(g for g in collection["graphs"] if g["id"] == fusions[0]["subgraphIds"][0])
    name = next(a["value"] for a in fusions[0]["attrs"] if a["key"] == "name")
    assert all({"key": "fused into", "value": name} in n["attrs"] for n in fused["nodes"])


def test_export_format_model_explorer(train_step, cli, tmp_path):
    store, module = train_step
    out = tmp_path / "train.json"
    result = cli("export", "jit_train_step", out, "--format", "model-explorer", "--store", store.root)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["label"].startswith(module.label)
    assert cli("export", "jit_train_step", tmp_path / "x.txt", "--format", "model-explorer", "--store", store.root).exit_code == 2
    assert cli("export", "jit_train_step", tmp_path / "y", "--format", "nope", "--store", store.root).exit_code == 2


def test_view_without_model_explorer_exits_3_naming_the_extra(train_step, cli, monkeypatch):
    import xlarun.see.view

    store, _module = train_step
    monkeypatch.setattr(xlarun.see.view, "model_explorer_installed", lambda: False)
    result = cli("view", "jit_train_step", "--no-browser", "--store", store.root)
    assert result.exit_code == 3
    assert "xlarun[view]" in result.stderr and "ai-edge-model-explorer" in result.stderr


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.browser
def test_model_explorer_renders_the_module_in_chromium(train_step, tmp_path):
    pytest.importorskip("model_explorer", reason="needs the view extra (pip install ai-edge-model-explorer)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from xlarun.see.view import ModelExplorerServer, write_model_explorer_json

    store, module = train_step
    graph = write_model_explorer_json(store, module, tmp_path / "train_step.json")
    entry_nodes = len(json.loads(graph.read_text())["graphs"][0]["nodes"])
    requests: list[str] = []
    with ModelExplorerServer.start(graph) as server:
        assert server.url.startswith(f"http://127.0.0.1:{server.port}/")
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
            page.goto(server.url)
            page.get_by_text(module.label).first.wait_for(timeout=60_000)  # the graph's title: it loaded
            page.get_by_text(f"{entry_nodes} nodes").first.wait_for(timeout=30_000)
            page.locator("canvas").first.wait_for(timeout=30_000)
            page.wait_for_timeout(1500)  # let the layout settle for the picture
            page.screenshot(path=str(tmp_path / "model-explorer.png"))
            body = page.inner_text("body")
            browser.close()
    assert "op node count" in body.lower() and str(entry_nodes) in body
    assert (tmp_path / "model-explorer.png").stat().st_size > 10_000
    # the graph came from our loopback server; the only other requests are the web app's own web fonts (harmless offline)
    assert any(url.startswith(f"http://127.0.0.1:{server.port}/api/v1/read_text_file") for url in requests)
    elsewhere = [u for u in requests if not u.startswith(("http://127.0.0.1", "data:", "blob:"))]
    assert all(u.startswith(("https://fonts.gstatic.com/", "https://fonts.googleapis.com/")) for u in elsewhere), elsewhere[:5]
    assert server.process.poll() is not None and not _port_open(server.port)  # stopped


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "browse_first"),
    [
        (signal.SIGINT, 0, True),  # Ctrl-C, the documented way to stop
        (signal.SIGINT, 0, False),  # at once after the URL (under load, before the server is waited on)
        (signal.SIGTERM, 143, False),
        (signal.SIGHUP, 129, False),
    ],
    ids=["sigint", "sigint-at-once", "sigterm", "sighup"],
)
def test_view_cli_serves_on_loopback_until_stopped(train_step, tmp_path, sig, code, browse_first):
    """Whatever stops `view`, Model Explorer stops listening and the temp folder goes."""
    pytest.importorskip("model_explorer", reason="needs the view extra (pip install ai-edge-model-explorer)")
    store, _module = train_step
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "XLARUN_STORE": str(store.root), "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "view", "jit_train_step", "--no-browser"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
    )  # a background suite ignores SIGINT
    try:
        url = ""
        for line in proc.stdout:
            if line.startswith("http://"):
                url = line.strip()
                break
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else url
        port = int(url.split(":")[2].split("/")[0])
        assert [p.name for p in temp.iterdir() if p.name.startswith("xlarun-view-")]
        if browse_first:
            with urllib.request.urlopen(url, timeout=30) as response:
                assert response.status == 200 and b"Model Explorer" in response.read()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == code, proc.stderr.read()
        assert not _port_open(port)
        assert [p.name for p in temp.iterdir() if p.name.startswith("xlarun-view-")] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
