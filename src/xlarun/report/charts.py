"""Charts of a report, drawn with matplotlib as static SVG put inline in the page (no script, no network).

A chart of time is a horizontal bar chart, longest bar first: a run's modules (from its profile), or one module's
ops. A chart of memory is the bytes live at each position of a module's program order, its peak marked. matplotlib is imported only when a report has a profile to draw, and without pyplot (its
figure and SVG canvas alone: no GUI backend, no global state).
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

#: Bars drawn at most; the rest are summed into one "N more" bar so the chart's total stays the run's.
MAX_BARS = 15
_SVG_START = re.compile(rb"<svg\b")


@dataclass(frozen=True)
class Bar:
    label: str
    seconds: float
    note: str = ""  # printed at the bar's end beside its time, e.g. "41% of the run"


def time_bars(title: str, bars: Sequence[Bar], xlabel: str = "measured time") -> Markup | None:
    """An inline SVG bar chart of ``bars`` (longest first, at most :data:`MAX_BARS`, the rest summed), or None
    when there is nothing to draw."""
    shown = sorted((b for b in bars if b.seconds > 0), key=lambda b: -b.seconds)
    if not shown:
        return None
    if len(shown) > MAX_BARS:
        rest = shown[MAX_BARS - 1 :]
        shown = [*shown[: MAX_BARS - 1], Bar(f"{len(rest)} more", sum(b.seconds for b in rest))]
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    scale, unit = _unit(shown[0].seconds)
    height = 0.9 + 0.32 * len(shown)
    figure = Figure(figsize=(8.5, height), layout="constrained")
    FigureCanvasSVG(figure)
    axes = figure.add_subplot()
    labels = [_short(b.label) for b in shown]
    values = [b.seconds * scale for b in shown]
    positions = list(range(len(shown)))
    axes.barh(positions, values, color="#3b7dd8")
    axes.set_yticks(positions, labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(f"{xlabel} ({unit})", fontsize=8)
    axes.set_title(_short(title, 110), fontsize=9, loc="left")
    axes.tick_params(axis="x", labelsize=8)
    axes.spines[["top", "right"]].set_visible(False)
    for position, bar, value in zip(positions, shown, values, strict=True):
        own_scale, own_unit = _unit(bar.seconds)  # each bar's time in its own unit: 13.6 us, not 0.0136 ms
        text = f" {bar.seconds * own_scale:.3g} {own_unit}" + (f" · {bar.note}" if bar.note else "")
        axes.text(value, position, text, va="center", fontsize=7)
    axes.set_xlim(0, max(values) * 1.35)
    return _svg(figure)


def memory_curve(title: str, live_bytes: Sequence[int], peak_position: int, peak_label: str) -> Markup | None:
    """An inline SVG of the bytes live at each position of a program (a step line, filled), the peak marked and
    labelled ``peak_label``; None when there is nothing to draw."""
    if not live_bytes or max(live_bytes) <= 0:
        return None
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    scale, unit = next(
        ((1 / f, u) for f, u in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")) if max(live_bytes) >= f), (1.0, "B")
    )
    values = [b * scale for b in live_bytes]
    positions = list(range(len(values)))
    figure = Figure(figsize=(8.5, 2.8), layout="constrained")
    FigureCanvasSVG(figure)
    axes = figure.add_subplot()
    axes.step(positions, values, where="mid", color="#3b7dd8")
    axes.fill_between(positions, values, step="mid", color="#3b7dd8", alpha=0.25)
    peak = values[peak_position]
    axes.plot([peak_position], [peak], marker="o", color="#b2182b")
    axes.annotate(
        f"peak {peak:.4g} {unit}: {peak_label}",
        (peak_position, peak),
        textcoords="offset points",
        xytext=(6, 4),
        fontsize=7,
        color="#b2182b",
    )
    axes.set_xlabel("position in the program order", fontsize=8)
    axes.set_ylabel(f"live ({unit})", fontsize=8)
    axes.set_title(_short(title, 110), fontsize=9, loc="left")
    axes.tick_params(labelsize=8)
    axes.set_ylim(0, peak * 1.25)
    axes.spines[["top", "right"]].set_visible(False)
    return _svg(figure)


def _svg(figure: Any) -> Markup:
    from matplotlib import rc_context

    out = io.BytesIO()
    # text as <text> (escaped by matplotlib), so labels can be found and copied; no date: the same data draws the
    # same bytes
    with rc_context({"svg.fonttype": "none"}):
        figure.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    start = _SVG_START.search(svg)
    return Markup(svg[start.start() :].decode("utf-8") if start else "")  # matplotlib's SVG, its text escaped by it


def _unit(longest_s: float) -> tuple[float, str]:
    if longest_s >= 1:
        return 1.0, "s"
    if longest_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def _short(label: str, most: int = 48) -> str:
    """A label cut to ``most`` characters (TensorFlow's cluster names run to 120), its end kept."""
    return label if len(label) <= most else label[: most - 13] + "…" + label[-12:]
