"""What ``xlarun bisect`` prints: the bisection's facts, where the numbers move, the culprit's diff, the steps."""

from __future__ import annotations

from typing import Any

from xlarun.console import escape_markup, print_pairs, print_table, say, short_number, warn


def print_bisection(result: Any, bisect_id: str | None = None) -> None:
    """The bisection as a terminal report: the answer, the culprit's diff, the error at every step."""

    for line in result.warnings:
        warn(line)
    what = f"bisection of {result.subject} by {result.mode}" + (f" (recorded as {bisect_id})" if bisect_id else "")
    say(f"[bold]{what}[/bold]")
    before, after = result.error_before, result.error_after
    if result.mode == "replay":
        print_pairs(
            [
                ("reference", f"{result.reference}, {result.arguments} arguments"),
                (
                    "devices",
                    f"{result.devices}: steps from {result.per_device_from_step} on (after the SPMD partitioner) ran on "
                    f"{result.devices} devices, the steps before them on {result.reference_devices}"
                    if result.devices > 1
                    else None,
                ),
                (
                    "recompiled",
                    (
                        f"with {len(result.disabled_passes)} timeline passes disabled"
                        if result.recompile == "timeline"
                        else result.recompile
                    )
                    + (
                        f"; kept on, as the module does not compile without them: {', '.join(result.kept_passes)}"
                        if result.kept_passes
                        else ""
                    ),
                ),
                ("tolerance", f"abs {result.abs_tolerance:g} or rel {result.rel_tolerance:g}"),
                ("search", f"{result.search}: {result.replays} replays of {result.steps_total} steps in {result.wall_s:.1f} s"),
                (
                    "culprit",
                    f"{result.culprit_pass}{result.run_of()} (pipeline {result.culprit_pipeline}), step {result.culprit_step}"
                    if result.culprit_pass
                    else None,
                ),
                ("error before", _error(before) if result.culprit_pass and before else None),
                ("error after", _error(after) if result.culprit_pass and after else None),
            ]
        )
    else:
        print_pairs(
            [
                ("check", result.check),
                ("baseline", f"{result.baseline:g}" if result.baseline is not None else None),
                ("candidates", f"{len(result.disabled_passes)} passes"),
                (
                    "search",
                    f"{result.reruns} reruns after {len(result.trials) - result.reruns} baseline runs, {result.wall_s:.1f} s in all",
                ),
                ("culprit", result.culprit_pass),
                ("also alone", ", ".join(p for p in result.culprit_passes if p != result.culprit_pass) or None),
            ]
        )
    if result.first_move:
        from xlarun.bisect.first_move import FirstMove

        say("[bold]where the numbers move[/bold] (value by value)")
        for line in FirstMove.from_dict(result.first_move).lines():
            say(f"  {escape_markup(line)}")
    if result.diff_summary:
        say(f"[bold]what {result.culprit_pass} did[/bold] (xlarun diff {result.subject} --to {result.culprit_step})")
        for line in result.diff_summary:
            say(f"  {escape_markup(line)}")
    if result.mode == "replay" and result.steps:
        sharded = result.devices > 1
        rows = [
            (
                e.step if e.step >= 0 else "",
                e.label,
                *([e.devices] if sharded else []),
                short_number(e.max_abs_error),
                short_number(e.max_rel_error),
                e.error or ("past tolerance" if e.diverged else "within") + (" (same module)" if e.reused else ""),
            )
            for e in result.steps
        ]
        print_table(
            ("step", "dump", *(["devices"] if sharded else []), "max abs err", "max rel err", "verdict"),
            rows,
            title=f"error at every replayed step ({len(rows)})",
            right=("step", "devices", "max abs err", "max rel err"),
        )
    elif result.trials:
        rows = [
            (
                t.run_id or "",
                t.role,
                _short(t.disabled),
                "" if t.value is None else f"{t.value:g}",
                {True: "FLIPPED", False: "same", None: ""}[t.flipped] if t.role != "baseline" else "",
            )
            for t in result.trials
        ]
        print_table(("run", "role", "disabled", "value", "check"), rows, title=f"runs ({len(rows)})")
    colour = "red" if result.verdict == "diverged" else ("yellow" if result.verdict == "inconclusive" else "green")
    say(f"[{colour}]{escape_markup(result.headline())}[/{colour}]")


def _error(entry: Any) -> str:
    return f"abs {short_number(entry.max_abs_error)}, rel {short_number(entry.max_rel_error)} ({entry.label})"


def _short(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])} and {len(names) - 3} more"
