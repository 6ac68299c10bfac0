"""Run one module on N devices from global arguments, and give back its global outputs: a bisection's sharded step.

This runs in the compile probe's child (:mod:`.probe`), which starts with N host devices. A request says how:

- ``partition: true``: the module has its global shapes (a pass step before the SPMD partitioner, or the
  ``before_optimizations`` module); XLA's partitioner splits it, and the executable says how each value is spread;
- ``partition: false``: the module is already per-device code (a step after the partitioner), rewritten as a
  manual module (:func:`.partitioned.rewrite_for_devices`, done by the caller); its parameters and outputs are
  spread as XLA spreads them when it partitions ``layouts_from`` (the ``before_optimizations`` module), which is
  what the captured compile did.

The global arguments are cut per device, the per-device outputs put back together: every step of a bisection is
compared with the same global reference, whichever side of the partitioner it is on.
"""

from __future__ import annotations

import math

import numpy as np

from xlarun.errors import EngineError
from xlarun.replay import pjrt
from xlarun.replay.multidevice import DeviceGroup, MultiDeviceModule, ShardingLayout
from xlarun.replay.partitioned import assemble, shard


class ShardedRunner:
    """The child's side: one device group, and the layouts learnt from partitioning a reference module (cached by file)."""

    def __init__(self, platform: pjrt.Platform):
        self.platform = platform
        self._groups: dict[int, DeviceGroup] = {}
        self._layouts: dict[str, tuple[list[ShardingLayout], list[ShardingLayout]]] = {}

    def group(self, count: int) -> DeviceGroup:
        """The first ``count`` devices (EnvironmentProblem, exit 3, when the platform has fewer)."""
        if count not in self._groups:
            self._groups[count] = DeviceGroup(self.platform, count)
        return self._groups[count]

    def compile(self, stablehlo: bytes, spec: dict, debug_options: dict | None) -> MultiDeviceModule:
        return self.group(spec["count"]).compile(
            stablehlo, spec["count"], 1, partition=bool(spec["partition"]), debug_options=debug_options
        )

    def run(self, stablehlo: bytes, spec: dict, debug_options: dict | None, arguments: list) -> tuple[list[np.ndarray], float]:
        """(the global outputs, compile seconds) of the module on ``spec["count"]`` devices."""
        module = self.compile(stablehlo, spec, debug_options)
        if spec["partition"]:
            chosen = module.shardings()
            if chosen is None:
                raise EngineError("XLA did not partition the module: it has no shardings to split the arguments by")
            parameter_layouts, output_layouts = chosen
            local = [_local_dims(np.shape(a), layout) for a, layout in zip(arguments, parameter_layouts, strict=True)]
        else:
            parameter_layouts, output_layouts = self.layouts(spec["layouts_from"], spec["count"])
            local = [tuple(dims) for dims in spec["local"]]
        if spec.get("stack"):  # each value as its per-device pieces, stacked: values of per-device modules, paired by name
            count = spec["count"]
            pieces = [
                shard(a, layout, tuple(dims), count) for a, layout, dims in zip(arguments, parameter_layouts, local, strict=True)
            ]
            outputs, _ = module.run(module.upload(pieces))
            return [np.stack(per_device) for per_device in module.download(outputs)], module.compile_s
        results = [tuple(dims) for dims in spec["result_dims"]]
        if len(output_layouts) == 1 and len(results) != 1:  # one sharding for a whole tuple result: each element has it
            output_layouts = output_layouts * len(results)
        if len(parameter_layouts) != len(arguments) or len(local) != len(arguments) or len(output_layouts) != len(results):
            raise EngineError(
                f"the module's {len(local)} parameters and {len(results)} outputs do not fit the {len(parameter_layouts)} "
                f"parameter and {len(output_layouts)} output shardings of the partitioned program"
            )
        count = spec["count"]
        per_device = [shard(a, layout, dims, count) for a, layout, dims in zip(arguments, parameter_layouts, local, strict=True)]
        outputs, _ = module.run(module.upload(per_device))
        host = module.download(outputs)
        if len(host) != len(results):
            raise EngineError(f"the module returned {len(host)} outputs on each device; the program has {len(results)}")
        return [
            assemble(p, layout, dims) for p, layout, dims in zip(host, output_layouts, results, strict=True)
        ], module.compile_s

    def layouts(self, path: str, count: int) -> tuple[list[ShardingLayout], list[ShardingLayout]]:
        """How XLA spreads the parameters and outputs of the (global) module in ``path`` over ``count`` devices."""
        if path not in self._layouts:
            with open(path, "rb") as handle:
                module = self.group(count).compile(handle.read(), count, 1, partition=True)
            chosen = module.shardings()
            if chosen is None:
                raise EngineError("XLA did not partition the before_optimizations module: no shardings to spread values by")
            self._layouts[path] = chosen
        return self._layouts[path]


def _local_dims(shape: tuple[int, ...], layout: ShardingLayout) -> tuple[int, ...]:
    if layout.kind != "tiled":
        return tuple(shape)
    return tuple(math.ceil(n / w) for n, w in zip(shape, layout.ways, strict=True))
