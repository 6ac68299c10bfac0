"""The run stage: the compiled module run ``--iterations`` times on its arguments, its outputs brought back.

On N devices the global arguments are cut per device by the parameter shardings and the outputs put back
together by the output shardings (:mod:`.partitioned`); each device's own outputs come back too, for the
check that the devices holding copies of a value agree (:mod:`.reference`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xlarun.errors import EngineError
from xlarun.replay.compiled import Built
from xlarun.replay.literals import Shape
from xlarun.replay.op_profile import op_profile_dict, optimized_text, traced
from xlarun.replay.partitioned import assemble, shard
from xlarun.replay.placed import Placed
from xlarun.replay.result import ReplayResult

Log = Callable[[str], None]
#: Each output's pieces, one per device (``[output][device]``).
PerDevice = list[list[np.ndarray]]


def run_built(
    built: Built, arguments: list, iterations: int, result: ReplayResult, log: Log, *, profile: bool = False
) -> tuple[list, PerDevice | None]:
    """The outputs of the last of ``iterations`` runs (each run's time goes to ``result.run_times_s``), and on N
    devices each device's pieces of them. ``profile``: the stage runs under
    JAX's profiler, and each op's time goes to ``result.profile`` (:mod:`.op_profile`)."""
    if not profile:
        return _run_built(built, arguments, iterations, result, log)
    with traced() as trace:
        found = _run_built(built, arguments, iterations, result, log)
    executable = built.module.executable if isinstance(built, Placed) else built.compiled.executable
    result.profile, problem = op_profile_dict(trace, optimized_text(executable), iterations)
    if result.profile is None:
        result.warnings.append(f"--profile timed no op: {problem}")
        log(result.warnings[-1])
    else:
        log(f"profiled: {len(result.profile['ops'])} ops of {result.profile['module']} timed over {iterations} iteration(s)")
    return found


def _run_built(built: Built, arguments: list, iterations: int, result: ReplayResult, log: Log) -> tuple[list, PerDevice | None]:
    if isinstance(built, Placed):
        return run_on_devices(built, arguments, built.global_results, iterations, result, log)
    compiled = built.compiled
    device_arguments = compiled.upload(arguments)
    outputs: list = []
    for iteration in range(iterations):  # at least 1: ReplayOptions refuses fewer
        outputs, seconds = compiled.run(device_arguments)
        result.run_times_s.append(seconds)
        log(f"iteration {iteration + 1}/{iterations}: {seconds * 1e3:.3f} ms")
    return compiled.download(outputs), None


def run_on_devices(
    placed: Placed, arguments: list, results: list[Shape], iterations: int, result: ReplayResult, log: Log
) -> tuple[list[np.ndarray], PerDevice]:
    """Run ``iterations`` times on the devices; the global outputs of the last run, and each device's (``[output][device]``)."""
    count = len(placed.module.devices)
    per_device = [
        shard(value, layout, shape.dimensions, count)
        for value, layout, shape in zip(arguments, placed.parameter_layouts, placed.parameters, strict=True)
    ]
    uploaded = placed.module.upload(per_device)
    outputs = None
    for iteration in range(iterations):
        outputs, seconds = placed.module.run(uploaded)
        result.run_times_s.append(seconds)
        log(f"iteration {iteration + 1}/{iterations} on {count} devices: {seconds * 1e3:.3f} ms")
    host = placed.module.download(outputs or [])
    if len(host) != len(placed.output_layouts) or len(results) != len(host):
        raise EngineError(
            f"the module returned {len(host)} outputs on each device; its result has {len(results)} and its shardings name "
            f"{len(placed.output_layouts)}"
        )
    assembled = [
        assemble(pieces, layout, shape.dimensions)
        for pieces, layout, shape in zip(host, placed.output_layouts, results, strict=True)
    ]
    return assembled, host
