"""The bisections of a module in the report: the answer, an error-by-step plot (inline SVG), the culprit's diff."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from xlarun.report.graphs import GraphJob, plan_error_graph

if TYPE_CHECKING:
    from xlarun.bisect.bisect_result import BisectResult
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo

_WIDTH, _HEIGHT, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 220, 58, 12, 14, 34


@dataclass
class BisectionBlock:
    bisect_id: str
    started: str
    headline: str
    mode: str
    verdict: str
    facts: list[tuple[str, str]]
    rows: list[tuple]
    svg: Markup | None
    diff_summary: list[str] = field(default_factory=list)
    diff_lines: list[tuple[str, str]] = field(default_factory=list)  # (css class, text)
    #: The culprit step's graph coloured by each value's error (a bisection with an instruction search).
    error_graph: GraphJob | None = None


def bisection_blocks(store: LocalStore, module: ModuleInfo, graph_limit: int | None) -> list[BisectionBlock]:
    """One block per recorded bisection of the module, newest first (none when the bisect stage is absent); with a
    ``graph_limit``, each with the culprit step's graph coloured by error where the bisection measured it."""
    run_id = module.run_id
    if not any((store.runs_dir / run_id / "bisections").glob("*.json")):
        return []
    from xlarun.bisect.history import bisections_for

    blocks = []
    for record in reversed(bisections_for(store, run_id, module.module_id)):
        r = record.result
        facts = [("mode", f"{r.mode} ({r.search})"), ("tolerance", f"abs {r.abs_tolerance:g} or rel {r.rel_tolerance:g}")]
        if r.mode == "replay":
            facts += [
                ("reference", f"{r.reference}, {r.arguments} arguments"),
                ("work", f"{r.replays} replays of {r.steps_total} steps, {r.wall_s:.1f} s"),
            ]
            rows: list[tuple] = [
                (
                    e.step,
                    e.label,
                    _num(e.max_abs_error),
                    _num(e.max_rel_error),
                    e.error or ("past tolerance" if e.diverged else "within"),
                )
                for e in r.steps
            ]
        else:
            facts += [("check", r.check or ""), ("work", f"{r.reruns} reruns, {r.wall_s:.1f} s")]
            rows = [
                (
                    t.run_id or "",
                    t.role,
                    ", ".join(t.disabled[:6]) + (" ..." if len(t.disabled) > 6 else ""),
                    "" if t.value is None else f"{t.value:g}",
                    {True: "flipped", False: "same", None: ""}[t.flipped],
                )
                for t in r.trials
            ]
        diff = [(_css(line), line) for line in r.diff_unified]
        blocks.append(
            BisectionBlock(
                record.bisect_id,
                record.started,
                r.headline(),
                r.mode,
                r.verdict,
                facts,
                rows,
                error_plot(r) if r.mode == "replay" else None,
                r.diff_summary,
                diff,
                plan_error_graph(store, module, r, record.bisect_id, graph_limit) if graph_limit else None,
            )
        )
    return blocks


def _css(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "head"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def error_plot(result: BisectResult) -> Markup:
    """Max abs error against step as a small SVG: log scale, the tolerance dashed, the culprit red."""
    # (step, its max abs error): the steps that have one, in step order
    points = sorted(
        ((e, e.max_abs_error) for e in result.steps if e.step >= 0 and e.max_abs_error is not None), key=lambda p: p[0].step
    )
    steps = max(result.steps_total - 1, 1)
    positive = [error for _e, error in points if error > 0 and math.isfinite(error)]
    low = math.floor(math.log10(min([*positive, result.abs_tolerance]))) - 1
    high = math.ceil(math.log10(max([*positive, result.abs_tolerance * 10])))
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def x(step: int) -> float:
        return _LEFT + plot_w * step / steps

    def y(value: float) -> float:
        exponent = low if value <= 0 else min(max(math.log10(value), low), high) if math.isfinite(value) else high
        return _TOP + plot_h * (1 - (exponent - low) / max(high - low, 1))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="error-plot" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        f'role="img" aria-label="max abs error by pass step">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for exponent in range(low, high + 1):
        label = "0" if exponent == low else f"1e{exponent}"
        parts.append(f'<text x="{_LEFT - 6}" y="{y(10.0**exponent) + 4:.1f}" text-anchor="end" font-size="11">{label}</text>')
    for step in range(0, steps + 1, max(1, steps // 10)):
        parts.append(f'<text x="{x(step):.1f}" y="{_HEIGHT - _BOTTOM + 16}" text-anchor="middle" font-size="11">{step}</text>')
    parts.append(f'<text x="{_LEFT + plot_w / 2}" y="{_HEIGHT - 4}" text-anchor="middle" font-size="11">pass step</text>')
    tol = y(result.abs_tolerance)
    parts.append(
        f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{tol:.1f}" y2="{tol:.1f}" stroke="#c80" stroke-dasharray="4 3"/>'
        f'<text x="{_LEFT + plot_w - 4}" y="{tol - 4:.1f}" text-anchor="end" font-size="10" fill="#c80">tolerance {result.abs_tolerance:g}</text>'
    )
    if len(points) > 1:
        path = " ".join(f"{x(e.step):.1f},{y(error):.1f}" for e, error in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#48c" stroke-width="1.5"/>')
    for e, error in points:
        is_culprit = e.step == result.culprit_step
        title = escape(f"step {e.step} {e.label}: max abs error {error:.3g}")
        parts.append(
            f'<circle cx="{x(e.step):.1f}" cy="{y(error):.1f}" r="{5 if is_culprit else 3.5}" '
            f'fill="{"#d22" if is_culprit else "#48c"}"><title>{title}</title></circle>'
        )
    culprit = next(((e, error) for e, error in points if e.step == result.culprit_step), None)
    if culprit is not None:
        below = y(culprit[1]) + 18
        parts.append(
            f'<text x="{x(culprit[0].step) + 7:.1f}" y="{below:.1f}" font-size="11" fill="#d22">{escape(result.culprit_pass or "")}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # every value from the dump went through escape()
