"""Which pass changed the numbers: ``xlarun bisect``.

Two modes:

- **replay** (:func:`bisect_module`): replay a module's per-pass dumps on the same arguments and
  find the first step whose outputs leave the reference past a tolerance;
- **rerun** (:func:`bisect_rerun`): rerun the job with subsets of the timeline's passes disabled
  (``--xla_disable_hlo_passes``), judged by a check, down to one pass.

Results are :class:`BisectResult` objects, recorded with the run (:mod:`.record`).
"""

from __future__ import annotations

from typing import Any

from xlarun.bisect.bisect_options import BisectOptions
from xlarun.bisect.bisect_plan import timeline_pass_names
from xlarun.bisect.bisect_result import BisectResult, RerunTrial, StepError
from xlarun.bisect.replay_mode import bisect_module

__all__ = ["BisectOptions", "BisectResult", "RerunTrial", "StepError", "bisect_module", "bisect_rerun", "timeline_pass_names"]


def bisect_rerun(*args: Any, **kwargs: Any) -> BisectResult:
    """Rerun mode; see :func:`xlarun.bisect.rerun.bisect_rerun`."""
    from xlarun.bisect.rerun import bisect_rerun as run

    return run(*args, **kwargs)
