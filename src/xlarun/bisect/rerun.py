"""Rerun mode: rerun the whole job with passes disabled until one pass flips the user's check.

For what replay cannot reach (a GPU or IPU job, a whole training run, a container). The job is
captured as it is (twice: a check that disagrees with itself is refused as flaky), once with
per-pass dumps so that its modules' timelines name the candidate passes. Then it is rerun with
``--xla_disable_hlo_passes=...`` added to the spec's ``dump.extra_xla_flags``: all candidates
first (if that does not flip the check, no pass does), then delta debugging (ddmin: halves,
finer chunks, complements) down to one pass. Then the candidates left without the passes found so far
are disabled together, and while that still flips the check, searched the same way: every pass whose
disabling alone flips the check is reported (``culprit_passes``), not only the first found. Every rerun is an ordinary run of the store, made
through the batch machinery (``jobs`` at a time), tagged ``bisect: <id>`` and ``bisect_role``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.bisect.bisect_plan import NEVER_DISABLED, changing_pass_names
from xlarun.bisect.bisect_result import BisectResult, RerunTrial
from xlarun.errors import InputError, XlarunError

if TYPE_CHECKING:
    from xlarun.capture.spec_yaml import LoadedSpec
    from xlarun.store.facade import LocalStore

Log = Callable[[str], None]
_DISABLE = "--xla_disable_hlo_passes="


class FlakyCheck(XlarunError):
    """The check gives different answers on the same job: a bisection over it would be noise."""


@dataclass
class Check:
    """How a run is judged: its exit code, or a number its output prints."""

    text: str
    pattern: re.Pattern | None  # None: the exit code

    @classmethod
    def parse(cls, text: str) -> Check:
        if text == "exit":
            return cls(text, None)
        try:
            pattern = re.compile(text, re.MULTILINE)
        except re.error as exc:
            raise InputError(
                f"--check {text!r} is not a regular expression: {exc}",
                "give 'exit' or a regex whose first group is a number, e.g. 'loss (\\S+)'",
            ) from None
        return cls(text, pattern)

    def read(self, store: LocalStore, run_id: str, exit_code: int | None) -> float | None:
        """The value the check judges: the exit code, or the number the last match captured (None: nothing matched)."""
        if self.pattern is None:
            return None if exit_code is None else float(exit_code)
        output = store.read_log(run_id, "stdout") + "\n" + store.read_log(run_id, "stderr")
        matches = list(self.pattern.finditer(output))
        if not matches:
            return None
        last = matches[-1]
        try:
            return float(last.group(1) if last.groups() else last.group(0))
        except ValueError:
            return None

    def same(self, baseline: float, value: float | None, abs_tol: float, rel_tol: float) -> bool | None:
        """Whether ``value`` agrees with the baseline (None: it could not be read)."""
        if self.pattern is None:
            return (value == 0) == (baseline == 0) if value is not None else False  # no exit code: the job did not end well
        if value is None:
            return None
        if math.isnan(baseline) or math.isnan(value):
            return math.isnan(baseline) and math.isnan(value)
        diff = abs(value - baseline)
        return diff <= abs_tol or (baseline != 0 and diff / abs(baseline) <= rel_tol)


def bisect_rerun(
    spec: str | Path | LoadedSpec,
    store: LocalStore,
    check: str,
    *,
    abs_tolerance: float = 1e-5,
    rel_tolerance: float = 1e-5,
    jobs: int = 1,
    module: str | None = None,
    repeat: int = 2,
    sink: Log | None = None,
) -> BisectResult:
    """Find the one pass whose disabling flips ``check`` ('exit' or a regex capturing a number) on the spec's job."""
    from xlarun.batch import new_batch_id
    from xlarun.capture.spec_yaml import LoadedSpec, load_spec

    log = sink or (lambda _line: None)
    started = time.perf_counter()
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    judge = Check.parse(check)
    if repeat < 2:
        raise InputError("--repeat must be at least 2: the baseline is repeated to catch a flaky check")
    bisect_id = new_batch_id()
    result = BisectResult(
        "rerun",
        str(loaded.path),
        check=check,
        abs_tolerance=abs_tolerance,
        rel_tolerance=rel_tolerance,
        search="ddmin",
        reference="baseline run",
    )
    runner = _Reruns(loaded, store, judge, result, bisect_id, jobs, log)
    log(f"bisection {bisect_id}: {repeat} baseline runs (the first with per-pass dumps)")
    baseline = runner.baseline(repeat)
    result.run_id = baseline.run_id
    candidates, result.module_id = _candidate_passes(store, baseline.run_id, module)
    result.disabled_passes = candidates
    log(f"baseline {judge.text}: {result.baseline:g}; {len(candidates)} candidate passes from the timeline")
    everything = runner.trials([candidates], "all")[0]
    if everything.flipped is False:
        result.verdict = "no-divergence"
    else:
        if everything.flipped is None:  # e.g. XLA aborts without some pass: smaller subsets may still run
            result.warnings.append(
                f"the job printed no result with all {len(candidates)} candidate passes disabled (run {everything.run_id}); searching subsets"
            )
            log(result.warnings[-1])
        _ddmin(candidates, runner, result, jobs)
        if result.verdict == "diverged":
            _other_culprits(candidates, runner, result, jobs)
    result.reruns = sum(1 for t in result.trials if t.role != "baseline")
    result.wall_s = time.perf_counter() - started
    return result


class _Reruns:
    """Runs trials of the job through the batch machinery and judges them."""

    def __init__(
        self, loaded: LoadedSpec, store: LocalStore, judge: Check, result: BisectResult, bisect_id: str, jobs: int, log: Log
    ):
        self.loaded, self.store, self.judge, self.result, self.bisect_id, self.jobs, self.log = (
            loaded,
            store,
            judge,
            result,
            bisect_id,
            jobs,
            log,
        )
        self.seen: dict[tuple[str, ...], RerunTrial] = {}

    def _cell(self, disabled: list[str], role: str, dumps: bool) -> Any:
        spec = self.loaded.spec
        extra = [f for f in spec.dump.extra_xla_flags if not f.startswith(_DISABLE)]
        already = [f[len(_DISABLE) :] for f in spec.dump.extra_xla_flags if f.startswith(_DISABLE)]
        names = [n for n in ",".join(already).split(",") if n] + disabled
        if names:
            extra.append(_DISABLE + ",".join(dict.fromkeys(names)))
        dump = spec.dump.model_copy(update={"extra_xla_flags": extra, **({} if dumps else {"pass_re": None, "snapshots": False})})
        if dumps and not dump.pass_re:
            dump = dump.model_copy(update={"pass_re": ".*", "formats": list(dict.fromkeys([*dump.formats, "text"]))})
        tags = {**spec.tags, "bisect": self.bisect_id, "bisect_role": role}
        label = {"disabled": ",".join(disabled) if disabled else "-"} if role != "baseline" else {"baseline": role}
        return dataclasses.replace(self.loaded, spec=spec.model_copy(update={"dump": dump, "tags": tags}), matrix_values=label)

    def _run(self, cells: list, roles: list[str], disabled: list[list[str]]) -> list[RerunTrial]:
        from xlarun.batch import run_batch

        batch = run_batch(cells, self.store, jobs=self.jobs, batch_id=self.bisect_id, fail_fast=False)
        if batch.interrupted:
            raise KeyboardInterrupt
        trials = []
        for outcome, role, names in zip(batch.cells, roles, disabled, strict=True):  # one outcome per cell
            capture = outcome.result
            if capture is None:
                raise XlarunError(f"a rerun could not be started: {outcome.error}")
            value = self.judge.read(self.store, capture.run_id, capture.exit_code)
            trials.append(RerunTrial(capture.run_id, names, role, value, capture.status.value, None, outcome.elapsed_s))
        return trials

    def baseline(self, repeat: int) -> Any:
        trials = self._run(
            [self._cell([], "baseline", dumps=i == 0) for i in range(repeat)], ["baseline"] * repeat, [[]] * repeat
        )
        self.result.trials.extend(trials)
        first = trials[0]
        if first.value is None:
            what = (
                "exited without an exit code" if self.judge.pattern is None else f"printed nothing matching {self.judge.text!r}"
            )
            raise InputError(
                f"the baseline run {first.run_id} {what}", f"`xlarun logs {first.run_id}` shows its output; fix --check"
            )
        self.result.baseline = first.value
        for other in trials[1:]:
            if not self.judge.same(first.value, other.value, self.result.abs_tolerance, self.result.rel_tolerance):
                raise FlakyCheck(
                    f"the check is flaky: the same job gave {first.value:g} (run {first.run_id}) and {other.value} (run {other.run_id})",
                    "make the job deterministic (fixed seeds, XLA_FLAGS=--xla_cpu_enable_fast_math=false), or loosen --tolerance",
                )
        return first

    def trials(self, subsets: list[list[str]], role: str) -> list[RerunTrial]:
        """Judge the job with each subset disabled; subsets tried before are not rerun."""
        fresh = [s for s in dict.fromkeys(tuple(s) for s in subsets) if s not in self.seen]
        baseline = self.result.baseline
        assert baseline is not None, "baseline() ran first"
        if fresh:
            self.log(f"{len(fresh)} rerun(s): " + "; ".join(_short(list(s)) for s in fresh))
            for trial in self._run(
                [self._cell(list(s), role, dumps=False) for s in fresh], [role] * len(fresh), [list(s) for s in fresh]
            ):
                same = self.judge.same(baseline, trial.value, self.result.abs_tolerance, self.result.rel_tolerance)
                trial.flipped = None if same is None else not same
                self.log(
                    f"  disabled {_short(trial.disabled)}: {trial.value} -> "
                    + {True: "FLIPPED", False: "same", None: "unreadable"}[trial.flipped]
                )
                self.result.trials.append(trial)
                self.seen[tuple(trial.disabled)] = trial
        return [self.seen[tuple(s)] for s in subsets]


def _ddmin(candidates: list[str], runner: _Reruns, result: BisectResult, jobs: int) -> None:
    """Delta debugging down to a set of passes none of whose parts flips the check alone (ideally one pass)."""
    current = _narrow(candidates, runner, jobs)
    result.culprit_set = current
    verified = runner.seen.get(tuple(current))
    if len(current) == 1 and verified is not None and verified.flipped:
        result.verdict, result.culprit_pass = "diverged", current[0]
        result.culprit_passes = [current[0]]
    else:
        result.verdict = "inconclusive"


def _other_culprits(candidates: list[str], runner: _Reruns, result: BisectResult, jobs: int) -> None:
    """Add to ``result.culprit_passes`` every other pass whose disabling alone flips the check: the candidates
    without the passes found so far are disabled together, and while that flips, narrowed down to one more."""
    found = list(result.culprit_passes)
    while True:
        rest = [c for c in candidates if c not in found]
        if not rest or not runner.trials([rest], "rest")[0].flipped:
            break
        narrowed = _narrow(rest, runner, jobs)
        verified = runner.seen.get(tuple(narrowed))
        if len(narrowed) != 1 or verified is None or not verified.flipped:
            break  # only several passes together flip it: not one more single culprit
        found.append(narrowed[0])
    # a single pass tried on the way (a ddmin part of one) that flipped is one too
    singles = [t.disabled[0] for t in runner.seen.values() if len(t.disabled) == 1 and t.flipped]
    result.culprit_passes = [c for c in candidates if c in found or c in singles]


def _narrow(candidates: list[str], runner: _Reruns, jobs: int) -> list[str]:
    """ddmin over ``candidates`` (whose disabling together flips the check): the smallest flipping set it reaches."""
    current = list(candidates)
    chunks = max(2, min(jobs, len(current)))
    while len(current) > 1:
        parts = _split(current, chunks)
        hit = next((t for t in runner.trials(parts, "subset") if t.flipped), None)
        if hit is not None:
            current, chunks = hit.disabled, max(2, min(jobs, len(hit.disabled)))
            continue
        if chunks > 2:
            complements = [[p for p in current if p not in part] for part in parts]
            hit = next((t for t in runner.trials(complements, "subset") if t.flipped), None)
            if hit is not None:
                current, chunks = hit.disabled, max(chunks - 1, 2)
                continue
        if chunks >= len(current):
            break
        chunks = min(len(current), chunks * 2)
    return current


def _split(items: list[str], parts: int) -> list[list[str]]:
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def _candidate_passes(store: LocalStore, run_id: str, module_ref: str | None) -> tuple[list[str], int | None]:
    """The passes that changed a module in its timeline: of one module (``module_ref``), else of every module of the run."""
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps

    index = store.index
    if module_ref:
        modules = [resolve_module(index, module_ref, run=run_id)]
    else:
        modules = [index.module(run_id, m.module_id) for m in index.modules(run_id)]
    names: list[str] = []
    for module in modules:
        names.extend(changing_pass_names(pass_steps(module)))
    names = [n for n in dict.fromkeys(names) if n not in NEVER_DISABLED]
    if not names:
        raise InputError(
            f"the baseline run {run_id} has no per-pass dumps: no pass names to disable",
            "no pass changed a module, or the spec lacks dump.formats: [text] (xlarun sets dump.pass_re for the baseline)",
        )
    return names, modules[0].module_id if module_ref else None


def _short(names: list[str]) -> str:
    return ",".join(names) if len(names) <= 3 else f"{', '.join(names[:2])} and {len(names) - 2} more"
