"""What a report shows of a run's profile: a chart of time by module on the run's page, a time column in its module
table, and a chart of time by op on each module page that ran while the trace was on; and of a module's memory: the
bytes live over its program order, the peak marked (from its buffer assignment and live ranges)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from markupsafe import Markup

from xlarun.navigate.peak_memory import memory_over_program
from xlarun.navigate.profile import NoProfile, module_profile, run_times
from xlarun.report.charts import Bar, memory_curve, time_bars
from xlarun.store.profile_index import ModuleTime

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo


@dataclass
class RunProfileView:
    chart: Markup | None
    busy_s: float  # every module's ops, added up
    job_wall_s: float | None
    times: dict[int | None, ModuleTime] = field(default_factory=dict)  # by module id


def run_profile(store: LocalStore, run_id: str) -> RunProfileView | None:
    """The run's time by module, charted; None when the run was not profiled."""
    try:
        found = run_times(store, run_id)
    except NoProfile:
        return None
    bars = [Bar(_module_label(m.module_id, m.name), m.time.busy_ns / 1e9, _share(m.time.share_of_run)) for m in found.modules]
    chart = time_bars("Time by module (the ops' own times, every execution)", bars)
    busy = sum(m.time.busy_ns for m in found.modules) / 1e9
    return RunProfileView(chart, busy, found.job_wall_s, {m.module_id: m.time for m in found.modules})


def module_chart(store: LocalStore, module: ModuleInfo) -> Markup | None:
    """The module's ops by their own time, charted; None when it did not run while the trace was on."""
    found = module_profile(store, module)
    bars = [
        Bar(op.op + (f" ({op.opcode})" if op.opcode else ""), op.time.self_ns / 1e9, _share(op.time.share_of_module))
        for op in found.ops
    ]
    return time_bars(f"Time by op of {found.name} (each op's own time, every execution)", bars)


def _share(fraction: float) -> str:
    return "<1%" if 0 < fraction < 0.005 else f"{fraction:.0%}"


def _module_label(module_id: int | None, name: str) -> str:
    """``module_0012 jit_train_step`` as the module table names it; the name alone for a module the dump lacks."""
    return name if module_id is None else f"module_{module_id:04d} {name}"


def module_memory_chart(store: LocalStore, module: ModuleInfo) -> Markup | None:
    """The module's live bytes over its program order, the peak marked; None without a buffer assignment and live
    ranges in its dump."""
    curve = memory_over_program(store, module)
    if curve is None:
        return None
    title = f"Memory over the program order of {module.name or module.label} (values live at each position)"
    return memory_curve(title, curve.live_bytes, curve.peak_position, curve.instructions[curve.peak_position])
