"""Two profiled runs compared by measured time: which modules and ops got slower or faster (``xlarun diff A B --time``).

Modules are paired by what they compute, never by their number (which shifts when a run compiles one more jit
first): by fingerprint of their unoptimized HLO (with the name, then without it), then, for what is left, by name
(the same function at other shapes: its HLO differs, so its fingerprint does). Ops are paired by name within a
pair of modules. Each side's times are the executions the trace recorded, read again from the archived trace:
per execution of a module, its busy time (its ops' self times added up) and each op's self time in it. The
module's first execution, which carries one-time set-up, is left out when there are others.

The noise is the spread those repeated executions show, taken as each side's middle half (25th to 75th percentile).
A module or op counts as **slower** only when the two middle halves lie apart by more than ``min_change`` (10%):
B's 25th percentile (its faster executions) above A's 75th (its slower ones) times 1.1; **faster** the other way
round; else **same** within noise, whatever the ratio of medians (which is reported: a run whose executions fell
into a fast and a slow group has its median in one of them). With fewer than two executions on a side there is no
spread to measure (``noise_measured`` False): only a factor of two or more counts then.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xlarun.errors import InputError
from xlarun.navigate.profile import run_times
from xlarun.store.profile_index import TRACE_SUFFIX, joined_trace_events

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo

#: How far apart (a ratio) the middle halves of A's and B's executions must lie for a change to count.
DEFAULT_MIN_CHANGE = 0.10
#: Where a side ran once (after its first execution) there is no spread to hold a change against: only a factor of
#: two or more counts.
UNMEASURED_MIN_CHANGE = 1.0
#: Ops listed as moved unless told (--top).
DEFAULT_TOP_MOVED = 10

SLOWER, FASTER, SAME, ONLY_A, ONLY_B = "slower", "faster", "same", "only in A", "only in B"


@dataclass(frozen=True)
class Spread:
    """A sample of execution times (ns): how many, their median and middle half (25th to 75th percentile)."""

    count: int
    median_ns: float
    low_ns: float
    high_ns: float

    @classmethod
    def of(cls, times: list[float]) -> Spread:
        """The spread of ``times`` (one or more)."""
        if len(times) == 1:
            return cls(1, times[0], times[0], times[0])
        low, median, high = statistics.quantiles(times, n=4, method="inclusive")
        return cls(len(times), median, low, high)

    @property
    def relative(self) -> float:
        """The middle half's width as a share of the median (0 when there is one execution)."""
        return (self.high_ns - self.low_ns) / self.median_ns if self.median_ns else 0.0


@dataclass
class TimeChange:
    """One module's or op's times in A and B, their ratio (B / A, by medians) and the verdict."""

    a: Spread | None
    b: Spread | None
    ratio: float | None  # None: on one side only, or no time in A
    verdict: str  # slower, faster, same, only in A, only in B
    noise_measured: bool  # both sides had two or more executions to measure a spread over

    @property
    def delta_ns(self) -> float:
        """B's median less A's, per execution (a side it is missing from counts 0)."""
        return (self.b.median_ns if self.b else 0.0) - (self.a.median_ns if self.a else 0.0)

    @property
    def moved_ns(self) -> float:
        """What the change comes to over the executions counted: ``delta_ns`` times the larger sample (the ranking of
        moved ops: a step's op that moved a little, every step, before a one-off's that moved much)."""
        return self.delta_ns * max(self.a.count if self.a else 0, self.b.count if self.b else 0)


@dataclass
class OpTimeDiff:
    """One op (by name) of a pair of modules."""

    op: str
    change: TimeChange


@dataclass
class ModuleTimeDiff:
    """One module of A and its counterpart in B (either None when it ran on one side only)."""

    name: str
    ref_a: str | None
    ref_b: str | None
    paired_by: str | None  # fingerprint, name, or None (on one side only)
    executions_a: int
    executions_b: int
    change: TimeChange
    ops: list[OpTimeDiff] = field(default_factory=list)


@dataclass
class RunTimeDiff:
    """``xlarun diff RUN_A RUN_B --time``: every module that ran in either run, by how much its time moved."""

    run_a: str
    run_b: str
    min_change: float
    busy_ns_a: float
    busy_ns_b: float
    modules: list[ModuleTimeDiff] = field(default_factory=list)
    moved_ops: list[tuple[str, OpTimeDiff]] = field(default_factory=list)  # (module name, op): most ``moved_ns`` first

    def to_dict(self) -> dict:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "min_change": self.min_change,
            "busy_ns_a": self.busy_ns_a,
            "busy_ns_b": self.busy_ns_b,
            "modules": [_module_dict(m) for m in self.modules],
            "moved_ops": [{"module": name, **_op_dict(op)} for name, op in self.moved_ops],
        }


@dataclass
class _Timed:
    """One module of a run as the trace saw it: its per-execution busy times and each op's per-execution self times."""

    module_id: int | None
    name: str
    ref: str | None
    fingerprint: str | None
    process: int | None
    executions: int
    busy: list[float]
    ops: dict[str, list[float]]


def compare_run_times(
    store: LocalStore, run_a: str, run_b: str, min_change: float = DEFAULT_MIN_CHANGE, top: int = DEFAULT_TOP_MOVED
) -> RunTimeDiff:
    """The two runs' modules and ops compared by measured time; :class:`~xlarun.navigate.profile.NoProfile` when
    either run was captured without ``profile:``."""
    if min_change < 0:
        raise InputError(f"--min-change {min_change} is negative", "give a share such as 0.1 (10%)")
    timed = {}
    for run_id in (run_a, run_b):
        busy = run_times(store, run_id).busy_ns  # NoProfile, saying to add `profile: true`, when there are no times
        timed[run_id] = (busy, _timed_modules(store, run_id))
    found = RunTimeDiff(run_a, run_b, min_change, timed[run_a][0], timed[run_b][0])
    for a, b, paired_by in pair_modules(timed[run_a][1], timed[run_b][1]):
        found.modules.append(_module_diff(a, b, paired_by, min_change))
    found.modules.sort(key=lambda m: -max(_total(m.change.a), _total(m.change.b)))
    moved = [(m.name, op) for m in found.modules for op in m.ops if op.change.verdict != SAME]
    found.moved_ops = sorted(moved, key=lambda pair: -abs(pair[1].change.moved_ns))[: top or None]
    return found


def _total(spread: Spread | None) -> float:
    return spread.median_ns * spread.count if spread else 0.0


def _timed_modules(store: LocalStore, run_id: str) -> list[_Timed]:
    """The run's modules that ran while the trace was on, with their executions read from the archived trace."""
    infos: dict[int, ModuleInfo] = {m.module_id: m for m in store.index.modules(run_id)}
    traces = [f.path for f in store.index.run_files(run_id) if f.path.endswith(TRACE_SUFFIX)]
    modules = {(m.module_id, m.name) for m in infos.values() if m.name}
    events = joined_trace_events(store, run_id, traces, modules)
    if not events:
        raise InputError(
            f"run {run_id}'s profile could not be read again from its trace",
            f"`xlarun check` says whether its files are damaged; `xlarun files {run_id}` lists the trace",
        )
    executions: dict[tuple, dict] = defaultdict(dict)  # (module id, name) -> run id -> [start, busy, {op: self}]
    for event, module_id in events:
        execution = executions[(module_id, event.module)].setdefault(event.run_id, [event.start_ps, 0.0, defaultdict(float)])
        execution[0] = min(execution[0], event.start_ps)
        execution[1] += event.self_ps / 1000
        execution[2][event.op] += event.self_ps / 1000
    out = []
    for (module_id, name), runs in executions.items():
        ordered = sorted(runs.values(), key=lambda execution: execution[0])
        steady = ordered[1:] or ordered  # the first execution carries one-time set-up
        ops: dict[str, list[float]] = defaultdict(list)
        for _start, _busy, op_times in steady:
            for op, ns in op_times.items():
                ops[op].append(ns)
        info = infos.get(module_id) if module_id is not None else None
        out.append(
            _Timed(
                module_id,
                name,
                info.ref if info else None,
                info.fingerprint if info else None,
                info.process if info else None,
                len(ordered),
                [busy for _start, busy, _ops in steady],
                dict(ops),
            )
        )
    return sorted(out, key=lambda m: (m.module_id is None, m.module_id or 0, m.name))


def pair_modules(a: list, b: list) -> list[tuple]:
    """Modules of A and B paired by what they compute: (a, b, how) with a or b None for one that has no counterpart.
    Each has ``fingerprint``, ``name`` and ``process``; within a key, the k-th of A pairs with the k-th of B."""
    keys: list[tuple[str, Callable[[_Timed], Hashable | None]]] = [
        ("fingerprint", lambda m: (m.process, m.fingerprint, m.name) if m.fingerprint else None),
        ("fingerprint", lambda m: (m.process, m.fingerprint) if m.fingerprint else None),
        ("name", lambda m: (m.process, m.name)),
    ]
    left_a, left_b = list(a), list(b)
    pairs: list[tuple] = []
    for how, key in keys:
        by_key: dict[Hashable, list] = defaultdict(list)
        for module in left_b:
            if (k := key(module)) is not None:
                by_key[k].append(module)
        for module in list(left_a):
            k = key(module)
            if k is not None and by_key.get(k):
                other = by_key[k].pop(0)
                pairs.append((module, other, how))
                left_a.remove(module)
                left_b.remove(other)
    return pairs + [(m, None, None) for m in left_a] + [(None, m, None) for m in left_b]


def time_change(a: list[float] | None, b: list[float] | None, min_change: float) -> TimeChange:
    """A's and B's execution times compared: the ratio of their medians, and the verdict the module docstring defines."""
    spread_a, spread_b = (Spread.of(a) if a else None), (Spread.of(b) if b else None)
    if spread_a is None or spread_b is None:
        return TimeChange(spread_a, spread_b, None, ONLY_B if spread_a is None else ONLY_A, False)
    measured = spread_a.count >= 2 and spread_b.count >= 2
    if not spread_a.median_ns:
        return TimeChange(spread_a, spread_b, None, SAME if not spread_b.median_ns else SLOWER, measured)
    ratio = spread_b.median_ns / spread_a.median_ns
    bar = 1 + (min_change if measured else max(min_change, UNMEASURED_MIN_CHANGE))
    verdict = SAME
    if spread_b.low_ns > spread_a.high_ns * bar:  # even B's faster executions are slower than A's slower ones
        verdict = SLOWER
    elif spread_b.high_ns * bar < spread_a.low_ns:
        verdict = FASTER
    return TimeChange(spread_a, spread_b, ratio, verdict, measured)


def _module_diff(a: _Timed | None, b: _Timed | None, paired_by: str | None, min_change: float) -> ModuleTimeDiff:
    change = time_change(a.busy if a else None, b.busy if b else None, min_change)
    names = list(dict.fromkeys([*(a.ops if a else {}), *(b.ops if b else {})]))
    ops = [OpTimeDiff(op, time_change(a.ops.get(op) if a else None, b.ops.get(op) if b else None, min_change)) for op in names]
    ops.sort(key=lambda op: -max(op.change.a.median_ns if op.change.a else 0.0, op.change.b.median_ns if op.change.b else 0.0))
    name = (a or b).name  # type: ignore[union-attr]  # one side at least
    return ModuleTimeDiff(
        name if not (a and b) or a.name == b.name else f"{a.name} / {b.name}",
        a.ref if a else None,
        b.ref if b else None,
        paired_by,
        a.executions if a else 0,
        b.executions if b else 0,
        change,
        ops,
    )


def _spread_dict(spread: Spread | None) -> dict | None:
    if spread is None:
        return None
    return {"samples": spread.count, "median_ns": spread.median_ns, "q25_ns": spread.low_ns, "q75_ns": spread.high_ns}


def _change_dict(change: TimeChange) -> dict:
    return {
        "a": _spread_dict(change.a),
        "b": _spread_dict(change.b),
        "ratio": change.ratio,
        "verdict": change.verdict,
        "noise_measured": change.noise_measured,
        "delta_ns": change.delta_ns,
        "moved_ns": change.moved_ns,
    }


def _op_dict(op: OpTimeDiff) -> dict:
    return {"op": op.op, **_change_dict(op.change)}


def _module_dict(module: ModuleTimeDiff) -> dict:
    return {
        "name": module.name,
        "ref_a": module.ref_a,
        "ref_b": module.ref_b,
        "paired_by": module.paired_by,
        "executions_a": module.executions_a,
        "executions_b": module.executions_b,
        **_change_dict(module.change),
        "ops": [_op_dict(op) for op in module.ops],
    }
