"""The plan of a replay bisection: what is replayed, where, and with which passes off, made once before any replay.

``plan_bisection`` reads the module's pass timeline and its ``before_optimizations`` dump, refuses what a replay
bisection cannot do, says which passes each step is recompiled without, and, for a module partitioned for N
devices, where each step runs (:class:`DevicePlan`). The later stages are handed the plan, which carries the options:
the replayer (:mod:`.replayer`, :mod:`.sharded_replayer`) compiles and runs what it names, and every comparison
of a step with the reference goes through :meth:`BisectPlan.compare`, the one place the tolerances apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xlarun.bisect.bisect_options import BisectOptions
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay import pjrt
from xlarun.replay.compare import Comparison, compare_outputs
from xlarun.replay.partitioned import COLLECTIVE_OPCODES, Partitioning, partitioning_of_text
from xlarun.replay.sources import module_opcodes
from xlarun.see.diff import PassStep, pass_steps

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import FileInfo, ModuleInfo

_NOT_PASSES = {"pipeline-start", "pipeline-end"}
#: Passes a program cannot run without (measured, jax 0.10.2 CPU): without sharding-remover a JAX program
#: calls a 'Sharding' custom call the host has no kernel for; without copy-insertion buffer assignment
#: fails on parameters or constants that are outputs. They move no numbers, so they are never disabled.
NEVER_DISABLED = ("sharding-remover", "copy-insertion", "flatten-call-graph", "layout-assignment")
#: Passes without which a global module is not split over its N devices: kept on when one is compiled for N.
PARTITIONER_PASSES = ("shardy-xla", "sharding-propagation", "spmd-partitioning", "spmd-cleanup")
#: The partitioner's pass, and the nested pipeline it runs on the module it has just made per-device.
PARTITIONER, _PARTITIONER_CLEANUP = "spmd-partitioning", "spmd-cleanup"
_LAYOUT_KEY = "entry_computation_layout={"


@dataclass
class BisectPlan:
    """One replay bisection's plan: the module, its timeline, the reference dump, the passes each step is
    recompiled without, and (partitioned modules) where each step runs."""

    module: ModuleInfo
    options: BisectOptions
    steps: list[PassStep]
    #: The before_optimizations text dump: the reference, and the arguments' shapes.
    before: FileInfo
    #: The DebugOptions every step is compiled with, and the passes they disable.
    debug_options: dict
    disabled: list[str]
    #: Where each step runs when the module is partitioned for N devices; None: every step on one device.
    devices: DevicePlan | None = None

    @property
    def reference_name(self) -> str:
        """What each step is compared with, in words."""
        options = self.options
        if options.reference == "snapshot":
            return "snapshot result"
        return f"before_optimizations on {options.reference_platform}" if options.reference_platform else "before_optimizations"

    def compare(self, actual: list, expected: list, name: str) -> Comparison:
        """``actual`` against ``expected`` within the bisection's tolerances."""
        return compare_outputs(actual, expected, self.options.abs_tolerance, self.options.rel_tolerance, name)


def plan_bisection(store: LocalStore, module: ModuleInfo, options: BisectOptions) -> BisectPlan:
    """The plan for bisecting ``module`` by replay. Raises InputError for a module a replay bisection cannot do
    (no per-pass dumps, elided constants, no before_optimizations text), EnvironmentProblem when the platform has
    fewer devices than a partitioned module needs."""
    steps = pass_steps(module)
    refuse_unbisectable(module, steps)
    before = next((f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text"), None)
    if before is None:
        raise InputError(f"{module.label} has no before_optimizations text dump", "capture with dump.formats including text")
    partitioning = partitioning_of_text(store.read_file(module.run_id, before.path)[:4096].decode("utf-8", errors="replace"))
    devices = plan_devices(store, module, steps, before, partitioning, options) if partitioning.devices > 1 else None
    debug_options, disabled = _debug_options(options, steps, sharded=devices is not None)
    return BisectPlan(module, options, steps, before, debug_options, disabled, devices)


def timeline_pass_names(steps: list[PassStep]) -> list[str]:
    """Every pass the timeline names (after or before a dump), in the order they first appear."""
    names = []
    for step in steps:
        for name in (step.after_pass, step.before_pass):
            if name and name not in _NOT_PASSES:
                names.append(name)
    return list(dict.fromkeys(names))


def changing_pass_names(steps: list[PassStep]) -> list[str]:
    """The passes that changed the module (their dump differs from the one before), in timeline order.

    Only these can be a single culprit: the pipeline is deterministic, so disabling a pass that left
    every module as it was changes nothing on its own.
    """
    return list(dict.fromkeys(s.after_pass for s in steps if s.changed and s.after_pass and s.after_pass not in _NOT_PASSES))


def refuse_unbisectable(module: ModuleInfo, steps: list[PassStep]) -> None:
    """Raise InputError when the module lacks what a replay bisection needs."""
    if not steps:
        raise InputError(
            f"{module.label} was captured without per-pass dumps: there is no pass timeline to bisect",
            "set dump.pass_re: '.*' and dump.formats: [text] in the spec (dump.large_constants: true and dump.snapshots: true help too), capture again",
        )
    if module.elided_constants:
        raise InputError(
            f"{module.label} was dumped without large constants: its {{...}} constants would be replayed as garbage",
            "set dump.large_constants: true in the spec and capture again",
        )


def _debug_options(options: BisectOptions, steps: list[PassStep], sharded: bool = False) -> tuple[dict, list[str]]:
    if options.recompile == "all":
        if sharded:  # the partitioner is an HLO pass too: without it no global step is split over the devices
            raise InputError(
                "--recompile all disables the SPMD partitioner, which a partitioned module's steps need",
                "use --recompile timeline (the partitioner's passes are kept on) or --recompile full",
            )
        return {"xla_disable_all_hlo_passes": True}, []
    never = NEVER_DISABLED + (PARTITIONER_PASSES if sharded else ())
    disabled = [n for n in timeline_pass_names(steps) if n not in never] if options.recompile == "timeline" else []
    disabled = list(dict.fromkeys(disabled + list(options.extra_disabled)))
    return ({"xla_disable_hlo_passes": ",".join(disabled)} if disabled else {}), disabled


def disable(passes: list[str]) -> dict:
    return {"xla_disable_hlo_passes": ",".join(passes)} if passes else {}


@dataclass
class DevicePlan:
    """Where each step of a partitioned module's bisection runs."""

    partitioning: Partitioning
    #: Index (in the timeline) of the first per-device step; ``None``: the timeline never reaches the partitioner.
    first_per_device: int | None
    #: Devices the reference and the global steps run on: 1 (the program's meaning) or N.
    reference_devices: int
    #: Why the reference runs there (for the result's warnings when it is N).
    why: str = ""

    @property
    def devices(self) -> int:
        return self.partitioning.devices

    def step_devices(self, index: int) -> int:
        """How many devices timeline step ``index`` runs on (-1: the before_optimizations module)."""
        per_device = self.first_per_device is not None and index >= self.first_per_device
        return self.devices if per_device else self.reference_devices


def plan_devices(
    store: LocalStore,
    module: ModuleInfo,
    steps: list[PassStep],
    before: FileInfo,
    partitioning: Partitioning,
    options: BisectOptions,
) -> DevicePlan:
    """Which steps are per-device code and where the reference runs; refuses what a sharded bisection cannot do."""
    if partitioning.replicas > 1:
        raise InputError(
            f"{module.label} is compiled for {partitioning.describe()}: a replay bisection runs a module over partitions, not replicas",
            "rerun mode (`xlarun bisect SPEC --check ...`) bisects by running the job itself",
        )
    if options.reference != "before" or options.reference_platform:
        raise InputError(
            f"{module.label} is partitioned for {partitioning.devices} devices: its snapshot (if any) holds one device's "
            "values, and the reference runs where the steps run",
            "use --reference before, without --reference-platform",
        )
    _require_devices(options.platform, partitioning.devices, module.label)
    before_text = store.read_file(module.run_id, before.path).decode("utf-8", errors="replace")
    collectives = sorted(op for op in module_opcodes(pjrt.text_to_module_proto(before_text)) if op in COLLECTIVE_OPCODES)
    first = _first_per_device(store, module, steps, _entry_layout(before_text))
    if not collectives:
        return DevicePlan(partitioning, first, 1)
    why = (
        f"the before_optimizations module holds per-device code ({', '.join(collectives)}), so it has no one-device form: "
        f"the reference and the steps before the partitioner ran partitioned by XLA on {partitioning.devices} devices, "
        "and what the partitioner does to the numbers is part of the reference"
    )
    return DevicePlan(partitioning, first, partitioning.devices, why)


def _require_devices(platform: str, count: int, label: str) -> None:
    """Refuse (exit 3) when ``count`` devices of ``platform`` cannot be had (host CPU devices always can: the
    worker is started with that many)."""
    if platform in ("cpu", "host"):
        return
    try:
        found = len(pjrt.Platform(platform).client.local_devices())
        detail = f"{platform} here has {found}"
    except EnvironmentProblem as exc:
        found, detail = 0, exc.message
    if found < count:
        raise EnvironmentProblem(
            f"{label} is partitioned for {count} devices and its bisection runs each step on {count} {platform} devices; {detail}",
            f"bisect on a machine with {count} {platform} devices, or on {count} host CPU devices (--platform cpu)",
        )


def _entry_layout(text: str) -> str | None:
    """The ``entry_computation_layout={...}`` of the ``HloModule`` line (its braces nest: ``f32[4]{0}``)."""
    start = text.find(_LAYOUT_KEY, 0, text.find("\n") if "\n" in text else len(text))
    if start < 0:
        return None
    depth = 0
    for end in range(start + len(_LAYOUT_KEY) - 1, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return text[start : end + 1]
    return None


def _first_per_device(store: LocalStore, module: ModuleInfo, steps: list[PassStep], global_layout: str | None) -> int | None:
    """The first step that is per-device code: its entry shapes are no longer the program's, or the partitioner
    has run (a fully replicated program keeps its shapes)."""
    for index, step in enumerate(steps):
        if step.after_pass == PARTITIONER or step.pipeline == _PARTITIONER_CLEANUP:
            return index
        head = store.read_file(module.run_id, step.path)[:65536].decode("utf-8", errors="replace")
        layout = _entry_layout(head)
        if global_layout is not None and layout is not None and layout != global_layout:
            return index
    return None
