"""The inputs stage: the arguments a compiled module is run on.

A snapshot's captured arguments where there are some (and ``--inputs`` allows), else seeded fake data
(:mod:`.fakedata`) of the module's parameter shapes; a partitioned module gets fake data of the program's
global shapes, cut per device when it runs (:mod:`.run`).
"""

from __future__ import annotations

from xlarun.errors import InputError
from xlarun.replay.compiled import Built
from xlarun.replay.fakedata import fake_arguments
from xlarun.replay.limits import check_data_size
from xlarun.replay.literals import describe
from xlarun.replay.placed import Placed
from xlarun.replay.plan import ReplayPlan
from xlarun.replay.recompile import Compiled
from xlarun.replay.sources import entry_parameter_shapes, entry_result_shape

#: Opcodes that wait for the host to send data a replay never sends: the run would hang.
WAITS_FOR_HOST = {
    "infeed": "reads its input from the host (infeed)",
    "host-recv": "receives from the host (recv)",
    "outfeed": "writes to the host (outfeed), which nobody reads",
    "host-send": "sends to the host (send), which nobody receives",
}


def plan_inputs(plan: ReplayPlan, built: Built) -> list:
    """The arguments to run ``built`` on. Raises InputError for a module that would wait on the host, arguments
    that do not fit it, or data over ``--max-data-size``."""
    if isinstance(built, Placed):
        return _global_arguments(plan, built)
    _refuse_host_waits(built)
    arguments = _arguments(plan, built)
    plan.log(f"compiled {built.source.path.name} for {plan.platform.describe()} in {built.compiled.compile_s:.3f} s")
    return arguments


def _arguments(plan: ReplayPlan, built: Compiled) -> list:
    source, options, result = plan.source, plan.options, plan.result
    shapes = entry_parameter_shapes(built.module_proto)
    use_snapshot = options.inputs == "snapshot" or (options.inputs == "auto" and source.arguments is not None)
    if options.inputs == "snapshot" and source.arguments is None:
        raise InputError(
            f"{source.path.name} holds no captured arguments",
            "replay a snapshot (capture with --xla_dump_hlo_snapshots), or use --inputs fake",
        )
    if not use_snapshot:
        result.arguments = "fake"
        output = entry_result_shape(built.module_proto)
        check_data_size(sum(s.nbytes() for s in shapes), output.nbytes() if output else 0, options.max_data_bytes)
        return fake_arguments(shapes, options.seed or 0)
    assert source.arguments is not None  # use_snapshot: they were captured
    expected = [s.hlo_text() for s in shapes]
    actual = [describe(a) for a in source.arguments]
    if expected != actual:
        raise InputError(
            f"the snapshot's arguments ({', '.join(actual)}) do not fit the module's parameters ({', '.join(expected)})",
            "the snapshot belongs to another module",
        )
    result.arguments = "snapshot"
    return source.arguments


def _global_arguments(plan: ReplayPlan, placed: Placed) -> list:
    devices = plan.partitioning.devices
    check_data_size(
        sum(s.nbytes() for s in placed.parameters) * devices,
        sum(s.nbytes() for s in placed.results) * devices,
        plan.options.max_data_bytes,
    )
    arguments = _recorded_global_arguments(plan, placed)
    if arguments is None:
        plan.result.arguments = "fake"
        arguments = fake_arguments(placed.global_parameters, plan.options.seed or 0)
    plan.log(
        f"compiled {placed.source.path.name} for {devices} devices of {plan.platform.describe()} in {placed.module.compile_s:.3f} s"
    )
    return arguments


def _recorded_global_arguments(plan: ReplayPlan, placed: Placed) -> list | None:
    """The recorded global arguments (``xlarun.record_arguments``'s snapshot) when there are some that fit the
    program's global parameters and ``--inputs`` allows; else None (seeded fake data), said when some do not fit."""
    recorded = plan.source.arguments
    if recorded is None or plan.options.inputs == "fake":
        return None
    expected = [s.hlo_text() for s in placed.global_parameters]
    actual = [describe(a) for a in recorded]
    if expected == actual:
        plan.result.arguments = "snapshot"
        return recorded
    message = (
        f"the snapshot's arguments ({', '.join(actual)}) are not the program's global parameters ({', '.join(expected)}): "
        f"the {plan.partitioning.devices}-device replay uses seeded fake data instead"
    )
    if plan.options.inputs == "snapshot":
        raise InputError(message, "use --inputs fake, or record the step's arguments with xlarun.record_arguments")
    plan.result.warnings.append(message)
    plan.log(message)
    return None


def _refuse_host_waits(built: Compiled) -> None:
    opcodes = built.opcodes
    for opcode, what in WAITS_FOR_HOST.items():
        if opcode in opcodes:
            raise InputError(
                f"{built.source.path.name} {what} (instruction {opcodes[opcode]}): a replay has no host side, so the run would wait forever",
                "replay the module without its host transfers (infeed/outfeed/send/recv to the host), or on the job that serves them",
            )
