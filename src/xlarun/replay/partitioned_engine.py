"""The built-in engine for a partitioned module: run it on its N devices, compare with the unpartitioned program.

What is compiled, how values are split and put back, and what is compared with what: :mod:`.partitioned`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.compare import Comparison, compare_outputs
from xlarun.replay.deoptimize import deoptimize_hlo_text
from xlarun.replay.engine import optimized_first
from xlarun.replay.fakedata import fake_arguments
from xlarun.replay.limits import check_data_size
from xlarun.replay.literals import Shape, describe
from xlarun.replay.multidevice import DeviceGroup, MultiDeviceModule, ShardingLayout, module_shardings, sharding_from_text
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import (
    Partitioning,
    assemble,
    copies,
    global_shape,
    parameter_and_result_shapes,
    partitioning_of_source,
    rewrite_for_devices,
    shard,
)
from xlarun.replay.result import OutputSummary, ReplayResult
from xlarun.replay.sources import ReplaySource, module_opcodes

Log = Callable[[str], None]
_ENTRY_PARAMETER = re.compile(r"\bparameter\((\d+)\).*?, sharding=(\{.*)$")
_ROOT_SHARDING = re.compile(r"^\s*ROOT [^\n]*?, sharding=(\{.*)$")


@dataclass
class _Placed:
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


def replay_partitioned(
    source: ReplaySource,
    partitioning: Partitioning,
    options: ReplayOptions,
    log: Log,
    unoptimized: Callable[[], ReplaySource | None],
    result: ReplayResult,
    stage: Log,
    looked: str = "none was given",
    optimized_failure: str | None = None,
) -> ReplayResult:
    """Replay ``source`` (a module compiled for ``partitioning.devices`` devices) on that many devices.

    ``stage``, ``optimized_failure``: as for :func:`.engine.replay_with_pjrt` (the per-device rewrite that killed
    the last child is not compiled again); ``looked``: where the before_optimizations dump was looked for.

    Raises EnvironmentProblem when the platform has fewer devices, InputError for ``--inputs snapshot``
    (XLA writes no per-device arguments); compile and run failures come back as verdict ``engine-error``.
    """
    from xlarun.replay.engine import conclude, literal_text, note_nonfinite

    if partitioning.partitions > 1 and partitioning.replicas > 1:
        refusal = EngineError(
            f"{source.path.name} is compiled for {partitioning.replicas} replicas of {partitioning.partitions} partitions; "
            "xlarun replays a module over partitions or over replicas, not both",
            "replay it with --engine hlo_runner_main",
        )
        return _failed(result, refusal, log)
    platform = pjrt.Platform(options.platform)
    group = DeviceGroup(platform, partitioning.devices)
    result.devices, result.partitioning = partitioning.devices, partitioning.describe()
    log(
        f"{source.path.name} was compiled for {partitioning.devices} devices ({partitioning.describe()}): replaying it on {partitioning.devices} {platform.name} devices"
    )
    if options.inputs == "snapshot":
        raise InputError(
            f"{source.path.name} is partitioned over {partitioning.devices} devices, and a replay of it takes no snapshot arguments",
            "use --inputs fake (seeded global arguments, cut per device by the module's shardings)",
        )
    if source.arguments is not None:
        _warn(
            result,
            log,
            f"{source.path.name}'s snapshot holds one device's arguments; the {partitioning.devices}-device replay uses seeded fake data instead",
        )
    before = unoptimized() if source.optimized else source
    try:
        placed = _place(source, before, group, partitioning, result, log, stage, looked, optimized_failure)
    except EngineError as exc:
        return _failed(result, exc, log)
    result.compile_s, result.route, result.arguments = placed.module.compile_s, placed.route, "fake"
    again = None
    if placed.unrecorded:
        try:
            again = _complete_layouts(placed, before, group, partitioning, result, log)
        except EngineError as exc:
            return _failed(result, exc, log)
    global_parameters, global_results = _global_shapes(placed, before)
    check_data_size(
        sum(s.nbytes() for s in placed.parameters) * partitioning.devices,
        sum(s.nbytes() for s in placed.results) * partitioning.devices,
        options.max_data_bytes,
    )
    arguments = fake_arguments(global_parameters, options.seed or 0)
    log(
        f"compiled {placed.source.path.name} for {partitioning.devices} devices of {platform.describe()} in {placed.module.compile_s:.3f} s"
    )
    try:
        stage("run")
        outputs, host = _run(placed, arguments, global_results, options.iterations, result, log)
        agreed = _copies_agree(placed, host, options) if placed.outputs_known else None
        stage("reference")
        comparison = _reference(placed, before, again, arguments, outputs, group, partitioning, options, result, log, looked)
    except EngineError as exc:
        return _failed(result, exc, log)
    conclude(result, [c for c in (comparison, agreed) if c is not None], log)
    note_nonfinite(result, outputs, log)
    result.outputs = [
        OutputSummary(i, describe(out), literal_text(out) if options.print_literals else None) for i, out in enumerate(outputs)
    ]
    return result


def _warn(result: ReplayResult, log: Log, message: str) -> None:
    result.warnings.append(message)
    log(message)


def _failed(result: ReplayResult, exc: EngineError, log: Log) -> ReplayResult:
    result.verdict, result.error = "engine-error", exc.one_line()
    log(f"engine error: {result.error}")
    return result


def _place(source, before, group, partitioning, result, log, stage, looked, optimized_failure) -> _Placed:
    """The module to run on the devices: the optimized one as it is, else (or when it cannot be) ``before`` partitioned by XLA."""
    placed, reason = optimized_first(
        source,
        stage,
        optimized_failure,
        lambda: _place_global(source, group, partitioning),
        lambda: _place_per_device(source, group, partitioning),
    )
    if placed is not None:
        return placed
    if before is None:
        raise EngineError(
            f"the optimized module cannot be recompiled for {partitioning.devices} devices ({reason}) and there is no before_optimizations dump to replay instead ({looked})",
            "capture with the before_optimizations dump (xlarun's default dump flags write it), or replay with --engine hlo_runner_main",
        )
    _warn(
        result,
        log,
        f"the optimized module cannot be recompiled for {partitioning.devices} devices ({reason}); replaying {before.path.name}, partitioned by XLA, instead",
    )
    result.fell_back_to = str(before.path)
    stage("compile")
    return _place_global(before, group, _partitioning_of(before, partitioning))


def _place_per_device(source: ReplaySource, group: DeviceGroup, partitioning: Partitioning) -> _Placed:
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
    return _Placed(
        source,
        module,
        parameters,
        results,
        parameter_layouts or [ShardingLayout.replicated()] * len(parameters),
        output_layouts or [ShardingLayout.replicated()] * len(results),
        "per-device optimized module" + (f" (deoptimized: {changes})" if changes else ""),
        tuple(name for name, layouts in (("parameters", parameter_layouts), ("outputs", output_layouts)) if layouts is None),
    )


def _place_global(source: ReplaySource, group: DeviceGroup, partitioning: Partitioning) -> _Placed:
    from xlarun.replay.engine import module_proto

    proto = module_proto(source)
    pjrt.prepare_custom_calls(proto)
    module = group.compile(pjrt.module_proto_to_stablehlo(proto), partitioning.partitions, partitioning.replicas, partition=True)
    parameters, results = parameter_and_result_shapes(proto)
    chosen = module.shardings()
    if chosen is None:  # replicas: each device runs the module on values of its own
        stacked = ShardingLayout.stacked()
        return _Placed(
            source, module, parameters, results, [stacked] * len(parameters), [stacked] * len(results), "one copy per replica"
        )
    local = [_local_shape(s, layout) for s, layout in zip(parameters, chosen[0], strict=True)]
    outputs = chosen[1]
    if len(outputs) == 1 and len(results) != 1:  # one sharding for a whole tuple result: each element has it
        outputs = outputs * len(results)
    placed = _Placed(source, module, local, results, chosen[0], outputs, "partitioned by XLA (SPMD)")
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
    from xlarun.replay.engine import module_proto

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


def _global_shapes(placed: _Placed, before: ReplaySource | None) -> tuple[list[Shape], list[Shape]]:
    """The program's global parameter and result shapes: the before_optimizations module's where they fit."""
    from xlarun.replay.engine import module_proto

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


def _run(
    placed: _Placed, arguments: list, results: list[Shape], iterations: int, result: ReplayResult, log: Log
) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
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


def _copies_agree(placed: _Placed, host: list[list[np.ndarray]], options: ReplayOptions) -> Comparison | None:
    """Every device holding a copy of a piece of an output (replicated outputs: all of them) holds the same values.

    A collective that reached only some devices leaves their copies apart, whatever device 0 says.
    """
    agreed = Comparison("the other devices' copies of each output")
    for index, (pieces, layout) in enumerate(zip(host, placed.output_layouts, strict=True)):
        for device, holder in copies(pieces, layout):
            one = compare_outputs(
                [pieces[device]], [pieces[holder]], options.abs_error_bound, options.rel_error_bound, f"device {holder}"
            )
            agreed.total_elements += one.total_elements
            agreed.mismatched_elements += one.mismatched_elements
            agreed.max_abs_error = max(agreed.max_abs_error, one.max_abs_error)
            agreed.max_rel_error = max(agreed.max_rel_error, one.max_rel_error)
            if not one.matched:
                agreed.matched = False
                agreed.problems.append(f"output {index}: device {device}'s copy differs from device {holder}'s ({one.summary()})")
    return agreed if agreed.total_elements else None


#: Opcodes that run across devices (or ask which device they run on): a module holding one is per-device code.
COLLECTIVE_OPCODES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "ragged-all-to-all",
    "collective-permute",
    "collective-broadcast",
    "all-reduce-start",
    "all-gather-start",
    "collective-permute-start",
    "partition-id",
    "replica-id",
)


def _collectives(source: ReplaySource) -> list[str]:
    from xlarun.replay.engine import module_proto

    opcodes = module_opcodes(module_proto(source))
    return [f"{opcodes[op]} ({op})" for op in COLLECTIVE_OPCODES if op in opcodes]


def _complete_layouts(placed, before, group, partitioning, result, log) -> _Placed | None:
    """Fill in the shardings the module does not record from XLA partitioning ``before`` again (what JAX's compile did)."""
    what = " and ".join(placed.unrecorded)
    if before is not None:
        again = _place_global(before, group, _partitioning_of(before, partitioning))
        if len(again.parameter_layouts) == len(placed.parameters) and len(again.output_layouts) == len(placed.results):
            log(
                f"{placed.source.path.name} records no sharding of its {what}: taken from XLA partitioning {before.path.name} again"
            )
            if "parameters" in placed.unrecorded:
                placed.parameter_layouts = again.parameter_layouts
            if "outputs" in placed.unrecorded:
                placed.output_layouts, placed.outputs_known = again.output_layouts, again.outputs_known
            return again
    count = len(placed.module.devices)
    placed.outputs_known = False
    _warn(
        result,
        log,
        f"{placed.source.path.name} records no sharding of its {what}: each is taken as whole on every one of the {count} devices",
    )
    return None


def _partitioning_of(before: ReplaySource, fallback: Partitioning) -> Partitioning:
    found = partitioning_of_source(before)
    return found if found.devices > 1 else fallback


def _reference(placed, before, again, arguments, outputs, group, partitioning, options, result, log, looked) -> Comparison | None:
    """The global outputs compared with ``before`` on one device, or, where it does not run on one, partitioned again on N."""
    from xlarun.replay.engine import compile_plain

    if before is None:
        _warn(
            result,
            log,
            f"no before_optimizations dump of the module ({looked}): nothing to compare the partitioned replay with",
        )
        return None
    if partitioning.replicas > 1:
        _warn(
            result,
            log,
            f"a module for {partitioning.replicas} replicas is per-replica code at every stage (it has no one-device form): "
            "nothing to compare the replay with",
        )
        return None
    bounds = (options.abs_error_bound, options.rel_error_bound)
    collectives = _collectives(before)
    try:
        if collectives:  # per-device code (shard_map bodies, hand-written collectives): one device would run it wrong
            raise EngineError(f"it holds collectives, which are per-device code: {', '.join(collectives)}")
        compiled = compile_plain(before, pjrt.Platform(options.platform), options).compiled
        expected, _ = compiled.run(compiled.upload(arguments))
        against = f"before_optimizations {before.path.name} on 1 device"
        return compare_outputs(outputs, compiled.download(expected), *bounds, against)
    except EngineError as exc:
        one_device = exc.message
    if placed.source is before:
        _warn(
            result,
            log,
            f"{before.path.name} does not run on one device ({one_device}): nothing to compare the partitioned replay with",
        )
        return None
    log(
        f"{before.path.name} does not run on one device ({one_device}); comparing with it partitioned again by XLA on {partitioning.devices} devices"
    )
    again = again or _place_global(before, group, _partitioning_of(before, partitioning))
    scratch = ReplayResult(engine=result.engine, platform=result.platform, source=result.source, input_kind=result.input_kind)
    expected, _ = _run(again, arguments, _global_shapes(again, before)[1], 1, scratch, lambda line: None)
    return compare_outputs(
        outputs, expected, *bounds, f"before_optimizations {before.path.name} partitioned again on {partitioning.devices} devices"
    )
