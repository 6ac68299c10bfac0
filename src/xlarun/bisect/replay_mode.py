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
from dataclasses import dataclass, field

from ..diff import PassStep, pass_diff, pass_steps
from ..errors import EngineError, InputError
from ..replay import pjrt
from ..replay.compare import compare_outputs
from ..replay.deoptimize import deoptimize_hlo_text
from ..replay.fakedata import fake_arguments
from ..replay.literals import describe, flatten
from ..replay.sources import ELIDED_CONSTANT, SNAPSHOT, entry_parameter_shapes, load_source
from .result import BisectResult, StepError

Log = Callable[[str], None]
#: How each step is recompiled: ``timeline`` disables every pass the timeline names, ``all`` every
#: HLO pass (``xla_disable_all_hlo_passes``), ``full`` none (the pipeline applies its passes again).
RECOMPILE_MODES = ("timeline", "all", "full")
REFERENCES = ("before", "snapshot")
_NOT_PASSES = {"pipeline-start", "pipeline-end"}
#: Passes a program cannot run without (measured, jax 0.10.2 CPU): without sharding-remover a JAX program
#: calls a 'Sharding' custom call the host has no kernel for; without copy-insertion buffer assignment
#: fails on parameters or constants that are outputs. They move no numbers, so they are never disabled.
NEVER_DISABLED = ("sharding-remover", "copy-insertion", "flatten-call-graph", "layout-assignment")
_MAX_DIFF_LINES = 400


@dataclass
class BisectOptions:
    """What a replay-mode bisection is asked to do."""

    #: ``before``: the before_optimizations module's outputs; ``snapshot``: the snapshot's recorded result.
    reference: str = "before"
    #: Run the reference on this platform instead (the steps run on ``platform``).
    reference_platform: str | None = None
    platform: str = "cpu"
    #: Stricter than replay's 1e-3: a pass that moves a sum by 1e-4 is what a bisection looks for.
    abs_tolerance: float = 1e-5
    rel_tolerance: float = 1e-5
    #: Replay every step instead of a binary search (which assumes that once past the tolerance, later steps stay past it).
    linear: bool = False
    recompile: str = "timeline"
    #: ``auto`` (the snapshot's arguments when there is one), ``snapshot`` or ``fake``.
    inputs: str = "auto"
    seed: int = 0
    extra_disabled: list[str] = field(default_factory=list)

    def validate(self) -> BisectOptions:
        for name, allowed in (("reference", REFERENCES), ("recompile", RECOMPILE_MODES), ("inputs", ("auto", "snapshot", "fake"))):
            if getattr(self, name) not in allowed:
                raise InputError(f"unknown {name} {getattr(self, name)!r}", f"use one of: {', '.join(allowed)}")
        if self.abs_tolerance < 0 or self.rel_tolerance < 0:
            raise InputError("tolerances cannot be negative")
        return self

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def timeline_pass_names(steps: list[PassStep]) -> list[str]:
    """Every pass the timeline names (after or before a dump), in the order they first appear."""
    names = []
    for step in steps:
        for name in (step.after_pass, step.before_pass):
            if name and name not in _NOT_PASSES:
                names.append(name)
    return list(dict.fromkeys(names))


def changing_pass_names(steps: list[PassStep]) -> list[str]:
    """The passes that changed the module (their dump differs from the one before), in timeline order.

    Only these can be a single culprit: the pipeline is deterministic, so disabling a pass that left
    every module as it was changes nothing on its own.
    """
    return list(dict.fromkeys(s.after_pass for s in steps if s.changed and s.after_pass and s.after_pass not in _NOT_PASSES))


def refuse_unbisectable(module, steps: list[PassStep]) -> None:
    """Raise InputError when the module lacks what a replay bisection needs."""
    if not steps:
        raise InputError(
            f"{module.label} was captured without per-pass dumps: there is no pass timeline to bisect",
            "set dump.pass_re: '.*' and dump.formats: [text] in the spec (dump.large_constants: true and dump.snapshots: true help too), capture again",
        )
    if module.elided_constants:
        raise InputError(
            f"{module.label} was dumped without large constants: its {{...}} constants would be replayed as garbage",
            "set dump.large_constants: true in the spec and capture again",
        )


class _Replayer:
    """Compiles and runs step dumps on fixed arguments; remembers outputs by dump digest."""

    def __init__(self, store, module, options: BisectOptions, debug_options: dict, log: Log):
        self.store, self.module, self.options, self.debug_options, self.log = store, module, options, debug_options, log
        self.platform = pjrt.Platform(options.platform)
        self.outputs: dict[str, tuple[list | None, float | None, str | None]] = {}
        self.replays = 0
        self.arguments: list | None = None

    def text(self, path: str) -> str:
        text = self.store.read_file(self.module.run_id, path).decode("utf-8", errors="replace")
        if ELIDED_CONSTANT.search(text):
            raise InputError(f"{path} holds elided constants ({{...}}), which replay would fill with garbage",
                             "set dump.large_constants: true in the spec and capture again")
        return text

    def run(self, digest: str, path: str, platform=None) -> tuple[list | None, float | None, str | None]:
        """(outputs, compile seconds, error) of the dump; cached by digest on the main platform."""
        if platform is None and digest in self.outputs:
            return self.outputs[digest]
        target = platform or self.platform
        try:
            rewritten = deoptimize_hlo_text(self.text(path)).text  # fusions -> calls, layouts spelled out; no-op before fusion
            proto = pjrt.text_to_module_proto(rewritten)
            if self.arguments is None:
                self.arguments = self._arguments(proto)
            stablehlo = pjrt.module_proto_to_stablehlo(proto)
            pjrt.prepare_custom_calls(proto)
            compiled = target.compile(stablehlo, self.debug_options)
            raw, _ = compiled.run(compiled.upload(self.arguments))
            found = (compiled.download(raw), compiled.compile_s, None)
        except (EngineError, InputError) as exc:
            if isinstance(exc, InputError) and "elided constants" in exc.message:
                raise
            found = (None, None, exc.one_line())
        self.replays += 1
        if platform is None:
            self.outputs[digest] = found
        return found

    def _arguments(self, proto: bytes) -> list:
        snapshot = self.snapshot()
        if self.options.inputs == "snapshot" and snapshot is None:
            raise InputError(f"{self.module.label} has no snapshot", "capture with dump.snapshots: true, or use --inputs fake")
        if snapshot is not None and self.options.inputs != "fake":
            shapes = [s.hlo_text() for s in entry_parameter_shapes(proto)]
            if shapes == [describe(a) for a in snapshot.arguments]:
                return snapshot.arguments
            self.log(f"the snapshot's arguments do not fit the module's parameters ({', '.join(shapes)}); using fake data")
        return fake_arguments(entry_parameter_shapes(proto), self.options.seed)

    def snapshot(self):
        found = getattr(self, "_snapshot", False)
        if found is False:
            files = sorted(f.path for f in self.module.files if f.kind == "snapshot")
            found = None
            if files:
                source = load_source(files[0], self.store.read_file(self.module.run_id, files[0]))
                found = source if source.file_format == SNAPSHOT else None
            self._snapshot = found
        return found


def bisect_module(store, module, options: BisectOptions | None = None, sink: Log | None = None) -> BisectResult:
    """Find the first pass step of ``module`` whose outputs differ from the reference past the tolerance."""
    options = (options or BisectOptions()).validate()
    log = sink or (lambda _line: None)
    started = time.perf_counter()
    steps = pass_steps(module)
    refuse_unbisectable(module, steps)
    before = next((f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text"), None)
    if before is None:
        raise InputError(f"{module.label} has no before_optimizations text dump", "capture with dump.formats including text")
    debug_options, disabled = _debug_options(options, steps)
    replayer = _Replayer(store, module, options, debug_options, log)
    result = BisectResult(
        "replay", module.ref, reference=_reference_name(options), recompile=options.recompile, disabled_passes=disabled,
        abs_tolerance=options.abs_tolerance, rel_tolerance=options.rel_tolerance, search="linear" if options.linear else "binary",
        steps_total=len(steps), run_id=module.run_id, module_id=module.module_id,
    )
    log(f"{module.label}: {len(steps)} pass steps; recompiling each with {_describe_recompile(options, disabled)}")
    expected, start_diverged = _reference_outputs(replayer, before, options, result, log)
    result.arguments = "snapshot" if replayer.snapshot() is not None and replayer.arguments is replayer.snapshot().arguments else "fake"
    errors: dict[int, StepError] = {}

    def measure(index: int) -> StepError:
        if index in errors:
            return errors[index]
        step = steps[index]
        reused = step.digest in replayer.outputs
        outputs, compile_s, error = replayer.run(step.digest, step.path)
        entry = StepError(step.step, step.label, step.after_pass, step.pipeline, step.path, compile_s=compile_s, error=error, reused=reused)
        if outputs is not None:
            comparison = compare_outputs(outputs, expected, options.abs_tolerance, options.rel_tolerance, result.reference)
            entry.max_abs_error, entry.max_rel_error, entry.diverged = comparison.max_abs_error, comparison.max_rel_error, not comparison.matched
            entry.flipped = entry.diverged != start_diverged
        log(f"step {step.step:>3} {step.label}: " + (f"engine error: {error}" if error else
            f"max abs error {entry.max_abs_error:.3g}, rel {entry.max_rel_error:.3g}" + (" DIVERGED" if entry.diverged else "")))
        errors[index] = entry
        return entry

    first = _linear(measure, len(steps)) if options.linear else _binary(measure, len(steps))
    result.steps = result.steps + [errors[i] for i in sorted(errors)]
    result.replays = replayer.replays
    _conclude(store, module, steps, first, errors, result)
    result.wall_s = time.perf_counter() - started
    return result


def _debug_options(options: BisectOptions, steps: list[PassStep]) -> tuple[dict, list[str]]:
    if options.recompile == "all":
        return {"xla_disable_all_hlo_passes": True}, []
    disabled = [n for n in timeline_pass_names(steps) if n not in NEVER_DISABLED] if options.recompile == "timeline" else []
    disabled = list(dict.fromkeys(disabled + list(options.extra_disabled)))
    return ({"xla_disable_hlo_passes": ",".join(disabled)} if disabled else {}), disabled


def _describe_recompile(options: BisectOptions, disabled: list[str]) -> str:
    if options.recompile == "all":
        return "every HLO pass disabled"
    return f"{len(disabled)} passes disabled" if disabled else "the full pipeline (passes may apply again)"


def _reference_name(options: BisectOptions) -> str:
    if options.reference == "snapshot":
        return "snapshot result"
    return f"before_optimizations on {options.reference_platform}" if options.reference_platform else "before_optimizations"


def _reference_outputs(replayer: _Replayer, before, options: BisectOptions, result: BisectResult, log: Log) -> list:
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
        raise InputError(f"{replayer.module.label} has no snapshot with a recorded result", "capture with dump.snapshots: true, or use --reference before")
    if replayer.arguments is not snapshot.arguments:
        raise InputError("the snapshot's arguments do not fit the module", "use --reference before")
    expected = flatten(snapshot.result)
    start = compare_outputs(outputs, expected, options.abs_tolerance, options.rel_tolerance, "snapshot result")
    entry = StepError(-1, "before_optimizations", None, None, before.path, start.max_abs_error, start.max_rel_error, not start.matched)
    result.steps.append(entry)
    if not start.matched:
        result.warnings.append(
            f"the before_optimizations module already differs from the snapshot result (max abs error {start.max_abs_error:.3g}): "
            "looking for the first step that matches it"
        )
        log(result.warnings[-1])
    return expected, not start.matched


def _linear(measure: Callable[[int], StepError], count: int) -> int | None:
    first = None
    for index in range(count):
        if measure(index).flipped and first is None:
            first = index
    return first


def _binary(measure: Callable[[int], StepError], count: int) -> int | None:
    """The first index whose verdict differs from the start's, assuming it stays different after."""
    if count == 0 or not measure(count - 1).flipped:
        return None
    low, high = -1, count - 1  # low: as the start (-1: the reference), high: flipped
    while high - low > 1:
        middle = (low + high) // 2
        flipped = measure(middle).flipped
        if flipped is None:  # this step does not replay: scan what is left in order
            return next((i for i in range(low + 1, high) if measure(i).flipped), high)
        if flipped:
            high = middle
        else:
            low = middle
    return high


def _conclude(store, module, steps: list[PassStep], first: int | None, errors: dict[int, StepError], result: BisectResult) -> None:
    measured = [e for e in errors.values() if e.max_abs_error is not None]
    if first is None:
        result.verdict = "no-divergence"
        result.largest = max(measured, key=lambda e: (e.max_abs_error, e.max_rel_error or 0.0), default=None)
        return
    culprit = steps[first]
    result.verdict = "diverged"
    result.culprit_step, result.culprit_pass, result.culprit_pipeline = culprit.step, culprit.after_pass, culprit.pipeline
    result.error_after = errors[first]
    start = next((e for e in result.steps if e.step == -1), None) or StepError(-1, "before_optimizations", None, None, "", 0.0, 0.0, False, flipped=False)
    result.error_before = errors.get(first - 1) or start
    try:
        diff = pass_diff(store, module, to_step=culprit.step)
    except InputError as exc:
        result.warnings.append(f"no diff of the culprit step: {exc.message}")
        return
    result.diff_summary = diff.summary.lines()
    result.diff_unified = diff.unified[:_MAX_DIFF_LINES]
