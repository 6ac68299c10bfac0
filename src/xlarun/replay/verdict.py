"""The verdict stage: what a replay concluded from its comparisons, with notes on what its outputs hold.

The verdict (``match``, ``mismatch``, ``ran``, ``engine-error``), the outputs summarized (and saved with
``--save-outputs``), NaN and Inf named, and instructions that draw random numbers named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xlarun.errors import EngineError
from xlarun.replay.compare import Comparison
from xlarun.replay.compiled import Built
from xlarun.replay.literals import describe
from xlarun.replay.plan import ReplayPlan
from xlarun.replay.recompile import Compiled
from xlarun.replay.result import OutputSummary, ReplayResult

Log = Callable[[str], None]
#: Opcodes whose numbers differ from compile to compile (XLA seeds ``rng`` per executable).
RANDOM_OPCODES = ("rng", "rng-get-and-update-state")


def failed(result: ReplayResult, exc: EngineError, log: Log) -> ReplayResult:
    """``result`` as an ``engine-error``: XLA could not compile or run what the plan asked."""
    result.verdict, result.error = "engine-error", exc.one_line()
    log(f"engine error: {result.error}")
    return result


def conclude_replay(plan: ReplayPlan, built: Built, outputs: list, comparisons: list[Comparison]) -> ReplayResult:
    """The plan's result with its verdict, notes and outputs filled in. Raises EngineError when
    ``--save-outputs`` cannot be written."""
    result, options, log = plan.result, plan.options, plan.log
    conclude(result, comparisons, log)
    if options.save_outputs:  # on N devices: the global outputs, put back together from the devices' pieces
        _save_outputs(options.save_outputs, outputs)
    note_nonfinite(result, outputs, log)
    if isinstance(built, Compiled):
        _note_random(result, built.opcodes, log)
    result.outputs = [
        OutputSummary(i, describe(out), literal_text(out) if options.print_literals and out is not None else None)
        for i, out in enumerate(outputs)
    ]
    return result


def conclude(result: ReplayResult, comparisons: list[Comparison], log: Log) -> None:
    if not comparisons:
        result.verdict = "ran"
        log("ran; nothing to compare against (no snapshot result, no reference platform)")
        return
    result.compared_with = [c.against for c in comparisons]
    result.max_abs_error = max(c.max_abs_error for c in comparisons)
    result.max_rel_error = max(c.max_rel_error for c in comparisons)
    result.verdict = "match" if all(c.matched for c in comparisons) else "mismatch"
    for comparison in comparisons:
        log(comparison.summary())
        result.mismatches.extend(comparison.problems)


def _save_outputs(path: str, outputs: list) -> None:
    """The outputs as ``output_N`` arrays of an .npz (ML floats widened to float32: exact, and readable anywhere)."""
    arrays = {}
    for i, out in enumerate(outputs):
        if out is not None:
            value = np.asarray(out)
            arrays[f"output_{i}"] = value.astype(np.float32) if _is_ml_float(value.dtype) else value
    try:
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as its allow_pickle
    except OSError as exc:
        raise EngineError(f"cannot write the outputs to {path}: {exc.strerror or exc}") from None


def note_nonfinite(result: ReplayResult, outputs: list, log: Log) -> None:
    """Say which outputs hold NaN or Inf: a match of NaN with NaN is still worth a look."""
    for index, value in enumerate(outputs):
        counts = _nonfinite_counts(value)
        if counts:
            result.nonfinite_outputs.append(f"output {index} {describe(value)}: {counts}")
    if not result.nonfinite_outputs:
        return
    message = f"outputs hold NaN or Inf: {'; '.join(result.nonfinite_outputs[:3])}" + (
        f" (and {len(result.nonfinite_outputs) - 3} more)" if len(result.nonfinite_outputs) > 3 else ""
    )
    if result.arguments == "fake":
        message += (
            " - the arguments are fake data, uniform in [-1, 1): cholesky, log, sqrt, division and the like give "
            "NaN or Inf on values their real inputs never take; replay a snapshot for the real ones"
        )
    result.warnings.append(message)
    log(message)


def _nonfinite_counts(value: Any) -> str | None:
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype.kind not in "fc" and not _is_ml_float(array.dtype):
        return None
    wide = array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)
    nan, inf = int(np.isnan(wide).sum()), int(np.isinf(wide).sum())
    parts = [f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else ""]
    return f"{' and '.join(p for p in parts if p)} of {array.size}" if nan or inf else None


def _is_ml_float(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and "float" in dtype.name


def _note_random(result: ReplayResult, opcodes: dict[str, str], log: Log) -> None:
    """Name the instructions that draw random numbers: two compiles of them draw different ones."""
    result.random_instructions = [f"{opcodes[op]} ({op})" for op in RANDOM_OPCODES if op in opcodes]
    if not result.random_instructions:
        return
    message = f"the module draws random numbers ({', '.join(result.random_instructions)}): XLA seeds rng per compile"
    if result.verdict == "mismatch":
        message += ", so a mismatch against another compile (a snapshot's run, --reference-platform) is expected"
    result.warnings.append(message)
    log(message)


def literal_text(value: np.ndarray) -> str:
    return np.array2string(np.asarray(value), threshold=10_000, max_line_width=120)
