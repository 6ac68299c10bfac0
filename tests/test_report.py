"""report: the static site of a real pass-by-pass capture, its links, index.json, escaping, batches,
and the site opened in headless Chromium."""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from xlarun.report import ReportOptions, build_batch_report, build_run_report
from xlarun.store.facade import LocalStore

from .see_support import CHROMIUM, CHROMIUM_ARGS, add_run

XSS = "<script>alert(1)</script>"
XSS_ATTR = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def passes_report(jax_passes_run, tmp_path_factory):
    """The report of configs/jax-passes.yaml's capture, and how long it took to build."""
    store, result = jax_passes_run
    out = tmp_path_factory.mktemp("report") / "site"
    lines: list[str] = []
    started = time.monotonic()
    built = build_run_report(store, result.run_id, out, ReportOptions(command=["xlarun", "report"]), progress=lines.append)
    seconds = time.monotonic() - started
    print(
        f"\nreport of {result.run_id} ({result.manifest.files} files): {seconds:.1f} s, {built.graphs} graphs, {built.files} files copied"
    )
    return built, json.loads(built.index_json.read_text()), lines, seconds


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
            if name == "id" and value:
                self.ids.add(value)


def _broken_links(site: Path) -> list[str]:
    pages = {}
    for page in site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parser
    broken = []
    for page, parser in pages.items():
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                broken.append(f"{page.name}: external link {link}")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.name}: {link}")
            elif parts.fragment and target in pages and parts.fragment not in pages[target].ids:
                broken.append(f"{page.name}: no anchor {link}")
    return broken


def test_report_of_the_pass_by_pass_capture(passes_report, jax_passes_run):
    built, data, lines, seconds = passes_report
    _store, result = jax_passes_run
    assert seconds < 120
    assert lines[0].startswith(f"report of run {result.run_id}") and any(
        line.startswith("module 1/8: module_0012.jit_train_step") for line in lines
    )
    assert any(line.startswith("  graph ") for line in lines) and lines[-1].startswith("done in")
    assert data["generator"].startswith("xlarun ") and data["command"] == ["xlarun", "report"]
    assert data["run"]["run_id"] == result.run_id and data["manifest"]["xla_flags"]
    names = [m["name"] for m in data["modules"]]
    assert names[0] == "jit_train_step" and len(names) == len(result.modules)
    main = data["modules"][0]
    _needs_pass_dumps(data)
    fusion = next(p for p in main["passes"] if p["after_pass"] == "fusion")
    assert fusion["changed"] and fusion["delta"] > 0 and fusion["diff"] == f"modules/module_0012.html#step-{fusion['step']}"
    unchanged = [p for p in main["passes"] if not p["changed"]]
    assert unchanged and all(p["diff"] is None for p in unchanged)
    graphs = {g["title"]: g for g in main["graphs"]}
    assert set(graphs) == {"before_optimizations", "after_optimizations"}
    for graph in graphs.values():
        svg = (built.index_html.parent / graph["svg"]).read_text()
        assert graph["view"] == "whole" and graph["nodes"] > 10 and svg.startswith("<svg")
    big = next(m for m in data["modules"] if m["name"] == "jit_init_params")
    before = next(g for g in big["graphs"] if g["title"] == "before_optimizations")
    # over the overview's threshold: the whole module condensed (called computations one node each), said so
    assert before["view"] == "overview" and before["nodes"] <= 500
    assert any(note.startswith("overview: ") for note in before["notes"])
    copied = [f for f in main["files"] if f["href"]]
    assert any(f["path"].endswith(".before_optimizations.txt") for f in copied)
    assert all((built.index_html.parent / f["href"]).is_file() for f in copied)
    assert all(f["why_not"] == "binary" for f in main["files"] if f["path"].endswith(".o"))


def _needs_pass_dumps(data: dict) -> None:
    assert data["modules"][0]["passes"], (
        "the jax-passes capture has no per-pass dumps (is --xla_dump_hlo_pass_re reaching XLA unquoted?)"
    )


def test_report_pages_link_only_to_files_inside_it(passes_report):
    built, *_ = passes_report
    assert _broken_links(built.index_html.parent) == []


def test_module_page_holds_timeline_diffs_and_graphs(passes_report):
    built, data, *_ = passes_report
    _needs_pass_dumps(data)
    page = (built.index_html.parent / "modules" / "module_0012.html").read_text()
    assert page.count('<details class="diff"') == sum(1 for p in data["modules"][0]["passes"] if p["diff"])
    assert "fusions formed:" in page and '<span class="add">+' in page
    # two graphs (before and after optimizations) and the chart of memory over the program order
    assert page.count("<svg") == 3 and page.count('id="memory-over-program"><svg') == 1
    assert "<script" not in page.replace('<script src="../static/report.js" defer></script>', "")
    assert "op_name: jit(train_step)" in page  # tooltips became SVG <title>s


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    """A store whose module names, op names, paths, manifest and replays carry markup."""
    store = LocalStore.open(tmp_path_factory.mktemp("hostile") / "store")
    module = (
        f"HloModule {XSS}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}\n\n"
        "ENTRY %main (p: f32[4]) -> f32[4] {\n"
        '  %p = f32[4]{0} parameter(0), metadata={op_name="<script>alert(2)</script>" source_file="\\"><img src=x onerror=alert(3)>" source_line=1}\n'
        "  ROOT %n = f32[4]{0} negate(%p)\n}\n"
    )
    changed = module.replace(
        "  ROOT %n = f32[4]{0} negate(%p)",
        '  %e = f32[4]{0} exponential(%p), metadata={op_name="</pre><script>alert(9)</script>"}\n  ROOT %n = f32[4]{0} negate(%e)',
    )
    graphdef = 'node { name: "<script>alert(4)</script>" op: "Const" attr { key: "_XlaCluster" value { s: "\\"><svg onload=alert(5)>" } } }\n'
    run_id = add_run(
        store,
        {
            "module_0000.before_optimizations.txt": module,
            "module_0000.0000.pipe.after_pipeline-start.before_algsimp.txt": module,
            "module_0000.0001.pipe.after_algsimp.before_dce.txt": changed,
            f"module_0001.{XSS_ATTR}.before_optimizations.txt": module.replace(XSS, "other"),
            "tf_graphs/evil_1.pbtxt": graphdef,
        },
        name="<b>hostile</b>",
        command=["python", "<script>alert(6)</script>"],
        env_delta={"X": "<script>alert(7)</script>"},
    )
    store.index.conn.execute(
        "CREATE TABLE IF NOT EXISTS replays (replay_id TEXT, run_id TEXT, module_id INTEGER, engine TEXT, verdict TEXT)"
    )
    store.index.conn.execute("INSERT INTO replays VALUES (?, ?, 0, ?, 'ok')", ("r1", run_id, "<script>alert(8)</script>"))
    return store, run_id


def test_everything_from_the_run_is_escaped(hostile_store, tmp_path):
    store, run_id = hostile_store
    built = build_run_report(store, run_id, tmp_path / "site")
    site = built.index_html.parent
    html = {p.name: p.read_text() for p in site.rglob("*.html")}
    for name, text in html.items():
        assert not re.search(r"<script>alert|<img src=x|<svg onload|<b>hostile", text), name
    index = html["index.html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index and "&lt;img src=x onerror=alert(1)&gt;" in index
    assert "&lt;script&gt;alert(6)&lt;/script&gt;" in index and "&lt;script&gt;alert(8)&lt;/script&gt;" in index
    assert 'id="replays"' in index and 'id="tf-graphs"' in index
    module_page = html["module_0000.html"]
    assert "&lt;/pre&gt;&lt;script&gt;alert(9)&lt;/script&gt;" in module_page and 'id="replays"' in module_page
    assert "Content-Security-Policy" in module_page and "script-src 'self'" in module_page
    assert _broken_links(site) == []


def test_report_command(jax_run, cli, tmp_path):
    store, result = jax_run
    out = tmp_path / "site"
    first = cli("report", result.run_id, "-o", out, "--store", store.root)
    assert first.exit_code == 0, first.stderr
    assert f"wrote {out / 'index.html'}" in first.stdout and f"report of run {result.run_id}" in first.stderr
    again = cli("report", "-o", out, "--store", store.root, "--no-graphs", "-q")
    assert again.exit_code == 0 and again.stderr == "" and not (out / "graphs").exists()  # an earlier report is replaced
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    refused = cli("report", "-o", other, "--store", store.root)
    assert refused.exit_code == 2 and "holds no xlarun report" in refused.stderr and (other / "notes.txt").exists()


def test_batch_report_lists_its_runs(tmp_path):
    store = LocalStore.open(tmp_path / "store")
    module = "HloModule jit_f\n\nENTRY %main (p: f32[4]) -> f32[4] {\n  ROOT %p = f32[4]{0} parameter(0)\n}\n"
    ids = [
        add_run(
            store,
            {"module_0001.jit_f.before_optimizations.txt": module.replace("f32[4]", f"f32[{n}]")},
            name="cell",
            batch_id="b-1",
            matrix={"n": n},
        )
        for n in (4, 8)
    ]
    add_run(store, {"module_0001.jit_f.before_optimizations.txt": module}, name="outsider")
    built = build_batch_report(store, "b-1", tmp_path / "batch")
    data = json.loads(built.index_json.read_text())
    assert sorted(r["run_id"] for r in data["runs"]) == sorted(ids) and data["runs"][0]["main_module"] == "module_0001.jit_f"
    page = built.index_html.read_text()
    assert all(f'href="runs/{run_id}/index.html"' in page for run_id in ids) and "n=8" in page and "outsider" not in page
    assert _broken_links(built.index_html.parent) == []
    with pytest.raises(Exception, match="no run belongs to batch"):
        build_batch_report(store, "nope", tmp_path / "none")


# --- in a real browser ----------------------------------------------------------------------------

browser = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def _page(chromium, events: list[str]):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    page.on("dialog", lambda dialog: (events.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("console", lambda message: events.append(f"console: {message.text}"))
    page.on("request", lambda request: None if request.url.startswith("file://") else events.append(f"network: {request.url}"))
    return page


def _column(page, header: str) -> list[str]:
    headers = page.locator("#module-table thead th").all_inner_texts()
    index = [h.replace("\n", " ").strip() for h in headers].index(header)
    return page.locator(f"#module-table tbody tr:visible td:nth-child({index + 1})").all_inner_texts()


@browser
@pytest.mark.browser
def test_report_in_chromium(passes_report, chromium, tmp_path):
    built, data, *_ = passes_report
    _needs_pass_dumps(data)
    events: list[str] = []
    page = _page(chromium, events)
    page.goto(built.index_html.resolve().as_uri())
    rows = page.locator("#module-table tbody tr")
    assert rows.count() == len(data["modules"])
    assert rows.first.locator("td").nth(1).inner_text() == "jit_train_step"

    page.locator("#module-table thead th", has_text="instr before").click()
    ascending = [int(v) for v in _column(page, "instr before")]
    assert ascending == sorted(ascending) and ascending[0] < ascending[-1]
    page.locator("#module-table thead th", has_text="instr before").click()
    assert [int(v) for v in _column(page, "instr before")] == sorted(ascending, reverse=True)
    page.locator("#module-table thead th", has_text="name").click()
    assert _column(page, "name") == sorted(_column(page, "name"), key=str.lower)

    page.fill("#module-filter", "rand")
    assert _column(page, "name") == ["jit__randint"]
    assert page.inner_text("#module-count") == f"1 of {len(data['modules'])} shown"
    page.fill("#module-filter", "")
    assert len(_column(page, "name")) == len(data["modules"])
    page.screenshot(path=str(tmp_path / "index.png"))

    page.click("text=jit_train_step")
    page.wait_for_load_state()
    assert page.url.endswith("modules/module_0012.html")
    graph = page.locator("div.graph svg").first
    assert graph.is_visible() and page.locator("div.graph svg g.node").count() > 10
    assert page.locator("details.diff[open]").count() == 1
    fusion_step = next(p["step"] for p in data["modules"][0]["passes"] if p["after_pass"] == "fusion")
    opened = page.locator(f"details#step-{fusion_step}")
    assert opened.get_attribute("open") is not None and "after fusion" in opened.locator("summary").inner_text()
    assert opened.locator("pre.udiff span.add").count() > 10 and "fusions formed:" in opened.inner_text()
    timeline = page.locator("#timeline-table tbody tr")
    assert timeline.count() == len(data["modules"][0]["passes"])
    page.check("#only-changed")
    changed = sum(1 for p in data["modules"][0]["passes"] if p["changed"])
    assert page.locator("#timeline-table tbody tr:visible").count() == changed < timeline.count()
    page.locator("#timeline-table a", has_text="diff").first.click()
    assert page.locator("details.diff[open]").count() == 2  # following a diff link opens it
    opened.scroll_into_view_if_needed()
    page.screenshot(path=str(tmp_path / "module.png"))
    assert (tmp_path / "module.png").stat().st_size > 10_000
    assert [e for e in events if not e.startswith("console: ") or "Security Policy" in e or "Failed" in e] == []


@browser
@pytest.mark.browser
def test_hostile_names_show_as_text_in_chromium(hostile_store, chromium, tmp_path):
    store, run_id = hostile_store
    built = build_run_report(store, run_id, tmp_path / "site")
    events: list[str] = []
    page = _page(chromium, events)
    page.goto(built.index_html.resolve().as_uri())
    names = _column(page, "name")
    assert XSS in names and XSS_ATTR in names
    assert "<script>alert(8)</script>" in page.inner_text("#replays")
    assert "<script>alert(4)</script>" in page.inner_text("#tf-graphs")
    page.click(f"text={XSS}")
    page.wait_for_load_state()
    assert page.inner_text("h1") == XSS
    page.click("details.diff summary") if not page.locator("details.diff[open]").count() else None
    assert "</pre><script>alert(9)</script>" in page.inner_text("details.diff")
    page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
    assert [e for e in events if e.startswith(("dialog", "network")) or "Security Policy" in e] == []
