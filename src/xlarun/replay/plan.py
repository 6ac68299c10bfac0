"""The plan of a replay on the built-in engine: what is run, where, and on how many devices.

A module compiled for N devices (``num_partitions`` x ``replica_count`` above 1) is planned on N devices of the
platform; that is a property of the plan (``partitioned``), which each later stage reads: compile
(:mod:`.compiled`), inputs (:mod:`.inputs`), run (:mod:`.run`), references (:mod:`.reference`), verdict
(:mod:`.verdict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.multidevice import DeviceGroup
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import Partitioning, partitioning_of_source
from xlarun.replay.result import ReplayResult
from xlarun.replay.sources import ELIDED_WARNING, ReplaySource

Log = Callable[[str], None]


@dataclass
class ReplayPlan:
    """One replay's plan: the source, the options, the platforms, the devices, and the result being filled in."""

    source: ReplaySource
    options: ReplayOptions
    log: Log
    #: Loads the module's before_optimizations dump when asked (the fallback, and the partitioned replay's reference).
    unoptimized: Callable[[], ReplaySource | None]
    looked: str  # where the before_optimizations dump was looked for, for the message when there is none
    platform: pjrt.Platform
    reference: pjrt.Platform | None
    result: ReplayResult
    partitioning: Partitioning
    #: N devices: the devices, and the program before optimization (the source itself when it is not optimized).
    group: DeviceGroup | None = None
    before: ReplaySource | None = None
    #: Why the replay is not attempted (an engine-error verdict), or None.
    refusal: EngineError | None = None

    @property
    def partitioned(self) -> bool:
        return self.partitioning.devices > 1


def plan_replay(
    source: ReplaySource,
    options: ReplayOptions,
    log: Log,
    unoptimized: Callable[[], ReplaySource | None],
    looked: str,
) -> ReplayPlan:
    """The plan for ``source``. Raises EnvironmentProblem when the platform has fewer devices than a partitioned
    module needs, InputError for ``--inputs snapshot`` of one (XLA writes no per-device arguments)."""
    platform = pjrt.Platform(options.platform)
    reference = pjrt.Platform(options.reference_platform) if options.reference_platform else None
    result = ReplayResult(
        engine="pjrt",
        platform=platform.name,
        source=str(source.path),
        input_kind=source.input_kind,
        module_name=source.module_name,
        warnings=list(source.warnings),
    )
    plan = ReplayPlan(source, options, log, unoptimized, looked, platform, reference, result, partitioning_of_source(source))
    if plan.partitioned:
        _plan_devices(plan)
    else:
        warn_about_source(source, result, log)
    return plan


def _plan_devices(plan: ReplayPlan) -> None:
    source, partitioning, result, log = plan.source, plan.partitioning, plan.result, plan.log
    if partitioning.partitions > 1 and partitioning.replicas > 1:
        plan.refusal = EngineError(
            f"{source.path.name} is compiled for {partitioning.replicas} replicas of {partitioning.partitions} partitions; "
            "xlarun replays a module over partitions or over replicas, not both",
            "replay it with --engine hlo_runner_main",
        )
        return
    platform = plan.platform
    plan.group = DeviceGroup(platform, partitioning.devices)
    result.devices, result.partitioning = partitioning.devices, partitioning.describe()
    log(
        f"{source.path.name} was compiled for {partitioning.devices} devices ({partitioning.describe()}): replaying it on {partitioning.devices} {platform.name} devices"
    )
    if plan.options.inputs == "snapshot" and source.arguments is None:
        raise InputError(
            f"{source.path.name} is partitioned over {partitioning.devices} devices, and XLA writes no snapshot of its arguments",
            "record them in the job with xlarun.record_arguments(step, *args), or use --inputs fake (seeded global arguments)",
        )
    plan.before = plan.unoptimized() if source.optimized else source
    theirs = partitioning_of_source(plan.before) if plan.before is not None else partitioning
    if theirs.devices > 1 and theirs.devices != partitioning.devices:  # a before dump of N devices is partitioned for N
        assert plan.before is not None  # else theirs is the module's own
        plan.refusal = EngineError(
            f"{source.path.name} is compiled for {partitioning.devices} devices ({partitioning.describe()}) and its "
            f"before_optimizations dump {plan.before.path.name} for {theirs.devices} ({theirs.describe()}): "
            "they are not the dumps of one compile",
            f"replay {plan.before.path.name} itself, which runs on its own {theirs.devices} devices",
        )


def warn(result: ReplayResult, log: Log, message: str) -> None:
    result.warnings.append(message)
    log(message)


def warn_about_source(source: ReplaySource, result: ReplayResult, log: Log) -> None:
    if source.has_elided_constants:
        warn(result, log, ELIDED_WARNING.format(name=source.path.name))
    partitioning = partitioning_of_source(source)
    if partitioning.devices > 1:  # a fallback for a one-device module is never partitioned; said if it ever is
        warn(
            result,
            log,
            f"{source.path.name} was compiled for {partitioning.devices} devices ({partitioning.describe()}); it is replayed on one device",
        )
