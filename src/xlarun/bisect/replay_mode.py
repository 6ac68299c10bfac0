"""Replay mode: which pass step of a module's timeline first changes its outputs.

Each per-pass dump is recompiled with the passes its timeline names disabled
(``xla_disable_hlo_passes``, set per compile through CompileOptions): the rest of the pipeline
then leaves the dump as that step left it, instead of applying the suspect pass again (measured
on the bf16 case: step 4's dump recompiled normally gives the final result, -112.938; with the
timeline's passes disabled, the unrounded -113.007 of the module as written). The reference (the
``before_optimizations`` module, compiled the same way) is what the program means before any
pass; the first step whose outputs leave it by more than the tolerance names the pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from xlarun.bisect.bisect_options import BisectOptions
from xlarun.bisect.bisect_plan import BisectPlan, disable, plan_bisection
from xlarun.bisect.bisect_result import FAKE_DATA_HINT, BisectResult, StepError
from xlarun.bisect.first_move import locate_first_move
from xlarun.bisect.history import BisectRecord, now, record_bisection
from xlarun.bisect.kept import measure_kept_passes
from xlarun.bisect.replayer import StepReplayer
from xlarun.bisect.search import binary_search, linear_search
from xlarun.bisect.sharded_replayer import (
    ShardedReplayer,
    blame_partitioner,
    describe_devices,
    instruction_search_refusal,
    open_replayer,
)
from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.literals import flatten
from xlarun.see.diff import PassStep, pass_diff

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo

Log = Callable[[str], None]
_MAX_DIFF_LINES = 400


def bisect_and_record(
    store: LocalStore, module: ModuleInfo, options: BisectOptions, sink: Log | None = None
) -> tuple[BisectResult, BisectRecord]:
    """``xlarun bisect REF`` and ``Module.bisect()``: bisect ``module`` by replay and record the result with its run."""
    started = now()
    result = bisect_module(store, module, options, sink)
    return result, record_bisection(store, result, options.to_dict(), started)


def bisect_module(
    store: LocalStore, module: ModuleInfo, options: BisectOptions | None = None, sink: Log | None = None
) -> BisectResult:
    """Find the first pass step of ``module`` whose outputs differ from the reference past the tolerance."""
    options = (options or BisectOptions()).validate()
    log = sink or (lambda _line: None)
    started = time.perf_counter()
    plan = plan_bisection(store, module, options)
    replayer = open_replayer(store, plan, log)
    try:
        return _bisect(store, plan, replayer, log, started)
    finally:
        replayer.close()


def _bisect(store: LocalStore, plan: BisectPlan, replayer: StepReplayer, log: Log, started: float) -> BisectResult:
    """The search over the plan's steps: the reference, then steps until the first that diverges, then what moved."""
    module, options, steps, before, disabled = plan.module, plan.options, plan.steps, plan.before, plan.disabled
    kept: list[str] = []
    error = None
    if disabled:  # the reference's own run (kept for it), which says whether the module compiles this way
        outputs, _, error = replayer.run(before.digest, before.path)
        if outputs is None:
            replayer.outputs.pop(before.digest, None)
            replayer.replays -= 1
    if error is not None:
        log(
            f"the before_optimizations module does not compile with {len(disabled)} passes disabled ({error}); finding the passes it needs"
        )
        needed = _passes_needed(disabled, lambda off: replayer.compile_error(before.path, disable(off)))
        if needed is None:
            raise EngineError(
                f"the before_optimizations module does not compile with the timeline's passes disabled: {error}",
                "try --recompile full (the pipeline runs again on each step, which can hide the culprit)",
            )
        kept = needed
        disabled = [n for n in disabled if n not in kept]
        replayer.debug_options = disable(disabled)
        log(f"kept enabled, as the module does not compile without them: {', '.join(kept)}")
    result = BisectResult(
        "replay",
        module.ref,
        reference=plan.reference_name,
        recompile=options.recompile,
        disabled_passes=disabled,
        abs_tolerance=options.abs_tolerance,
        rel_tolerance=options.rel_tolerance,
        search="linear" if options.linear else "binary",
        steps_total=len(steps),
        run_id=module.run_id,
        module_id=module.module_id,
        kept_passes=kept,
    )
    devices = plan.devices
    if devices is not None:
        describe_devices(result, devices, steps, log)
    log(f"{module.label}: {len(steps)} pass steps; recompiling each with {_describe_recompile(options, disabled)}")
    expected, start_diverged = _reference_outputs(replayer, plan, result, log)
    result.arguments = (
        "snapshot" if replayer.snapshot() is not None and replayer.arguments is replayer.snapshot().arguments else "fake"
    )
    errors: dict[int, StepError] = {}

    def measure(index: int) -> StepError:
        if index in errors:
            return errors[index]
        step = steps[index]
        reused = step.digest in replayer.outputs
        outputs, compile_s, error = replayer.run(step.digest, step.path)
        entry = StepError(
            step.step, step.label, step.after_pass, step.pipeline, step.path, compile_s=compile_s, error=error, reused=reused
        )
        entry.devices = devices.step_devices(index) if devices is not None else 1
        if outputs is not None:
            comparison = plan.compare(outputs, expected, result.reference)
            entry.max_abs_error, entry.max_rel_error, entry.diverged = (
                comparison.max_abs_error,
                comparison.max_rel_error,
                not comparison.matched,
            )
            entry.flipped = entry.diverged != start_diverged
        log(
            f"step {step.step:>3} {step.label}: "
            + (
                f"engine error: {error}"
                if error
                else f"max abs error {entry.max_abs_error:.3g}, rel {entry.max_rel_error:.3g}"
                + (" DIVERGED" if entry.diverged else "")
            )
        )
        errors[index] = entry
        return entry

    first = linear_search(measure, len(steps)) if options.linear else binary_search(measure, len(steps))
    result.steps = result.steps + [errors[i] for i in sorted(errors)]
    result.replays = replayer.replays
    _conclude(store, module, steps, first, errors, result)
    if devices is not None and first is not None and first == devices.first_per_device:
        blame_partitioner(result, steps, first)
    if first is None and result.kept_passes and devices is None:
        measure_kept_passes(replayer, plan, expected, result, log)
    elif first is None and result.kept_passes and devices is not None:
        result.warnings.append(
            f"kept on, as the module does not compile without them: {', '.join(result.kept_passes)}; what they do to the "
            f"numbers is not measured on {devices.devices} devices, so 'no step diverges' does not clear them"
        )
    if first is None and result.arguments == "fake":
        result.warnings.append(FAKE_DATA_HINT)
    refusal = instruction_search_refusal(devices, first) if devices is not None and first is not None else None
    if options.ops and refusal is not None:
        result.warnings.append(refusal)
    elif options.ops and first is not None:
        if isinstance(replayer, ShardedReplayer):  # past the partitioner (else refused above): values are per-device
            replayer.texts_per_device = (
                devices is not None and devices.first_per_device is not None and first > devices.first_per_device
            )
        result.first_move = locate_first_move(replayer, steps[first], steps[first - 1] if first else before, plan, log)
    result.wall_s = time.perf_counter() - started
    return result


#: At most this many passes are kept enabled for the module to compile; past it the search gives up.
_MAX_NEEDED = 12


def _passes_needed(disabled: list[str], compile_error: Callable[[list[str]], str | None]) -> list[str] | None:
    """The passes (of ``disabled``) the module cannot compile without: lowering passes such as dot_decomposer or
    gather_simplifier, which rewrite what the backend has no emitter for. Each is found by a binary search for
    the shortest prefix of the rest whose re-enabling makes the module compile (its last pass is needed): about
    log2(n) compiles per needed pass. None when the module does not compile even with every pass enabled.
    (Guessing from XLA's complaint, 'HLO opcode `scatter` is not supported', kept twice as many passes, one of
    which made a later step abort XLA.)"""
    seen: dict[tuple[str, ...], str | None] = {}

    def error_with(off: list[str]) -> str | None:
        if tuple(off) not in seen:
            seen[tuple(off)] = compile_error(off)
        return seen[tuple(off)]

    needed: list[str] = []
    while error_with(candidates := [n for n in disabled if n not in needed]) is not None:
        if not candidates or len(needed) >= _MAX_NEEDED or error_with([]) is not None:
            return None
        low, high = 0, len(candidates)  # re-enabling candidates[:high] compiles; candidates[:low] does not
        while high - low > 1:
            middle = (low + high) // 2
            if error_with(candidates[middle:]) is None:
                high = middle
            else:
                low = middle
        needed.append(candidates[high - 1])
    return needed


def _describe_recompile(options: BisectOptions, disabled: list[str]) -> str:
    if options.recompile == "all":
        return "every HLO pass disabled"
    return f"{len(disabled)} passes disabled" if disabled else "the full pipeline (passes may apply again)"


def _reference_outputs(replayer: StepReplayer, plan: BisectPlan, result: BisectResult, log: Log) -> tuple[list, bool]:
    """The outputs each step is compared with, and whether the before_optimizations module already differs from them."""
    options, before = plan.options, plan.before
    platform = pjrt.Platform(options.reference_platform) if options.reference_platform else None
    outputs, _, error = replayer.run(before.digest, before.path, platform)
    if outputs is None:
        raise EngineError(f"the before_optimizations module does not replay: {error}")
    if platform is not None:
        replayer.outputs.pop(before.digest, None)
    if options.reference == "before":
        return outputs, False
    snapshot = replayer.snapshot()
    if snapshot is None or snapshot.result is None:
        raise InputError(
            f"{replayer.module.label} has no snapshot with a recorded result",
            "capture with dump.snapshots: true, or use --reference before",
        )
    if replayer.arguments is not snapshot.arguments:
        raise InputError("the snapshot's arguments do not fit the module", "use --reference before")
    expected = flatten(snapshot.result)
    start = plan.compare(outputs, expected, "snapshot result")
    entry = StepError(
        -1, "before_optimizations", None, None, before.path, start.max_abs_error, start.max_rel_error, not start.matched
    )
    result.steps.append(entry)
    if not start.matched:
        result.warnings.append(
            f"the before_optimizations module already differs from the snapshot result (max abs error {start.max_abs_error:.3g}): "
            "looking for the first step that matches it"
        )
        log(result.warnings[-1])
    return expected, not start.matched


def _conclude(
    store: LocalStore,
    module: ModuleInfo,
    steps: list[PassStep],
    first: int | None,
    errors: dict[int, StepError],
    result: BisectResult,
) -> None:
    measured = [e for e in errors.values() if e.max_abs_error is not None]
    if first is None:
        result.verdict = "no-divergence"
        result.largest = max(measured, key=lambda e: (e.max_abs_error, e.max_rel_error or 0.0), default=None)
        return
    culprit = steps[first]
    result.verdict = "diverged"
    result.culprit_step, result.culprit_pass, result.culprit_pipeline = culprit.step, culprit.after_pass, culprit.pipeline
    runs = [s.step for s in steps if s.after_pass == culprit.after_pass]
    result.culprit_run, result.culprit_runs = runs.index(culprit.step) + 1, len(runs)
    result.error_after = errors[first]
    start = next((e for e in result.steps if e.step == -1), None) or StepError(
        -1, "before_optimizations", None, None, "", 0.0, 0.0, False, flipped=False
    )
    result.error_before = errors.get(first - 1) or start
    try:
        diff = pass_diff(store, module, to_step=culprit.step)
    except InputError as exc:
        result.warnings.append(f"no diff of the culprit step: {exc.message}")
        return
    result.diff_summary = diff.summary.lines()
    result.diff_unified = diff.unified[:_MAX_DIFF_LINES]
