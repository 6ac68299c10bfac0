"""Bisect a module partitioned for N devices: each pass step runs where its code belongs (:class:`.bisect_plan.DevicePlan`).

A partitioned module's timeline has two kinds of step. Before the SPMD partitioner, a step is the whole
program with sharding annotations (global shapes); from the partitioner on, it is per-device code (each
device's shapes, collectives between them). Per-device steps always run on the N devices: the global
arguments are cut by the shardings XLA gives the program's parameters when it partitions the
``before_optimizations`` module (what the captured compile did), and the per-device outputs put back together.

The reference, and the global steps with it, run on **one device** when the ``before_optimizations`` module
can (no collectives in it): that is what the program means whatever the partitioning, so the partitioner's
own effect on the numbers (a sum split into per-device partial sums, say) shows up at the first per-device
step and is reported as the partitioner's. Running the global steps partitioned on N devices instead would
make XLA partition each one again in its recompile, the very passes under test, and hide them.
When the program holds per-device code of its own (``shard_map`` bodies, collectives it calls), it has no
one-device meaning: the reference and the global steps are then partitioned by XLA on the N devices (the
partitioner's passes kept on), and the result says the partitioner itself is part of the reference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xlarun.bisect.bisect_plan import PARTITIONER, DevicePlan
from xlarun.bisect.replayer import Log, StepReplayer
from xlarun.errors import EngineError
from xlarun.replay import pjrt
from xlarun.replay.deoptimize import deoptimize_hlo_text
from xlarun.replay.partitioned import rewrite_for_devices
from xlarun.replay.sources import entry_parameter_shapes, entry_result_shape

if TYPE_CHECKING:
    from xlarun.bisect.bisect_options import BisectOptions
    from xlarun.bisect.bisect_plan import BisectPlan
    from xlarun.see.diff import PassStep
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo


def open_replayer(store: LocalStore, plan: BisectPlan, log: Log) -> StepReplayer:
    """The replayer ``plan`` asks for: each step where the :class:`DevicePlan` says for a partitioned module, else on one device."""
    if plan.devices is not None:
        return ShardedReplayer(store, plan.module, plan.options, dict(plan.debug_options), log, plan.devices, plan.steps)
    return StepReplayer(store, plan.module, plan.options, dict(plan.debug_options), log)


class ShardedReplayer(StepReplayer):
    """A :class:`StepReplayer` whose steps run on the devices a :class:`DevicePlan` says."""

    def __init__(
        self,
        store: LocalStore,
        module: ModuleInfo,
        options: BisectOptions,
        debug_options: dict,
        log: Log,
        plan: DevicePlan,
        steps: Any,
    ) -> None:
        super().__init__(store, module, options, debug_options, log)
        self.plan = plan
        self.device_count = plan.devices
        before = next(f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text")
        self.before_path = before.path
        self._per_device = ({s.path for s in steps[plan.first_per_device :]} if plan.first_per_device is not None else set()) - {
            before.path
        }
        self._global_results: list[list[int]] | None = None
        self._specs: dict[str, dict | None] = {}
        #: Modules given as text are per-device code (the instruction search between two per-device steps).
        self.texts_per_device = False

    def devices_for(self, path: str) -> dict | None:
        if path not in self._specs:
            self._specs[path] = self._spec(path)
        return self._specs[path]

    def _spec(self, path: str) -> dict | None:
        if path.startswith("text:"):  # an instruction search between global steps: on one device, as the reference
            return None
        if path in self._per_device:
            proto = self.compilable_proto(path)
            return {
                "count": self.plan.devices,
                "partition": False,
                "layouts_from": self._module_file(self.before_path),
                "local": [list(s.dimensions) for s in entry_parameter_shapes(proto)],
                "result_dims": self._result_dims(),
            }
        if self.plan.reference_devices == 1:
            return None
        return {"count": self.plan.devices, "partition": True, "result_dims": self._result_dims()}

    def run_text(self, text: str) -> list | None:
        """As :meth:`StepReplayer.run_text`; while ``texts_per_device`` (the instruction search between two per-device
        steps), on the N devices, each value given back as its N per-device pieces stacked (they pair by name)."""
        if not self.texts_per_device:
            return super().run_text(text)
        proto = pjrt.text_to_module_proto(rewrite_for_devices(deoptimize_hlo_text(text).text))
        key = f"text:{hash(text)}"
        self._specs[key] = {
            "count": self.plan.devices,
            "partition": False,
            "layouts_from": self._module_file(self.before_path),
            "local": [list(s.dimensions) for s in entry_parameter_shapes(proto)],
            "stack": True,
        }
        outputs, _, error = self._run_in_worker(key, proto)
        if error is not None:
            raise EngineError(error)
        return outputs

    def _module_file(self, path: str, proto: bytes | None = None) -> str:
        # run() hands over the dump as written; a per-device step is compiled rewritten as a manual module
        return super()._module_file(path, None if path in self._per_device else proto)

    def compilable_proto(self, path: str) -> bytes:
        if path not in self._per_device:
            return super().compilable_proto(path)
        return pjrt.text_to_module_proto(rewrite_for_devices(deoptimize_hlo_text(self.text(path)).text))

    def _result_dims(self) -> list[list[int]]:
        """The program's global result shapes (the before_optimizations module's), flattened."""
        if self._global_results is None:
            result = entry_result_shape(super().compilable_proto(self.before_path))
            leaves = (result.leaves() if result.is_tuple else [result]) if result is not None else []
            self._global_results = [list(leaf.dimensions) for leaf in leaves]
        return self._global_results


def describe_devices(result: Any, plan: DevicePlan, steps: list[PassStep], log: Log) -> None:
    """Say on ``result`` (a BisectResult) where the steps ran, and log it."""
    result.devices, result.reference_devices = plan.devices, plan.reference_devices
    result.per_device_from_step = steps[plan.first_per_device].step if plan.first_per_device is not None else None
    where = "on 1 device" if plan.reference_devices == 1 else f"partitioned by XLA on {plan.devices} devices"
    result.reference = f"{result.reference} {where}"
    if result.per_device_from_step is None:
        result.warnings.append(f"no step of the timeline is per-device code: every step ran {where}")
    log(
        f"{result.subject} is partitioned for {plan.devices} devices: steps from {result.per_device_from_step} on "
        f"(after the SPMD partitioner) run on {plan.devices} devices, the reference and the steps before them {where}"
    )
    if plan.why:
        result.warnings.append(plan.why)
        log(plan.why)


def blame_partitioner(result: Any, steps: list[PassStep], first: int) -> None:
    """The first per-device step moved the numbers: that is the SPMD partitioner's work, whatever its dump is named after."""
    step = steps[first]
    if step.after_pass == PARTITIONER:
        return
    result.culprit_pass = PARTITIONER
    result.culprit_pipeline = next((s.pipeline for s in steps if s.after_pass == PARTITIONER), step.pipeline)
    result.culprit_run = result.culprit_runs = 1
    result.warnings.append(
        f"step {step.step} ({step.label}) is the first dump of the per-device module the SPMD partitioner made: "
        "the numbers moved when the program was split over the devices"
    )


def instruction_search_refusal(plan: DevicePlan, first: int) -> str | None:
    """Why the culprit step's first moving instruction cannot be looked for (``None``: it can). Values pair by name
    between two per-device steps (each value's N pieces) or two global steps run on one device; not across the
    partitioner (global values against per-device pieces), nor between global steps partitioned again by XLA."""
    per_device = plan.first_per_device is not None and first >= plan.first_per_device
    if per_device and first > plan.first_per_device:  # type: ignore[operator]  # not None: per_device says so
        return None
    if per_device:
        return (
            "the first moving instruction was not looked for: the culprit step is the partitioner's first per-device "
            "module, whose values (each device's pieces) do not pair with the whole program's before it"
        )
    if plan.reference_devices == 1:
        return None
    return (
        f"the first moving instruction was not looked for: the steps before the partitioner run partitioned again by XLA "
        f"on {plan.devices} devices, which may spread each value differently"
    )
