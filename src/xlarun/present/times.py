"""How measured time is printed: ``xlarun modules --by time``, ``xlarun profile REF`` and the time line of ``show``
(for the CLI and the Python front door alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlarun.console import echo, print_table, say

if TYPE_CHECKING:
    from xlarun.navigate.profile import ModuleProfile, RunTimes
    from xlarun.navigate.time_diff import RunTimeDiff, Spread, TimeChange
    from xlarun.store.profile_index import ModuleTime

#: Ops listed by ``xlarun profile`` unless told (--top).
DEFAULT_TOP_OPS = 25


def duration_words(ns: float) -> str:
    """``1.23 ms``, ``45.6 us``, ``2.10 s``: a time in the unit that reads best."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= size:
            return f"{ns / size:.3g} {unit}" if ns / size < 100 else f"{ns / size:.0f} {unit}"
    return f"{ns:.0f} ns"


def _percent(share: float) -> str:
    return f"{100 * share:.1f}%"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def time_line(time: ModuleTime | None) -> str | None:
    """``show``'s time line: how often the module ran and how long, and its share of the run's time."""
    if time is None:
        return None
    return (
        f"{duration_words(time.busy_ns)} in {time.executions} execution(s)"
        + (
            f", the first {duration_words(time.first_ns)}, then {duration_words(time.steady_mean_ns)} each"
            if time.executions > 1
            else ""
        )
        + (f" (on {time.devices} devices)" if time.devices > 1 else "")
        + "; "
        f"{_percent(time.share_of_run)} of the run's measured time (`xlarun profile` lists its ops)"
    )


def print_run_times(found: RunTimes) -> None:
    """``xlarun modules --by time``: the run's modules, most measured time first."""
    wall = f"; the job ran {found.job_wall_s:.2f} s" if found.job_wall_s else ""
    say(f"run [bold]{found.run_id}[/bold]: {len(found.modules)} modules ran, {duration_words(found.busy_ns)} measured{wall}")
    devices = any(m.time.devices > 1 for m in found.modules)
    print_table(
        ["module", "name", "time", "share", "runs", "first", "then each", "wall", *(["devices"] if devices else [])],
        [
            [
                m.ref.rpartition("/")[2] if m.ref else "(not dumped)",
                m.name,
                duration_words(m.time.busy_ns),
                _percent(m.time.share_of_run),
                m.time.executions,
                duration_words(m.time.first_ns),
                duration_words(m.time.steady_mean_ns) if m.time.executions > 1 else "",
                duration_words(m.time.wall_ns),
                *([m.time.devices] if devices else []),
            ]
            for m in found.modules
        ],
        right=["time", "share", "runs", "first", "then each", "wall", "devices"],
    )


def print_replay_profile(profile: dict, run_times_s: list[float], top: int | None = DEFAULT_TOP_OPS) -> None:
    """``xlarun replay --profile``: the replayed module's ops by self time, as ``xlarun profile`` lists a run's."""
    from xlarun.navigate.profile import ModuleProfile, ProfiledOp
    from xlarun.store.profile_index import ModuleTime, OpTime

    time = ModuleTime(**profile["time"])
    ops = [ProfiledOp(**{**op, "time": OpTime(**op["time"])}) for op in profile["ops"]]
    found = ModuleProfile("", None, profile["module"], time, ops, hlo_note=profile.get("hlo_note"))
    heading = (
        f"ops of [bold]{time.name}[/bold] over {profile['iterations']} iteration(s): {duration_words(time.busy_ns)} busy "
        + (f"on {time.devices} devices, added up, " if time.devices > 1 else "")
        + f"of {duration_words(sum(run_times_s) * 1e9)} measured"
        + (
            f"; the first {duration_words(time.first_ns)}, then {duration_words(time.steady_mean_ns)} each"
            if time.executions > 1
            else ""
        )
    )
    print_module_profile(found, top, heading=heading)


def print_module_profile(found: ModuleProfile, top: int | None = DEFAULT_TOP_OPS, *, heading: str | None = None) -> None:
    """``xlarun profile REF``: the module's ops by self time, with what each holds, its sources and rates
    (``heading``: the line above the table, instead of the run's)."""
    if found.time is None:
        say(f"[bold]{found.name}[/bold] in run {found.run_id} did not run while the profile was recorded")
        return
    say(heading or f"[bold]{found.name}[/bold] in run {found.run_id}: {time_line(found.time)}")
    shown = found.ops if not top else found.ops[:top]
    devices = any(o.time.devices > 1 for o in found.ops)  # a sharded module: count and times are of every device
    print_table(
        [
            "op",
            "holds",
            "count",
            *(["devices"] if devices else []),
            "total",
            "first",
            "then each",
            "share",
            "GFLOP/s",
            "GB/s",
            "source",
        ],
        [
            [
                o.op,
                ", ".join(o.fused_opcodes[:4]) + (", ..." if len(o.fused_opcodes) > 4 else "") or (o.opcode or ""),
                o.time.count,
                *([o.time.devices] if devices else []),
                duration_words(o.time.total_ns),
                duration_words(o.time.first_ns) if o.time.first_count else "",
                duration_words(o.time.steady_mean_ns) if o.time.steady_count else "",
                _percent(o.time.share_of_module),
                _rate(o.gflops_per_s),
                _rate(o.gbytes_per_s),
                ", ".join(s.rpartition("/")[2] for s in o.sources[:2]),
            ]
            for o in shown
        ],
        right=["count", "devices", "total", "first", "then each", "share", "GFLOP/s", "GB/s"],
    )
    if len(shown) < len(found.ops):
        echo(f"{len(found.ops) - len(shown)} more op(s)" + ("" if heading else ": --top 0 lists all"))
    if found.hlo_note:
        echo(found.hlo_note)


def _median(spread: Spread | None) -> str:
    return duration_words(spread.median_ns) if spread else ""


def _spread(spread: Spread | None) -> str:
    """The middle half of the executions as a share of their median: ``±12%`` (half its width), ``1 exec``."""
    if spread is None:
        return ""
    return f"±{50 * spread.relative:.0f}%" if spread.count > 1 else "1 exec"


def _signed(ns: float) -> str:
    return ("+" if ns >= 0 else "-") + duration_words(abs(ns))


def _verdict(change: TimeChange) -> str:
    ratio = "" if change.ratio is None else f" x{change.ratio:.3g}"
    words = {"same": "same within noise", "slower": f"slower{ratio}", "faster": f"faster{ratio}"}.get(
        change.verdict, change.verdict
    )
    return words + ("" if change.noise_measured or change.verdict.startswith("only") else " (1 execution: no spread)")


def print_time_diff(found: RunTimeDiff) -> None:
    """``xlarun diff RUN_A RUN_B --time``: each module's median time per execution in A and B, and the ops that moved."""
    say(
        f"run [bold]{found.run_a}[/bold] (A) against [bold]{found.run_b}[/bold] (B): "
        f"{duration_words(found.busy_ns_a)} measured in A, {duration_words(found.busy_ns_b)} in B"
    )
    print_table(
        ["module", "in A", "in B", "paired by", "A each", "B each", "spread A", "spread B", "verdict"],
        [
            [
                m.name,
                (m.ref_a or "").rpartition("/")[2],
                (m.ref_b or "").rpartition("/")[2],
                m.paired_by or "",
                _median(m.change.a),
                _median(m.change.b),
                _spread(m.change.a),
                _spread(m.change.b),
                _verdict(m.change),
            ]
            for m in found.modules
        ],
        right=["A each", "B each", "spread A", "spread B"],
    )
    if found.moved_ops:
        print_table(
            ["module", "op", "A each", "B each", "moved", "verdict"],
            [
                [name, op.op, _median(op.change.a), _median(op.change.b), _signed(op.change.moved_ns), _verdict(op.change)]
                for name, op in found.moved_ops
            ],
            title="ops that moved most (each: per execution of their module; moved: over all those executions)",
            right=["A each", "B each", "moved"],
        )
    else:
        echo("no op moved beyond the noise")
    echo(
        f"each: the median of a module's executions after its first; spread: half the width of their middle half; a "
        f"change counts when the middle halves of A's and B's executions lie more than {100 * found.min_change:.0f}% apart"
    )
