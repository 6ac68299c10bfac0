"""The compile stage for a partitioned module: placed on its N devices, with how its values are spread over them.

An optimized dump is already per-device code: it is rewritten and compiled as it is. A ``before_optimizations``
dump (or the fallback to one) is partitioned by XLA. What is compiled, how values are split and put back:
:mod:`.partitioned`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.deoptimize import deoptimize_hlo_text
from xlarun.replay.literals import Shape
from xlarun.replay.multidevice import DeviceGroup, MultiDeviceModule, ShardingLayout, module_shardings, sharding_from_text
from xlarun.replay.partitioned import (
    Partitioning,
    global_shape,
    parameter_and_result_shapes,
    partitioning_of_source,
    rewrite_for_devices,
)
from xlarun.replay.plan import ReplayPlan, warn
from xlarun.replay.recompile import module_proto, optimized_first
from xlarun.replay.sources import ReplaySource

Log = Callable[[str], None]
_ENTRY_PARAMETER = re.compile(r"\bparameter\((\d+)\).*?, sharding=(\{.*)$")
_ROOT_SHARDING = re.compile(r"^\s*ROOT [^\n]*?, sharding=(\{.*)$")


@dataclass
class Placed:
    """A module compiled for N devices, with how its parameters and outputs are spread over them."""

    source: ReplaySource
    module: MultiDeviceModule
    parameters: list[Shape]  # per-device shapes
    results: list[Shape]  # per-device shapes, flattened
    parameter_layouts: list[ShardingLayout]
    output_layouts: list[ShardingLayout]
    route: str
    #: What the module does not record (``parameters``, ``outputs``), taken as whole on every device until known.
    unrecorded: tuple[str, ...] = ()
    #: The output layouts say what the program means (its shardings), not a guess: the devices' copies must agree.
    outputs_known: bool = True
    #: The program before optimization partitioned again by XLA, where it told what the module does not record.
    again: Placed | None = None
    #: The program's global parameter and result shapes (:func:`global_shapes`).
    global_parameters: list[Shape] = field(default_factory=list)
    global_results: list[Shape] = field(default_factory=list)


def place_on_devices(plan: ReplayPlan, stage: Log, optimized_failure: str | None) -> Placed:
    """The module compiled for its N devices (``stage``, ``optimized_failure``: as for :func:`.compiled.compile_plan`)."""
    assert plan.group is not None  # a partitioned plan has its devices
    placed = _place(plan, plan.group, stage, optimized_failure)
    plan.result.compile_s, plan.result.route, plan.result.arguments = placed.module.compile_s, placed.route, "fake"
    if placed.unrecorded:
        placed.again = _complete_layouts(placed, plan.before, plan.group, plan.partitioning, plan)
    placed.global_parameters, placed.global_results = global_shapes(placed, plan.before)
    return placed


def _place(plan: ReplayPlan, group: DeviceGroup, stage: Log, optimized_failure: str | None) -> Placed:
    """The module to run on the devices: the optimized one as it is, else (or when it cannot be) ``before`` partitioned by XLA."""
    source, before, partitioning = plan.source, plan.before, plan.partitioning
    placed, reason = optimized_first(
        source,
        stage,
        optimized_failure,
        lambda: place_global(source, group, partitioning),
        lambda: _place_per_device(source, group, partitioning),
    )
    if placed is not None:
        return placed
    if before is None:
        raise EngineError(
            f"the optimized module cannot be recompiled for {partitioning.devices} devices ({reason}) and there is no before_optimizations dump to replay instead ({plan.looked})",
            "capture with the before_optimizations dump (xlarun's default dump flags write it), or replay with --engine hlo_runner_main",
        )
    warn(
        plan.result,
        plan.log,
        f"the optimized module cannot be recompiled for {partitioning.devices} devices ({reason}); replaying {before.path.name}, partitioned by XLA, instead",
    )
    plan.result.fell_back_to = str(before.path)
    stage("compile")
    return place_global(before, group, partitioning_of(before, partitioning))


def _place_per_device(source: ReplaySource, group: DeviceGroup, partitioning: Partitioning) -> Placed:
    text = source.text if source.text is not None else pjrt.module_proto_to_text(source.module_proto or b"")
    rewritten = deoptimize_hlo_text(text)
    try:
        proto = pjrt.text_to_module_proto(rewrite_for_devices(rewritten.text))
    except InputError as exc:
        raise EngineError(f"xlarun's per-device rewrite of the optimized module does not parse ({exc.message})") from exc
    pjrt.prepare_custom_calls(proto)
    module = group.compile(pjrt.module_proto_to_stablehlo(proto), partitioning.partitions, partitioning.replicas, partition=False)
    parameters, results = parameter_and_result_shapes(proto)
    parameter_layouts: list[ShardingLayout] | None
    output_layouts: list[ShardingLayout] | None
    if partitioning.replicas > 1:  # each replica runs the module on values of its own
        parameter_layouts, output_layouts = (
            [ShardingLayout.stacked()] * len(parameters),
            [ShardingLayout.stacked()] * len(results),
        )
    else:
        parameter_layouts, output_layouts = _recorded_shardings(source, text, len(parameters), len(results))
    changes = ", ".join(rewritten.changes)
    return Placed(
        source,
        module,
        parameters,
        results,
        parameter_layouts or [ShardingLayout.replicated()] * len(parameters),
        output_layouts or [ShardingLayout.replicated()] * len(results),
        "per-device optimized module" + (f" (deoptimized: {changes})" if changes else ""),
        tuple(name for name, layouts in (("parameters", parameter_layouts), ("outputs", output_layouts)) if layouts is None),
    )


def place_global(source: ReplaySource, group: DeviceGroup, partitioning: Partitioning) -> Placed:
    """``source`` (global shapes) partitioned by XLA over the group's devices."""
    proto = module_proto(source)
    pjrt.prepare_custom_calls(proto)
    module = group.compile(pjrt.module_proto_to_stablehlo(proto), partitioning.partitions, partitioning.replicas, partition=True)
    parameters, results = parameter_and_result_shapes(proto)
    chosen = module.shardings()
    if chosen is None:  # replicas: each device runs the module on values of its own
        stacked = ShardingLayout.stacked()
        return Placed(
            source, module, parameters, results, [stacked] * len(parameters), [stacked] * len(results), "one copy per replica"
        )
    local = [_local_shape(s, layout) for s, layout in zip(parameters, chosen[0], strict=True)]
    outputs = chosen[1]
    if len(outputs) == 1 and len(results) != 1:  # one sharding for a whole tuple result: each element has it
        outputs = outputs * len(results)
    placed = Placed(source, module, local, results, chosen[0], outputs, "partitioned by XLA (SPMD)")
    placed.outputs_known = _has_shardings(source, proto)  # else XLA took every value as replicated: per-device code may not be
    return placed


def _has_shardings(source: ReplaySource, proto: bytes) -> bool:
    """The program says how its outputs are sharded: jax's Shardy attributes, or a sharding on the entry's root."""
    text = source.text if source.text is not None else pjrt.module_proto_to_text(proto, print_large_constants=False)
    if "xla.sdy.sharding" in text:
        return True
    return any(m is not None for m in map(_ROOT_SHARDING.match, text[text.find("\nENTRY ") :].splitlines()))


def _local_shape(shape: Shape, layout: ShardingLayout) -> Shape:
    if layout.kind != "tiled":
        return shape
    dims = tuple(math.ceil(n / w) for n, w in zip(shape.dimensions, layout.ways, strict=True))
    return Shape(shape.element_type, dims)


def _recorded_shardings(
    source: ReplaySource, text: str, parameters: int, results: int
) -> tuple[list[ShardingLayout] | None, list[ShardingLayout] | None]:
    """The parameter and output shardings the partitioner recorded: the proto's spmd fields, else the entry's
    attributes; ``None`` for what the module does not say (text dumps carry no output sharding)."""
    recorded_parameters, recorded_outputs = module_shardings(module_proto(source))
    entry = text[text.find("\nENTRY ") :].splitlines()
    if recorded_parameters is None or len(recorded_parameters) != parameters:
        found = {int(m.group(1)): m.group(2) for m in map(_ENTRY_PARAMETER.search, entry) if m}
        recorded_parameters = (
            [sharding_from_text(_braced(found[i]))[0] for i in range(parameters)]
            if sorted(found) == list(range(parameters))
            else None
        )
    if recorded_outputs is None or len(recorded_outputs) != results:
        root = next((m for m in map(_ROOT_SHARDING.match, entry) if m), None)
        recorded_outputs = sharding_from_text(_braced(root.group(1))) if root else None
        if recorded_outputs is not None and len(recorded_outputs) != results:
            recorded_outputs = None
    return recorded_parameters, recorded_outputs


def _braced(text: str) -> str:
    depth = 0
    for i, char in enumerate(text):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return text[: i + 1]
    return text


def global_shapes(placed: Placed, before: ReplaySource | None) -> tuple[list[Shape], list[Shape]]:
    """The program's global parameter and result shapes: the before_optimizations module's where they fit."""
    count = len(placed.module.devices)
    if before is not None and "stacked" not in {layout.kind for layout in placed.parameter_layouts}:
        try:
            found = parameter_and_result_shapes(module_proto(before))
        except (EngineError, InputError):
            found = None
        if found and len(found[0]) == len(placed.parameters) and len(found[1]) == len(placed.results):
            return found
    return (
        [
            Shape(s.element_type, global_shape(s.dimensions, lay, count))
            for s, lay in zip(placed.parameters, placed.parameter_layouts, strict=True)
        ],
        [
            Shape(s.element_type, global_shape(s.dimensions, lay, count))
            for s, lay in zip(placed.results, placed.output_layouts, strict=True)
        ],
    )


def _complete_layouts(
    placed: Placed, before: ReplaySource | None, group: DeviceGroup, partitioning: Partitioning, plan: ReplayPlan
) -> Placed | None:
    """Fill in the shardings the module does not record from XLA partitioning ``before`` again (what JAX's compile did)."""
    what = " and ".join(placed.unrecorded)
    if before is not None:
        again = place_global(before, group, partitioning_of(before, partitioning))
        if len(again.parameter_layouts) == len(placed.parameters) and len(again.output_layouts) == len(placed.results):
            plan.log(
                f"{placed.source.path.name} records no sharding of its {what}: taken from XLA partitioning {before.path.name} again"
            )
            if "parameters" in placed.unrecorded:
                placed.parameter_layouts = again.parameter_layouts
            if "outputs" in placed.unrecorded:
                placed.output_layouts, placed.outputs_known = again.output_layouts, again.outputs_known
            return again
    count = len(placed.module.devices)
    placed.outputs_known = False
    warn(
        plan.result,
        plan.log,
        f"{placed.source.path.name} records no sharding of its {what}: each is taken as whole on every one of the {count} devices",
    )
    return None


def partitioning_of(before: ReplaySource, fallback: Partitioning) -> Partitioning:
    found = partitioning_of_source(before)
    return found if found.devices > 1 else fallback
