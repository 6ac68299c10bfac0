"""Compile and run one module on N devices of one PJRT client: the jaxlib side of a partitioned replay.

Like :mod:`.pjrt`, this is where private jaxlib names are touched (``CompileOptions.num_partitions``,
``DeviceAssignment``, ``LoadedExecutable.execute_sharded``, ``HloSharding``); :mod:`.partitioned`
decides what to compile and how to split and assemble the values, in plain numpy.

A module is compiled for ``partitions x replicas`` devices, the first N devices of the platform's
client, partition ``i`` on device ``i``. ``partition=True`` lets XLA's SPMD partitioner split a module
that still has its global shapes (a ``before_optimizations`` dump); ``partition=False`` compiles a
module that is already per-device (an optimized dump, rewritten so that every value is ``manual``).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlarun.errors import EngineError, EnvironmentProblem
from xlarun.replay import pjrt


@dataclass(frozen=True)
class ShardingLayout:
    """How one array is spread over the devices.

    ``tiled``: dimension ``d`` is cut into ``ways[d]`` pieces; tile ``k`` (row-major over the pieces) is
    held by the ``copies`` partitions ``devices[k * copies : (k + 1) * copies]``. ``replicated``: every
    device holds the whole array (also said of maximal and manual shardings, whose value is whole).
    ``stacked``: each device holds its own value (a module for N replicas); the global value stacks them.
    """

    kind: str  # replicated | tiled | stacked
    ways: tuple[int, ...] = ()
    copies: int = 1
    devices: tuple[int, ...] = ()

    @classmethod
    def replicated(cls) -> ShardingLayout:
        return cls("replicated")

    @classmethod
    def stacked(cls) -> ShardingLayout:
        return cls("stacked")


def _layout(sharding: Any) -> ShardingLayout:
    """A ShardingLayout of one (non-tuple) jaxlib HloSharding."""
    if not sharding.is_tiled() or sharding.is_replicated():
        return ShardingLayout.replicated()
    dims = list(sharding.tile_assignment_dimensions())
    groups = len(sharding.subgroup_types()) or (1 if sharding.replicate_on_last_tile_dim() else 0)
    copies = int(np.prod(dims[len(dims) - groups :])) if groups else 1
    ways = tuple(dims[: len(dims) - groups])
    return ShardingLayout("tiled", ways, copies, tuple(int(d) for d in sharding.tile_assignment_devices()))


def _flat_layouts(sharding: Any) -> list[ShardingLayout]:
    elements = sharding.tuple_elements()
    if elements:
        return [layout for element in elements for layout in _flat_layouts(element)]
    return [_layout(sharding)]


def _hlo_sharding(op_sharding: Any) -> Any:
    return pjrt.bindings().xla_client.HloSharding.from_proto(op_sharding)


def _flat_proto_layouts(op_sharding: Any) -> list[ShardingLayout]:
    """The layouts of an OpSharding, flattened; an empty tuple (a module returning ``()``) has none."""
    xc = pjrt.bindings().xla_client
    if op_sharding.type == xc.OpSharding.Type.TUPLE:
        return [layout for element in op_sharding.tuple_shardings for layout in _flat_proto_layouts(element)]
    return [_layout(_hlo_sharding(op_sharding))]


def sharding_from_text(text: str) -> list[ShardingLayout]:
    """The layouts of a ``sharding={...}`` attribute's value (flattened when it is a tuple sharding)."""
    try:
        return _flat_layouts(pjrt.bindings().xla_client.HloSharding.from_string(text))
    except Exception as exc:  # jaxlib's runtime error: XLA's parser refused it
        raise EngineError(f"cannot read the sharding {text[:80]}: {pjrt.first_line(exc)}") from exc


def module_shardings(module_proto: bytes) -> tuple[list[ShardingLayout] | None, list[ShardingLayout] | None]:
    """(parameters, flattened outputs) as the partitioner left them in a partitioned module's proto;
    ``None`` for what the proto does not record."""
    module = pjrt.hlo_module(module_proto)
    parameters = module.spmd_parameters_shardings
    output = module.spmd_output_sharding
    return (
        [_flat_proto_layouts(p)[0] for p in parameters] if parameters else None,
        _flat_proto_layouts(output) if output is not None else None,
    )


class DeviceGroup:
    """The first ``count`` devices of one platform's client; refuses (exit 3) when it has fewer."""

    def __init__(self, platform: pjrt.Platform, count: int):
        devices = platform.client.local_devices()
        if len(devices) < count:
            hint = (
                "xlarun starts its replay worker with --xla_force_host_platform_device_count=N for a partitioned module; "
                "in-process, set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax starts"
                if platform.name == "cpu"
                else f"replay on a machine with {count} {platform.name} devices, or replay on cpu (--platform cpu)"
            )
            raise EnvironmentProblem(
                f"the module is partitioned for {count} devices, and {platform.name} here has {len(devices)}", hint
            )
        self.platform = platform
        self.devices = list(devices[:count])

    def compile(
        self, stablehlo: bytes, partitions: int, replicas: int, *, partition: bool, debug_options: dict | None = None
    ) -> MultiDeviceModule:
        """Compile for ``partitions x replicas`` devices; ``partition``: run XLA's SPMD partitioner on it.
        ``debug_options``: DebugOptions fields for this compile only (a bisection's disabled passes)."""
        if partitions * replicas != len(self.devices):
            raise EngineError(
                f"a module for {partitions} partitions x {replicas} replicas cannot be compiled for the {len(self.devices)} "
                f"{self.platform.name} devices this replay was planned on"
            )
        b = pjrt.bindings()
        xc = b.xla_client
        options = pjrt.compile_options(b, debug_options or {})
        options.num_partitions, options.num_replicas = partitions, replicas
        build = options.executable_build_options
        build.use_spmd_partitioning = partitions > 1
        # shard_map and jax's shardings arrive as xla.sdy.* attributes, which only Shardy's import reads; a jaxlib
        # without Shardy (0.4.30) has only the GSPMD partitioner, which reads the HLO's own sharding attributes
        if hasattr(build, "use_shardy_partitioner"):
            build.use_shardy_partitioner = partition
        ids = np.array([d.id for d in self.devices]).reshape(replicas, partitions)
        options.device_assignment = xc.DeviceAssignment.create(ids)
        start = time.perf_counter()
        try:
            if hasattr(self.platform.client, "compile_and_load"):
                executable = self.platform.client.compile_and_load(stablehlo, b.device_list(tuple(self.devices)), options)
            else:  # jaxlib before 0.6.2: the devices come from the assignment
                executable = self.platform.client.compile(stablehlo, options)
        except Exception as exc:
            raise EngineError(
                f"compile for {len(self.devices)} {self.platform.name} devices failed: {pjrt.first_line(exc)}"
            ) from exc
        return MultiDeviceModule(executable, self.devices, time.perf_counter() - start)


@dataclass
class MultiDeviceModule:
    """A loaded executable over N devices; arguments and outputs are one host array per device."""

    executable: Any
    devices: list
    compile_s: float

    def shardings(self) -> tuple[list[ShardingLayout], list[ShardingLayout]] | None:
        """(parameters, flattened outputs) as XLA's partitioner chose them for this executable; ``None`` when it
        was not partitioned (a module for N replicas: every device has its own values)."""
        parameters, outputs = self.executable.get_parameter_shardings(), self.executable.get_output_shardings()
        if parameters is None or outputs is None:
            return None
        return (
            [_flat_proto_layouts(p)[0] for p in parameters],
            [layout for o in outputs for layout in _flat_proto_layouts(o)],
        )

    def upload(self, per_device: list[list[np.ndarray]]) -> list:
        """One array per parameter over all devices, from one host value per device (``per_device[p][d]``)."""
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        # execute_sharded only reads each device's buffer; a replicated sharding carries buffers of any content
        whole = NamedSharding(Mesh(np.array(self.devices), ("devices",)), PartitionSpec())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with pjrt.x64_switch()(True):
                return [
                    jax.make_array_from_single_device_arrays(
                        np.shape(values[0]),
                        whole,
                        [jax.device_put(np.asarray(v), d) for v, d in zip(values, self.devices, strict=True)],
                    )
                    for values in per_device
                ]

    def run(self, arguments: list) -> tuple[Any, float]:
        """Execute once on every device; (the results, seconds)."""
        start = time.perf_counter()
        try:
            results = self.executable.execute_sharded(arguments)
            outputs = results.disassemble_into_single_device_arrays()
            for per_device in outputs:
                for out in per_device:
                    out.block_until_ready()
        except Exception as exc:
            raise EngineError(f"execution on {len(self.devices)} devices failed: {pjrt.first_line(exc)}") from exc
        return outputs, time.perf_counter() - start

    @staticmethod
    def download(outputs: list) -> list[list[np.ndarray]]:
        """Host copies, ``[output][device]``."""
        return [[np.asarray(out) for out in per_device] for per_device in outputs]
