"""Culprits that cannot be turned off: passes a module does not compile without (kept enabled in every replay).

A kept pass runs again on every step's recompile, so the step-by-step search cannot see what it does: it
would report "no step diverges" while the pass moves the numbers. Where XLA has a switch for what such a pass
allows (``float-normalization-bf16`` keeps bf16 values in f32 between ops unless
``xla_allow_excess_precision`` is false), the reference is run both ways: the difference is the pass's own
effect, reported as the culprit, with the first instruction whose value it moves. A kept pass without a switch
is said to be unmeasured, never silently passed over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xlarun.bisect.bisect_result import BisectResult, StepError
from xlarun.bisect.first_move import find_first_move
from xlarun.errors import EngineError, InputError

if TYPE_CHECKING:
    from xlarun.bisect.bisect_plan import BisectPlan
    from xlarun.store.rows import FileInfo

#: Kept pass -> (the DebugOptions field that turns off what it does to the numbers, its value, what that means).
SWITCHES: dict[str, tuple[str, bool, str]] = {
    "float-normalization-bf16": (
        "xla_allow_excess_precision",
        False,
        "keeping bf16 values in f32 between ops, excess precision",
    ),
}


def measure_kept_passes(
    replayer: Any, plan: BisectPlan, expected: list, result: BisectResult, log: Callable[[str], None]
) -> None:
    """After a search that found nothing with ``result.kept_passes`` on: measure each kept pass that has a
    switch, and name it as the culprit when it moves the reference past the tolerance."""
    before, steps = plan.before, plan.steps
    unmeasured = []
    for name in result.kept_passes:
        if name not in SWITCHES:
            unmeasured.append(name)
            continue
        field, value, meaning = SWITCHES[name]
        switched = dict(replayer.debug_options, **{field: value})
        try:
            outputs = _run_with(replayer, switched, replayer.text(before.path))
        except (EngineError, InputError) as exc:
            result.warnings.append(f"{name} could not be measured ({field}={str(value).lower()}): {exc.one_line()}")
            continue
        if outputs is None:
            continue
        comparison = plan.compare(expected, outputs, "reference")
        log(
            f"{name} kept on; with {field}={str(value).lower()} the reference moves by max abs "
            f"{comparison.max_abs_error:.3g}, rel {comparison.max_rel_error:.3g}"
        )
        if comparison.matched:
            continue
        step = next((s for s in steps if s.after_pass == name), None)
        result.verdict = "diverged"
        result.culprit_pass = name
        result.culprit_step = step.step if step else None
        result.culprit_pipeline = step.pipeline if step else None
        result.culprit_run, result.culprit_runs = (1, sum(s.after_pass == name for s in steps)) if step else (None, None)
        result.error_before = StepError(
            -1, f"before_optimizations with {field}={str(value).lower()}", None, None, before.path, 0.0, 0.0, False
        )
        result.error_after = StepError(
            step.step if step else -1,
            step.label if step else f"after {name}",
            name,
            step.pipeline if step else None,
            before.path,
            comparison.max_abs_error,
            comparison.max_rel_error,
            True,
        )
        result.warnings.append(
            f"{name} must stay on for the module to compile, so every step was replayed with it on; its own effect, "
            f"{meaning}, was measured by recompiling the reference with {field}={str(value).lower()}"
        )
        if plan.options.ops:
            result.first_move = _first_move(replayer, switched, before, name, field, value, plan, log)
        return
    if unmeasured:
        result.warnings.append(
            f"kept on, as the module does not compile without them: {', '.join(unmeasured)}; what they do to the "
            "numbers is not measured (no switch turns it off), so 'no step diverges' does not clear them"
        )


def _run_with(replayer: Any, debug_options: dict, text: str) -> list | None:
    saved = replayer.debug_options
    replayer.debug_options = debug_options
    try:
        return replayer.run_text(text)
    finally:
        replayer.debug_options = saved


def _first_move(
    replayer: Any, switched: dict, before: FileInfo, name: str, field: str, value: bool, plan: BisectPlan, log: Any
) -> dict:
    text = replayer.text(before.path)
    try:
        answer = find_first_move(
            replayer.run_text,
            text,
            text,
            plan.options.abs_tolerance,
            plan.options.rel_tolerance,
            "the reference as compiled",
            f"the reference with {field}={str(value).lower()}",
            run_before=lambda exposed: _run_with(replayer, switched, exposed),
        )
    except (EngineError, InputError) as exc:
        log(f"the first moving instruction could not be found: {exc.one_line()}")
        return {}
    for line in answer.lines():
        log(line)
    return answer.to_dict()
