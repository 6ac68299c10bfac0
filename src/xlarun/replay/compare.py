"""Compare replay outputs with a reference, element by element, the way XLA's literal comparison does.

For floating-point and complex elements (complex: real and imaginary parts compared as two
separate floats), with ``a`` the actual and ``e`` the expected value:

- ``abs_err = |a - e|``; ``rel_err = abs_err / |e|`` (``0`` when both are 0; undefined when only
  ``e`` is 0, and then only the absolute bound can pass the element);
- an element **matches** when ``abs_err <= abs_bound`` **or** ``rel_err <= rel_bound``
  (XLA's ``--abs_error_bound`` / ``--rel_error_bound``, both 1e-3 by default);
- NaN matches NaN; NaN against a number is a mismatch with infinite error;
- an infinity matches only the same infinity; any other pairing with inf is a mismatch.

Integers and pred must be equal (their errors are still reported). A different number of outputs,
shape or element type is a mismatch whatever the values. The reported maxima are over all
elements whose error is defined (``max_rel_error`` skips elements whose expected value is 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xlarun.replay.literals import describe


@dataclass
class Comparison:
    """The outcome of comparing all outputs with one reference."""

    against: str  # "snapshot result", "platform cpu"
    matched: bool = True
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    mismatched_elements: int = 0
    total_elements: int = 0
    #: Human-readable reasons: structural problems and the first few mismatching elements.
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        verdict = "match" if self.matched else "MISMATCH"
        if self.mismatched_elements:
            detail = f"{self.mismatched_elements}/{self.total_elements} elements differ"
        else:
            detail = self.problems[0] if self.problems else "all elements within bounds"
        return (
            f"{verdict} against {self.against}: {detail}, max abs error {self.max_abs_error:.3g}, "
            f"max rel error {self.max_rel_error:.3g}"
        )


_MAX_REPORTED = 5


def compare_outputs(actual: list, expected: list, abs_bound: float, rel_bound: float, against: str) -> Comparison:
    """Compare flat output lists (tuples already flattened) against one reference."""
    result = Comparison(against)
    if len(actual) != len(expected):
        result.matched = False
        result.problems.append(f"{len(actual)} outputs, but the {against} has {len(expected)}")
    for index, (a, e) in enumerate(zip(actual, expected, strict=False)):  # a count mismatch is reported above
        if a is None or e is None:  # a token has no value: it matches a token
            if (a is None) != (e is None):
                result.matched = False
                result.problems.append(f"output {index} is {describe(a)}, the {against} is {describe(e)}")
            continue
        _compare_one(index, np.asarray(a), np.asarray(e), abs_bound, rel_bound, result)
    return result


def _compare_one(index: int, a: np.ndarray, e: np.ndarray, abs_bound: float, rel_bound: float, out: Comparison) -> None:
    if a.shape != e.shape or a.dtype != e.dtype:
        out.matched = False
        out.problems.append(f"output {index} is {describe(a)}, the {out.against} is {describe(e)}")
        return
    out.total_elements += a.size
    if a.size == 0:
        return
    if a.dtype.kind == "c":
        parts = [(a.real, e.real), (a.imag, e.imag)]
    else:
        parts = [(a, e)]
    bad = np.zeros(a.shape, dtype=bool)
    for actual, expected in parts:
        exact = a.dtype.kind in "biu"
        abs_err, rel_err, part_bad = _element_errors(actual, expected, abs_bound, rel_bound, exact)
        bad |= part_bad
        out.max_abs_error = max(out.max_abs_error, _nanmax(abs_err))
        out.max_rel_error = max(out.max_rel_error, _nanmax(rel_err))
    count = int(bad.sum())
    if count:
        out.matched = False
        out.mismatched_elements += count
        # argwhere, not nonzero: it also indexes a scalar output (one empty position)
        for row in np.argwhere(bad)[: max(0, _MAX_REPORTED - len(out.problems))]:
            position = tuple(int(p) for p in row)
            where = ",".join(str(p) for p in position)
            out.problems.append(f"output {index} [{where}]: expected {e[position].item()!r}, got {a[position].item()!r}")


def _element_errors(actual: Any, expected: Any, abs_bound: Any, rel_bound: Any, exact: Any) -> Any:
    """Per-element absolute and relative errors, and which elements fail the bounds."""
    if exact:
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        return diff, _relative(diff, expected.astype(np.float64)), actual != expected
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    a_inf, e_inf = np.isinf(a), np.isinf(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
    same_special = (a_nan & e_nan) | (a_inf & e_inf & (a == e))
    any_special = a_nan | e_nan | a_inf | e_inf
    diff = np.where(same_special, 0.0, np.where(any_special, np.inf, diff))
    rel = _relative(diff, np.where(any_special, 1.0, e))
    with np.errstate(invalid="ignore"):
        ok = (diff <= abs_bound) | (rel <= rel_bound)
    return diff, rel, ~ok


def _relative(diff: np.ndarray, expected: np.ndarray) -> np.ndarray:
    magnitude = np.abs(expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / magnitude
    # both zero -> 0; expected zero but actual not -> undefined (NaN, skipped in maxima)
    return np.where(magnitude == 0, np.where(diff == 0, 0.0, np.nan), rel)


def _nanmax(values: np.ndarray) -> float:
    finite_or_inf = values[~np.isnan(values)]
    return float(finite_or_inf.max()) if finite_or_inf.size else 0.0
