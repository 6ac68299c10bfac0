"""The compare stage: the outputs compared with every reference the plan has (rules in :mod:`.compare`).

One device: the snapshot's recorded result, when the snapshot's arguments were used; a run on
``reference_platform``, when one is given; for a snapshot with arguments but no recorded result, the
module's ``before_optimizations`` dump (or a second compile on CPU). N devices: the unpartitioned program on
one device (or, where it does not run on one, partitioned again by XLA), and the devices' copies of each output
with each other.
"""

from __future__ import annotations

from xlarun.errors import EngineError
from xlarun.replay import pjrt
from xlarun.replay.compare import Comparison, compare_outputs
from xlarun.replay.compiled import Built
from xlarun.replay.literals import describe, flatten
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import COLLECTIVE_OPCODES, copies
from xlarun.replay.placed import Placed, global_shapes, partitioning_of, place_global
from xlarun.replay.plan import ReplayPlan, warn
from xlarun.replay.recompile import Compiled, compile_plain, module_proto
from xlarun.replay.result import ReplayResult
from xlarun.replay.run import PerDevice, run_on_devices
from xlarun.replay.sources import NO_RESULT, ReplaySource, entry_parameter_shapes, module_opcodes


def compare_with_references(
    plan: ReplayPlan, built: Built, arguments: list, outputs: list, per_device: PerDevice | None
) -> list[Comparison]:
    """One comparison per reference; none when there is nothing to compare with. Raises EngineError when a
    reference fails to compile or run."""
    if isinstance(built, Placed):
        assert per_device is not None  # a placed module's run brings each device's outputs back
        agreed = _copies_agree(built, per_device, plan.options) if built.outputs_known else None
        comparison = _unpartitioned(plan, built, arguments, outputs)
        recorded = (
            compare_outputs(
                outputs,
                flatten(plan.source.result),
                plan.options.abs_error_bound,
                plan.options.rel_error_bound,
                "recorded result",
            )
            if plan.result.arguments == "snapshot" and plan.source.result is not None
            else None
        )
        return [c for c in (recorded, comparison, agreed) if c is not None]
    comparisons = _compare(plan, built, outputs, arguments)
    if plan.result.arguments == "snapshot" and plan.source.result is None and plan.reference is None:
        comparisons.append(_compare_without_result(plan, built, outputs, arguments))
    return comparisons


def _compare(plan: ReplayPlan, built: Compiled, outputs: list, arguments: list) -> list[Comparison]:
    comparisons = []
    options, source, reference = plan.options, plan.source, plan.reference
    bounds = (options.abs_error_bound, options.rel_error_bound)
    if plan.result.arguments == "snapshot" and source.result is not None:
        comparisons.append(compare_outputs(outputs, flatten(source.result), *bounds, "snapshot result"))
    if reference is not None:
        compiled = reference.compile(built.stablehlo)
        expected, _ = compiled.run(compiled.upload(arguments))
        comparisons.append(compare_outputs(outputs, compiled.download(expected), *bounds, f"platform {reference.name}"))
    return comparisons


def _compare_without_result(plan: ReplayPlan, built: Compiled, outputs: list, arguments: list) -> Comparison:
    """A snapshot with arguments but no recorded result (donated arguments): compare with the same module's
    before_optimizations dump run on the same arguments, an independent compile of what the program asked for; where
    there is none (or it is what ran), with a second compile of the module on CPU. Never a mismatch by omission."""
    source, options, result = plan.source, plan.options, plan.result
    fallback = plan.unoptimized() if built.source is source else None
    fits = fallback is not None and [s.hlo_text() for s in entry_parameter_shapes(module_proto(fallback))] == [
        describe(a) for a in arguments
    ]
    if fallback is not None and fits:
        against = f"before_optimizations {fallback.path.name}"
        compiled = compile_plain(fallback, pjrt.Platform(options.platform)).compiled
    else:
        against = "reference compile on cpu"
        compiled = pjrt.Platform("cpu").compile(built.stablehlo)
    message = f"{source.path.name}: {NO_RESULT}; compared with the {against} on the snapshot's arguments instead"
    result.warnings = [w for w in result.warnings if NO_RESULT not in w] + [message]
    plan.log(message)
    expected, _ = compiled.run(compiled.upload(arguments))
    return compare_outputs(outputs, compiled.download(expected), options.abs_error_bound, options.rel_error_bound, against)


def _copies_agree(placed: Placed, host: PerDevice, options: ReplayOptions) -> Comparison | None:
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


def _collectives(source: ReplaySource) -> list[str]:
    opcodes = module_opcodes(module_proto(source))
    return [f"{opcodes[op]} ({op})" for op in COLLECTIVE_OPCODES if op in opcodes]


def _unpartitioned(plan: ReplayPlan, placed: Placed, arguments: list, outputs: list) -> Comparison | None:
    """The global outputs compared with ``before`` on one device, or, where it does not run on one, partitioned again on N."""
    before, partitioning, options, result, log = plan.before, plan.partitioning, plan.options, plan.result, plan.log
    if before is None:
        warn(
            result,
            log,
            f"no before_optimizations dump of the module ({plan.looked}): nothing to compare the partitioned replay with",
        )
        return None
    if partitioning.replicas > 1:
        warn(
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
        compiled = compile_plain(before, pjrt.Platform(options.platform)).compiled
        expected, _ = compiled.run(compiled.upload(arguments))
        against = f"before_optimizations {before.path.name} on 1 device"
        return compare_outputs(outputs, compiled.download(expected), *bounds, against)
    except EngineError as exc:
        one_device = exc.message
    if placed.source is before:
        warn(
            result,
            log,
            f"{before.path.name} does not run on one device ({one_device}): nothing to compare the partitioned replay with",
        )
        return None
    log(
        f"{before.path.name} does not run on one device ({one_device}); comparing with it partitioned again by XLA on {partitioning.devices} devices"
    )
    assert plan.group is not None  # a partitioned plan has its devices
    again = placed.again or place_global(before, plan.group, partitioning_of(before, partitioning))
    scratch = ReplayResult(engine=result.engine, platform=result.platform, source=result.source, input_kind=result.input_kind)
    expected, _ = run_on_devices(again, arguments, global_shapes(again, before)[1], 1, scratch, lambda line: None)
    return compare_outputs(
        outputs, expected, *bounds, f"before_optimizations {before.path.name} partitioned again on {partitioning.devices} devices"
    )
