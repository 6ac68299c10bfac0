"""The report's charts (report/charts.py, report/profiles.py): time by module on a run's page and by op on a module
page, drawn by matplotlib as inline SVG; checked as SVG and in headless Chromium on a real profiled capture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xlarun.report.charts import MAX_BARS, Bar, time_bars

from .see_support import CHROMIUM, CHROMIUM_ARGS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _texts(svg: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", t).strip() for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S)]


def test_bars_are_drawn_longest_first_each_time_in_its_own_unit():
    svg = str(time_bars("Time by op", [Bar("small", 13.6e-6, "1%"), Bar("big", 0.114, "98%"), Bar("never", 0.0)]))
    assert svg.startswith("<svg") and "Time by op" in svg
    texts = _texts(svg)
    assert texts.index("big") < texts.index("small") and "never" not in texts  # a bar of no time is not drawn
    assert "114 ms · 98%" in texts and "13.6 us · 1%" in texts


def test_more_bars_than_fit_are_summed_into_one_so_the_total_stays():
    bars = [Bar(f"op{i}", (i + 1) * 1e-3) for i in range(MAX_BARS + 5)]
    texts = _texts(str(time_bars("t", bars)))
    assert "6 more" in texts and "op0" not in texts and "op19" in texts
    assert "15 ms" in texts  # the 6 shortest (1+2+...+6 ms) as one bar


def test_labels_from_the_run_are_text_not_markup():
    svg = str(time_bars("<b>t</b>", [Bar("<script>alert(1)</script>", 1.0, "<i>x</i>")]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "<b>" not in svg


def test_nothing_to_draw_is_no_chart():
    assert time_bars("t", []) is None and time_bars("t", [Bar("a", 0.0)]) is None


@pytest.mark.slow
@pytest.mark.browser
def test_a_profiled_runs_report_charts_its_modules_and_each_modules_ops(tmp_path):
    pytest.importorskip("jax")
    sync_api = pytest.importorskip("playwright.sync_api")
    from xlarun.capture.launch import capture
    from xlarun.navigate.profile import run_times
    from xlarun.report import ReportOptions, build_run_report
    from xlarun.store.facade import LocalStore

    spec = tmp_path / "spec.yaml"
    spec.write_text((CONFIGS / "jax-profile.yaml").read_text().replace("script: examples/", f"script: {CONFIGS}/examples/"))
    store = LocalStore.open(tmp_path / "store")
    result = capture(spec, store)
    assert result.ok, result.warnings
    timed = run_times(store, result.run_id).modules
    built = build_run_report(store, result.run_id, tmp_path / "site", ReportOptions(graphs=False))
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(built.index_html.resolve().as_uri())
        chart = page.locator("#time-by-module svg")
        assert chart.is_visible() and chart.bounding_box()["width"] > 400
        labels = [t.strip() for t in chart.locator("text").all_text_contents()]
        top = timed[0]
        assert top.name == "jit_train_step" and f"module_{top.module_id:04d} jit_train_step" in labels  # the longest bar
        assert labels.index(f"module_{top.module_id:04d} jit_train_step") < labels.index(
            f"module_{timed[1].module_id:04d} {timed[1].name}"
        )
        header = page.locator("#module-table thead th").all_inner_texts()
        assert "time" in header
        page.goto((built.index_html.parent / "modules" / f"module_{top.module_id:04d}.html").resolve().as_uri())
        ops = page.locator("#time-by-op svg")
        assert ops.is_visible()
        op_labels = [t.strip() for t in ops.locator("text").all_text_contents()]
        assert any(label.startswith("dot") or "(dot)" in label or "fusion" in label for label in op_labels), op_labels
        memory = page.locator("#memory-over-program svg")  # the step's live bytes over its program order
        assert memory.is_visible() and any(t.strip().startswith("peak ") for t in memory.locator("text").all_text_contents())
        browser.close()


def test_memory_over_the_program_peaks_where_xla_says_and_is_charted(tmp_path):
    """The live bytes at each position of the MLP step's program order (its buffer assignment's value sizes over
    its live ranges) peak where XLA's own live-range file says, at the bytes it says; the report draws the curve."""
    import xlarun
    from xlarun.navigate.peak_memory import memory_over_program
    from xlarun.report.profiles import module_memory_chart
    from xlarun.store.facade import LocalStore

    from .test_memory import _dump

    front = xlarun.open_store(tmp_path / "store")
    run_id = front.import_dump(_dump(tmp_path / "mlp", "mlp_train_step", "module_0012.jit_train_step"), name="mlp").id
    front.close()
    store = LocalStore.open(tmp_path / "store")
    module = store.index.module(run_id, 12)
    curve = memory_over_program(store, module)
    assert curve is not None and len(curve.live_bytes) == len(curve.instructions) == 38
    assert (curve.peak_position, curve.peak_bytes) == (31, 267_100)  # "Peak: 31 ... 267100 bytes" in XLA's file
    assert curve.live_bytes[0] > 0 and curve.live_bytes[-1] < curve.peak_bytes
    texts = _texts(str(module_memory_chart(store, module)))
    assert any(t.startswith("peak 260.8 KiB: ") for t in texts), texts
