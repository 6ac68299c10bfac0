"""What a bisection reports: :class:`BisectResult`, for both modes, JSON-ready and printable."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from xlarun.errors import ExitCode

#: ``diverged``: a step (or pass) past the tolerance was found; ``no-divergence``: none was;
#: ``inconclusive``: the search could not name one pass (several needed together, or replays failed).
VERDICTS = ("diverged", "no-divergence", "inconclusive")
#: What to do when nothing diverged on seeded fake arguments (the result's last warning then).
FAKE_DATA_HINT = (
    "the steps ran on seeded fake arguments, which may miss the values where a pass matters: record the real ones "
    "(dump.snapshots: true for a one-device module; for a partitioned one, which XLA writes no snapshot for, call "
    "xlarun.record_arguments(step, *args) in the job) and bisect again"
)


@dataclass
class StepError:
    """The error of one replayed pass step (replay mode) against the reference."""

    step: int  # -1: the before_optimizations module itself
    label: str  # "after algsimp (simplification)"
    after_pass: str | None
    pipeline: str | None
    path: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    #: True past the tolerance, False within it, None when the step could not be replayed.
    diverged: bool | None = None
    error: str | None = None
    compile_s: float | None = None
    #: The verdict differs from the start's (the before_optimizations module's against the reference).
    flipped: bool | None = None
    #: The step's dump is the same module as an earlier step's: its outputs were reused.
    reused: bool = False
    #: Devices it ran on: N for a partitioned module's per-device steps (after the SPMD partitioner).
    devices: int = 1


@dataclass
class RerunTrial:
    """One rerun of the job (rerun mode) with some passes disabled."""

    run_id: str | None
    disabled: list[str]
    role: str  # baseline | all | subset
    value: float | None = None  # the number the check read, or the exit code
    status: str | None = None
    flipped: bool | None = None  # None: the check could not be read (no number printed)
    elapsed_s: float | None = None


@dataclass
class BisectResult:
    """The outcome of one bisection."""

    mode: str  # replay | rerun
    subject: str  # a module REF (replay mode) or a spec path (rerun mode)
    verdict: str = "no-divergence"
    culprit_pass: str | None = None
    culprit_pipeline: str | None = None
    #: Which run of the culprit pass it was, of how many in the module's timeline (algsimp runs many times).
    culprit_run: int | None = None
    culprit_runs: int | None = None
    culprit_step: int | None = None
    #: The errors just before and at the culprit step (replay mode).
    error_before: StepError | None = None
    error_after: StepError | None = None
    #: The largest error seen, when nothing diverged.
    largest: StepError | None = None
    reference: str = "before_optimizations"
    arguments: str = "fake"
    recompile: str = "timeline"
    #: Passes disabled when each step was recompiled (so the rest of the pipeline leaves it as it is).
    disabled_passes: list[str] = field(default_factory=list)
    #: Timeline passes left enabled because the module does not compile without them (found by trying).
    kept_passes: list[str] = field(default_factory=list)
    abs_tolerance: float = 1e-5
    rel_tolerance: float = 1e-5
    search: str = "binary"
    steps_total: int = 0
    steps: list[StepError] = field(default_factory=list)
    #: The culprit pass's structural diff (``xlarun diff --pass``): summary lines and the unified diff.
    diff_summary: list[str] = field(default_factory=list)
    diff_unified: list[str] = field(default_factory=list)
    #: The culprit step's first instruction whose value moves (:class:`~xlarun.bisect.first_move.FirstMove` as a dict).
    first_move: dict | None = None
    # rerun mode
    check: str | None = None
    baseline: float | None = None
    trials: list[RerunTrial] = field(default_factory=list)
    #: The smallest set of passes found whose disabling flips the check (one pass when the search ends well).
    culprit_set: list[str] = field(default_factory=list)
    #: Every pass whose disabling alone flips the check (rerun mode), in timeline order; ``culprit_pass`` is the first found.
    culprit_passes: list[str] = field(default_factory=list)
    replays: int = 0
    reruns: int = 0
    wall_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    run_id: str | None = None
    module_id: int | None = None
    #: Devices the module is partitioned for; its steps from ``per_device_from_step`` on ran on that many.
    devices: int = 1
    per_device_from_step: int | None = None
    #: Devices the reference (and the steps before the partitioner) ran on: 1, or N for per-device code.
    reference_devices: int = 1

    @property
    def exit_code(self) -> ExitCode:
        """0 when nothing diverged, 1 when a pass changed the numbers (like a replay mismatch), 3 inconclusive."""
        return {"diverged": ExitCode.FAILED, "inconclusive": ExitCode.ENVIRONMENT}.get(self.verdict, ExitCode.OK)

    def to_dict(self) -> dict:
        """A JSON-serializable dict (infinite errors become the string ``"inf"``)."""
        return _finite(asdict(self)) | {"exit_code": int(self.exit_code)}

    @classmethod
    def from_dict(cls, data: dict) -> BisectResult:
        data = _infinite(data)
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        for key in ("error_before", "error_after", "largest"):
            if values.get(key) is not None:
                values[key] = StepError(**values[key])
        values["steps"] = [StepError(**s) for s in values.get("steps", [])]
        values["trials"] = [RerunTrial(**t) for t in values.get("trials", [])]
        return cls(**values)

    def run_of(self) -> str:
        """``, run 2 of 5`` when the culprit pass runs more than once in the timeline, else empty."""
        if self.culprit_run and self.culprit_runs and self.culprit_runs > 1:
            return f", run {self.culprit_run} of {self.culprit_runs}"
        return ""

    def headline(self) -> str:
        """One line: what the bisection found."""
        if self.verdict == "diverged" and self.mode == "replay":
            after = self.error_after
            return (
                f"the numbers change at step {self.culprit_step}: pass {self.culprit_pass}{self.run_of()} ({self.culprit_pipeline})"
                f"{self._on_devices()}; "
                f"max abs error {_num(self.error_before.max_abs_error if self.error_before else 0.0)} -> {_num(after.max_abs_error if after else None)}"
            )
        if self.verdict == "diverged":
            others = [p for p in self.culprit_passes if p != self.culprit_pass]
            also = f"; so does disabling {', '.join(others)} alone" if others else ""
            return f"disabling pass {self.culprit_pass} flips the check ({self.check}){also} in {self.reruns} reruns"
        if self.verdict == "inconclusive":
            if self.culprit_set:
                return f"no single pass: disabling {', '.join(self.culprit_set)} together flips the check, no one of them alone"
            return "inconclusive: " + (self.warnings[-1] if self.warnings else "the search could not finish")
        if self.mode == "replay":
            largest = self.largest
            where = f" (step {largest.step}, {largest.label})" if largest else ""
            # seeded fake arguments may miss the values where a pass matters: say so in the verdict itself
            verdict = "on fake data: not a clean bill" if self.arguments == "fake" else "past the tolerance"
            return (
                f"no step diverges {verdict}{self._on_devices()}; largest error seen: "
                f"abs {_num(largest.max_abs_error if largest else 0.0)}{where}"
            )
        return "disabling the passes the timeline names does not flip the check: no pass changed the result"

    def _on_devices(self) -> str:
        return f" (partitioned module, steps run on {self.devices} devices)" if self.devices > 1 else ""


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _infinite(value: Any) -> Any:
    if value == "inf":
        return math.inf
    if isinstance(value, dict):
        return {k: _infinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_infinite(v) for v in value]
    return value
