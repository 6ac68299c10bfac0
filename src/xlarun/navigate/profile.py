"""Where a profiled run's time went: its modules ranked by measured time, and one module's ops with what they hold.

:func:`run_times` is ``xlarun modules --by time``; :func:`module_profile` is ``xlarun profile REF``: each op's
count, total, mean and self time and its shares, joined by name with the optimized module (what a fusion
holds, its source lines, flops and bytes from :mod:`xlarun.hlo.cost`) to give achieved GFLOP/s and GB/s.
The times come from the index (:mod:`xlarun.store.profile_index`), which a capture with ``profile:`` fills.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xlarun.errors import InputError, XlarunError
from xlarun.store.profile_index import ModuleTime, OpTime, module_times, op_times

if TYPE_CHECKING:
    from xlarun.hlo.cost import OpCost
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo


class NoProfile(InputError):
    """The run was captured without ``profile:``: there are no times to show."""


@dataclass
class TimedModule:
    """A module of the run with its measured time (``module`` None: one the trace names and the dump lacks)."""

    module_id: int | None
    name: str
    ref: str | None
    time: ModuleTime


@dataclass
class RunTimes:
    """A run's modules by measured time, most first, and the job's wall time to hold them against."""

    run_id: str
    job_wall_s: float | None
    modules: list[TimedModule] = field(default_factory=list)

    @property
    def busy_ns(self) -> float:
        return sum(m.time.busy_ns for m in self.modules)


@dataclass
class ProfiledOp:
    """One op of a module: its time, what it holds, and the rates its work and time give."""

    op: str
    time: OpTime
    opcode: str | None = None
    fused_opcodes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    op_name: str | None = None
    flops: int | None = None  # per execution
    bytes: int | None = None  # per execution: operands and result
    gflops_per_s: float | None = None  # flops / time per execution, after the module's first execution where it ran again
    gbytes_per_s: float | None = None


@dataclass
class ModuleProfile:
    """``xlarun profile REF``: a module's ops by self time, most first."""

    run_id: str
    module_id: int | None
    name: str
    time: ModuleTime | None
    ops: list[ProfiledOp] = field(default_factory=list)
    job_wall_s: float | None = None
    hlo_note: str | None = None  # why ops lack what they hold (no optimized text dump)


def no_profile(run_id: str) -> NoProfile:
    """The error for a run captured without ``profile:``, saying how to capture one."""
    return NoProfile(
        f"run {run_id} has no profile",
        "capture it again with `profile: true` in the spec (a JAX or TensorFlow job), or xlarun.jax.capture(..., profile=True)",
    )


def run_times(store: LocalStore, run_id: str) -> RunTimes:
    """The run's modules by measured busy time, most first; :class:`NoProfile` when it was not profiled."""
    times = module_times(store.index.conn, run_id)
    if not times:
        raise no_profile(run_id)
    refs: dict[int | None, str] = {m.module_id: m.ref for m in store.index.modules(run_id)}
    modules = [TimedModule(t.module_id, t.name, refs.get(t.module_id), t) for t in times]
    return RunTimes(run_id, store.index.run(run_id).duration_s, modules)


def module_profile(store: LocalStore, module: ModuleInfo) -> ModuleProfile:
    """The module's ops by self time, each with what it holds, its source lines, its work and achieved rates."""
    times = module_times(store.index.conn, module.run_id)
    if not times:
        raise no_profile(module.run_id)
    mine = next((t for t in times if t.module_id == module.module_id), None)
    name = module.name or (mine.name if mine else "")
    found = ModuleProfile(module.run_id, module.module_id, name, mine, job_wall_s=store.index.run(module.run_id).duration_s)
    if mine is None:
        return found  # compiled, never run while the trace was on
    costs, found.hlo_note = _costs(store, module)
    for timed in op_times(store.index.conn, module.run_id, module.module_id, mine.name):
        found.ops.append(profiled_op(timed, costs.get(timed.op)))
    return found


def _costs(store: LocalStore, module: ModuleInfo) -> tuple[dict[str, OpCost], str | None]:
    from xlarun.hlo import load_hlo
    from xlarun.hlo.cost import op_costs
    from xlarun.navigate.select import select_file

    try:
        info = store.index.module(module.run_id, module.module_id)
        chosen = select_file(info, "after_optimizations", None, None, "text")
        return op_costs(load_hlo(store.read_file(module.run_id, chosen.path), chosen.path)), None
    except XlarunError as exc:
        return {}, f"what each op holds is not shown: {exc.message}"


def profiled_op(timed: OpTime, cost: OpCost | None) -> ProfiledOp:
    """An op's time joined with its work: what it holds, its sources, and the rates achieved (``xlarun profile``
    and ``replay --profile``)."""
    op = ProfiledOp(timed.op, timed)
    if cost is None:
        return op
    op.opcode, op.fused_opcodes, op.sources, op.op_name = cost.opcode, cost.fused_opcodes, cost.sources, cost.op_name
    op.flops, op.bytes = cost.flops, cost.bytes
    # the rates of the executions after the module's first (which may carry one-time set-up), where there are any
    calls, seconds = (
        (timed.steady_count, timed.steady_mean_ns * timed.steady_count / 1e9)
        if timed.steady_count
        else (
            timed.count,
            timed.total_ns / 1e9,
        )
    )
    if seconds > 0:
        op.gflops_per_s = None if cost.flops is None else cost.flops * calls / seconds / 1e9
        op.gbytes_per_s = cost.bytes * calls / seconds / 1e9
    return op


def op_self_times(store: LocalStore, module: ModuleInfo) -> dict[str, float]:
    """Each op of the module -> its own measured time (ns, every execution added up): what ``render --time``
    colours by. :class:`NoProfile` when the run was not profiled; an InputError when the module never ran while
    the trace was on."""
    if not module_times(store.index.conn, module.run_id):
        raise no_profile(module.run_id)
    rows = op_times(store.index.conn, module.run_id, module.module_id, module.name or "")
    if not rows:
        raise InputError(
            f"{module.label} did not run while the run's trace was on: no op of it was timed",
            "`xlarun modules --by time` lists the modules that ran",
        )
    return {row.op: row.self_ns for row in rows}
