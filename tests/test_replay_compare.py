"""Output comparison: XLA's abs-or-rel rule, NaN and inf, exact integers, structure."""

from __future__ import annotations

import numpy as np
import pytest

from xlarun.replay.compare import compare_outputs

ml_dtypes = pytest.importorskip("ml_dtypes")


def compare(actual, expected, abs_bound=1e-3, rel_bound=1e-3):
    return compare_outputs([np.asarray(actual)], [np.asarray(expected)], abs_bound, rel_bound, "snapshot result")


def test_an_element_passes_on_either_bound():
    # 100.05 vs 100: abs 0.05 > 1e-3 but rel 5e-4 <= 1e-3 -> ok; 1e-5 vs 0: abs ok, rel undefined
    result = compare(np.float32([100.05, 1e-5, 2.0]), np.float32([100, 0, 2.0]))
    assert result.matched and result.mismatched_elements == 0 and result.total_elements == 3
    assert result.max_abs_error == pytest.approx(0.05, rel=1e-3)
    assert result.max_rel_error == pytest.approx(5e-4, rel=1e-2)  # the element with expected 0 is skipped


def test_failing_both_bounds_is_a_mismatch_with_the_position():
    result = compare(np.float32([[1, 2], [3, 4.01]]), np.float32([[1, 2], [3, 4]]))
    assert not result.matched and result.mismatched_elements == 1
    assert result.problems == ["output 0 [1,1]: expected 4.0, got 4.010000228881836"]
    assert "MISMATCH against snapshot result: 1/4 elements differ" in result.summary()
    assert compare(np.float32([4.01]), np.float32([4]), abs_bound=0.1).matched
    assert compare(np.float32([4.01]), np.float32([4]), rel_bound=0.01).matched


def test_nan_and_inf():
    nan, inf = np.nan, np.inf
    assert compare([nan, inf, -inf], [nan, inf, -inf]).matched
    for actual, expected in (([nan], [1.0]), ([1.0], [nan]), ([inf], [-inf]), ([inf], [1e38]), ([1.0], [inf])):
        result = compare(np.float32(actual), np.float32(expected))
        assert not result.matched, (actual, expected)
        assert result.max_abs_error == inf


def test_integers_and_pred_must_be_equal():
    assert compare(np.int32([1, 2]), np.int32([1, 2])).matched
    result = compare(np.int32([1, 2]), np.int32([1, 3]), abs_bound=10, rel_bound=10)
    assert not result.matched and result.max_abs_error == 1
    assert not compare(np.array([True]), np.array([False])).matched


def test_complex_parts_are_compared_separately():
    assert compare(np.complex64([1 + 1j]), np.complex64([1 + 1.0001j])).matched
    result = compare(np.complex64([1 + 1j]), np.complex64([1 + 2j]))
    assert not result.matched and result.max_abs_error == 1 and result.max_rel_error == 0.5


def test_low_precision_types_compare_in_float64():
    bf16 = ml_dtypes.bfloat16
    assert compare(np.array([1.0], bf16), np.array([1.0], bf16)).matched
    assert not compare(np.array([1.0], bf16), np.array([1.5], bf16)).matched


def test_structure_differences_are_mismatches():
    result = compare_outputs([np.zeros(2)], [np.zeros(3)], 1e-3, 1e-3, "platform cpu")
    assert not result.matched and result.problems == ["output 0 is f64[2], the platform cpu is f64[3]"]
    assert "output 0 is f64[2]" in result.summary()
    result = compare_outputs([np.zeros(2, np.float32)], [np.zeros(2)], 1e-3, 1e-3, "snapshot result")
    assert not result.matched and "f32[2]" in result.problems[0]
    result = compare_outputs([np.zeros(2)], [np.zeros(2), np.zeros(1)], 1e-3, 1e-3, "snapshot result")
    assert not result.matched and result.problems[0] == "1 outputs, but the snapshot result has 2"


def test_only_the_first_mismatches_are_listed():
    result = compare(np.zeros(100, np.float32), np.ones(100, np.float32))
    assert result.mismatched_elements == 100 and len(result.problems) == 5


def test_a_scalar_output_that_differs_is_reported_not_a_crash():
    # a 0-d array has no np.nonzero positions of its own: the position printed is the empty one
    result = compare_outputs(
        [np.float32(0.25), np.array(3, np.int32)], [np.float32(0.75), np.array(4, np.int32)], 1e-3, 1e-3, "platform cpu"
    )
    assert not result.matched and result.mismatched_elements == 2
    assert result.problems == ["output 0 []: expected 0.75, got 0.25", "output 1 []: expected 4, got 3"]


def test_tokens_match_tokens_only():
    assert compare_outputs([None, np.float32(1)], [None, np.float32(1)], 1e-3, 1e-3, "platform cpu").matched
    mixed = compare_outputs([None], [np.zeros(0, np.bool_)], 1e-3, 1e-3, "snapshot result")
    assert not mixed.matched and mixed.problems == ["output 0 is token[], the snapshot result is pred[0]"]
