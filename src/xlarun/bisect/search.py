"""The two searches over a module's pass steps: each measures steps (replays them) through ``measure`` and
returns the first index whose verdict flipped from the start's, or None."""

from __future__ import annotations

from collections.abc import Callable

from xlarun.bisect.bisect_result import StepError


def linear_search(measure: Callable[[int], StepError], count: int) -> int | None:
    """The first index whose verdict differs from the start's, measuring every index."""
    first = None
    for index in range(count):
        if measure(index).flipped and first is None:
            first = index
    return first


def binary_search(measure: Callable[[int], StepError], count: int) -> int | None:
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
