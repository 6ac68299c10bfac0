"""Replay a partitioned module on its N devices, and check it against the program it was partitioned from.

A module is partitioned when its config says ``num_partitions`` or ``replica_count`` above 1 (the text's
``HloModule`` line; the proto's ``device_assignment``). Such a module runs on N = partitions x replicas
devices of one PJRT client (:mod:`.multidevice`; the replay worker starts with that many host devices):

- an optimized dump is already per-device: it is rewritten for recompilation (:mod:`.deoptimize`), then
  every value is made ``manual`` and combined (tuple) collectives are split, which XLA's partitioner
  asks of a manual module (:func:`rewrite_for_devices`), and compiled without partitioning it again;
- a ``before_optimizations`` dump has its global shapes: XLA's SPMD partitioner (Shardy) splits it.

The arguments are seeded fake data of the global shapes (the ``before_optimizations`` module's
parameters), cut per device the way the module's parameter shardings say; the per-device outputs are
put back together by its output shardings. The global outputs are compared with the
``before_optimizations`` module run on one device on the same global arguments, or, where that module
cannot run on one device (``shard_map`` bodies are per-device code), with it partitioned again by XLA on
the N devices: either way a check of what the partitioner and the optimizer made of the program.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xlarun.errors import EngineError, InputError
from xlarun.hlo.lex import LineError, split_top_level, walk
from xlarun.hlo.proto import find_module_proto
from xlarun.hlo.protowire import fields_by_number, first
from xlarun.replay.literals import Shape
from xlarun.replay.sources import ReplaySource, entry_parameter_shapes, entry_result_shape, read_dump_bytes

Log = Callable[[str], None]
_PARTITIONS = re.compile(r"^HloModule [^\n]*\bnum_partitions=(\d+)", re.MULTILINE)
_REPLICAS = re.compile(r"^HloModule [^\n]*\breplica_count=(\d+)", re.MULTILINE)
# HloModuleProto.device_assignment = 15: DeviceAssignmentProto{replica_count = 1, computation_count = 2}
_MODULE_DEVICE_ASSIGNMENT, _ASSIGNMENT_REPLICAS, _ASSIGNMENT_COMPUTATIONS = 15, 1, 2
#: Collectives XLA's combiners merge into one tuple-shaped instruction; each operand is independent of the others.
_SPLITTABLE = ("all-reduce", "all-gather", "reduce-scatter")
_LINE = re.compile(r"^(?P<indent>\s*)(?P<root>ROOT )?(?P<name>%?[\w.\-]+) = (?P<rest>.*)$")
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


@dataclass(frozen=True)
class Partitioning:
    """How many devices a module was compiled for: ``partitions`` (SPMD) times ``replicas``."""

    partitions: int = 1
    replicas: int = 1

    @property
    def devices(self) -> int:
        return self.partitions * self.replicas

    def describe(self) -> str:
        parts = [
            f"{self.partitions} partitions" if self.partitions > 1 else "",
            f"{self.replicas} replicas" if self.replicas > 1 else "",
        ]
        return " x ".join(p for p in parts if p) or "1 device"


def partitioning_of_text(text: str) -> Partitioning:
    """From the ``HloModule`` line of HLO text."""
    partitions, replicas = _PARTITIONS.search(text), _REPLICAS.search(text)
    return Partitioning(int(partitions.group(1)) if partitions else 1, int(replicas.group(1)) if replicas else 1)


def partitioning_of_module_proto(module: dict) -> Partitioning:
    """From a decoded HloModuleProto's device assignment (one device when it has none)."""
    raw = first(module, _MODULE_DEVICE_ASSIGNMENT)
    if not isinstance(raw, bytes):
        return Partitioning()
    assignment = fields_by_number(raw)
    return Partitioning(
        max(1, int(first(assignment, _ASSIGNMENT_COMPUTATIONS, 1))), max(1, int(first(assignment, _ASSIGNMENT_REPLICAS, 1)))
    )


def partitioning_of_source(source: ReplaySource) -> Partitioning:
    """How many devices the module of a loaded dump file was compiled for."""
    if source.module_proto is not None:
        found = partitioning_of_module_proto(fields_by_number(source.module_proto))
        if found.devices > 1 or source.text is None:
            return found
    return partitioning_of_text(source.text or "")


def partitioning_of_file(path: str | Path, data: bytes | None = None) -> Partitioning:
    """How many devices a dump file's module was compiled for, read without jaxlib (one device for what is not HLO)."""
    try:
        raw = read_dump_bytes(Path(path), data)
    except (OSError, InputError):
        return Partitioning()
    if raw[:64].lstrip().startswith(b"HloModule"):
        return partitioning_of_text(raw[:4096].decode("utf-8", errors="replace"))
    try:
        return partitioning_of_module_proto(find_module_proto(raw))
    except InputError:
        return Partitioning()


# ---- the per-device module ----


def rewrite_for_devices(text: str) -> str:
    """An optimized (already partitioned) module as a manual SPMD module XLA compiles for N devices as it is.

    Sharding attributes are dropped and the entry parameters and root marked ``sharding={manual}`` (the
    partitioner leaves manual values alone); a collective over a tuple of operands becomes one per operand
    and a tuple of them (a manual module may only hold single-operand collectives).
    """
    lines, in_entry = [], False
    for line in text.splitlines():
        line = _expand_mesh_groups(_drop_shardings(line))
        if line.startswith("ENTRY "):
            in_entry = True
        elif line.startswith("}"):
            in_entry = False
        found = _LINE.match(line)
        if found is None:
            lines.append(line)
            continue
        if in_entry and (found.group("root") or " parameter(" in found.group("rest")):
            line += ", sharding={manual}"
        lines.extend(_split_collective(line, _LINE.match(line) or found))
    return "\n".join(lines) + "\n"


_MESH_GROUPS = re.compile(r"replica_groups=mesh\[(?P<axes>[^\]]*)\](?:, device_ids=\((?P<ids>[^{}]*?)\))? \{(?P<over>[^}]*)\}")
_MESH_AXIS = re.compile(r"'([^']+)'=(\d+)")
_IOTA = re.compile(r"^\[(?P<dims>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?$")


def _expand_mesh_groups(line: str) -> str:
    """``replica_groups=mesh[...] {'axis'}`` (XLA's mesh-axes form, which the StableHLO route loses) as explicit groups."""
    found = _MESH_GROUPS.search(line)
    if found is None:
        return line
    axes = [(name, int(size)) for name, size in _MESH_AXIS.findall(found.group("axes"))]
    over = [name.strip().strip("'") for name in found.group("over").split(",") if name.strip()]
    names = [name for name, _ in axes]
    if not axes or any(name not in names for name in over):
        raise EngineError(f"cannot read the replica groups {found.group(0)[:120]}")
    devices = _mesh_device_ids(found.group("ids"), int(np.prod([size for _, size in axes])))
    mesh = devices.reshape([size for _, size in axes])
    kept = [i for i, name in enumerate(names) if name not in over]
    grouped = [names.index(name) for name in over]
    groups = mesh.transpose(kept + grouped).reshape(-1, int(np.prod([axes[i][1] for i in grouped])))
    explicit = "{" + ",".join("{" + ",".join(str(int(d)) for d in group) + "}" for group in groups) + "}"
    return line[: found.start()] + f"replica_groups={explicit}" + line[found.end() :]


def _mesh_device_ids(ids: str | None, count: int) -> np.ndarray:
    if not ids:
        return np.arange(count)
    iota = _IOTA.match(ids.strip())
    if iota:
        dims = [int(d) for d in iota.group("dims").split(",")]
        perm = [int(p) for p in iota.group("perm").split(",")] if iota.group("perm") else list(range(len(dims)))
        return np.arange(int(np.prod(dims))).reshape(dims).transpose(perm).reshape(-1)
    try:
        return np.array([int(d) for d in ids.split(",")])
    except ValueError:
        raise EngineError(f"cannot read the device ids ({ids[:80]}) of a collective's replica groups") from None


def _drop_shardings(line: str) -> str:
    while (start := line.find(", sharding={")) >= 0:
        try:
            end = walk(line, start + len(", sharding="), False)
        except LineError as exc:
            raise EngineError(f"cannot read a sharding attribute: {exc}") from exc
        line = line[:start] + line[end:]
    return line


def _split_collective(line: str, found: re.Match) -> list[str]:
    rest = found.group("rest")
    if not rest.startswith("("):
        return [line]
    try:
        type_end = walk(rest, 0, False)
    except LineError:
        return [line]
    after = rest[type_end:].lstrip()
    opcode = next((op for op in _SPLITTABLE if after.startswith(op + "(")), None)
    if opcode is None:
        return [line]
    operands_end = walk(after, len(opcode), False)
    operands = [o.strip() for o in split_top_level(after[len(opcode) + 1 : operands_end - 1])]
    types = [t.strip() for t in split_top_level(rest[1 : type_end - 1])]
    if len(types) != len(operands) or len(operands) < 2:
        return [line]
    indent, root, name = found.group("indent"), found.group("root") or "", found.group("name")
    attributes = after[operands_end:]
    parts = [f"{name}.part{i}" for i in range(len(operands))]
    split = [f"{indent}{part} = {t} {opcode}({o}){attributes}" for part, t, o in zip(parts, types, operands, strict=True)]
    return [*split, f"{indent}{root}{name} = ({', '.join(types)}) tuple({', '.join(parts)})"]


# ---- values: global <-> per device ----


def _tile_slices(layout: Any, local: tuple[int, ...], count: int) -> list[tuple[slice, ...]]:
    """The part of the global array each of ``count`` devices holds (every device the whole of it when replicated)."""
    if layout.kind != "tiled":
        return [tuple(slice(None) for _ in local)] * count
    if len(layout.ways) != len(local):
        raise EngineError(f"a sharding of rank {len(layout.ways)} on an array of rank {len(local)}")
    held: list[tuple[slice, ...] | None] = [None] * count
    devices = iter(layout.devices)
    for tile in itertools.product(*(range(w) for w in layout.ways)):
        region = tuple(slice(i * size, (i + 1) * size) for i, size in zip(tile, local, strict=True))
        for _ in range(layout.copies):
            device = next(devices)
            if device >= count:
                raise EngineError(f"a sharding names device {device} of a module for {count} devices")
            held[device] = region
    if any(h is None for h in held):
        raise EngineError("a parameter's sharding leaves a device without a piece of it")
    return held  # type: ignore[return-value]  # every entry was set: checked above


def shard(value: np.ndarray, layout: Any, local: tuple[int, ...], count: int) -> list[np.ndarray]:
    """One piece per device, each of the per-device shape ``local`` (zero-padded where the split is uneven)."""
    if layout.kind == "stacked":
        return [np.asarray(value)[device] for device in range(count)]
    pieces = []
    for region in _tile_slices(layout, local, count):
        piece = np.asarray(value)[region]
        if piece.shape != local:
            padded = np.zeros(local, dtype=piece.dtype)
            padded[tuple(slice(0, n) for n in piece.shape)] = piece
            piece = padded
        pieces.append(piece)
    return pieces


def assemble(per_device: list[np.ndarray], layout: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The global array of ``shape`` from the pieces each device holds (device 0's when replicated)."""
    if layout.kind == "stacked":
        return np.stack(per_device)
    if layout.kind != "tiled":
        return per_device[0]
    local = tuple(per_device[0].shape)
    whole = np.zeros(shape, dtype=per_device[0].dtype)
    for piece, region in zip(per_device, _tile_slices(layout, local, len(per_device)), strict=True):
        clipped = tuple(slice(r.start, min(r.stop, n)) for r, n in zip(region, shape, strict=True))
        if any(c.start >= c.stop for c in clipped):
            continue  # a device holding only padding
        whole[clipped] = piece[tuple(slice(0, c.stop - c.start) for c in clipped)]
    return whole


def copies(per_device: list[np.ndarray], layout: Any) -> list[tuple[int, int]]:
    """(device, device holding the first copy of the same piece) for every device whose piece is a copy of another's."""
    if layout.kind == "stacked":
        return []
    regions = _tile_slices(layout, tuple(per_device[0].shape), len(per_device))
    first: dict[tuple, int] = {}
    pairs = []
    for device, region in enumerate(regions):
        key = tuple((r.start, r.stop) for r in region)
        if key in first:
            pairs.append((device, first[key]))
        else:
            first[key] = device
    return pairs


def global_shape(local: tuple[int, ...], layout: Any, count: int) -> tuple[int, ...]:
    """The global shape of a per-device shape, where nothing better is known (an uneven split looks even)."""
    if layout.kind == "stacked":
        return (count, *local)
    if layout.kind != "tiled":
        return local
    return tuple(n * w for n, w in zip(local, layout.ways, strict=True))


def array_leaves(shape: Shape | None, what: str) -> list[Shape]:
    """The arrays of a parameter list or a result; a partitioned replay takes no tuples nested in them."""
    if shape is None:
        return []
    leaves = shape.leaves() if shape.is_tuple else [shape]
    for leaf in leaves:
        if not leaf.is_array:
            raise EngineError(f"a {what} of type {leaf.hlo_text()} cannot be split over devices")
    return leaves


def parameter_and_result_shapes(module_proto: bytes) -> tuple[list[Shape], list[Shape]]:
    """(the entry parameters, the flattened result) of a module, arrays only."""
    parameters = [leaf for shape in entry_parameter_shapes(module_proto) for leaf in array_leaves(shape, "parameter")]
    if len(parameters) != len(entry_parameter_shapes(module_proto)):
        raise EngineError("a module with tuple parameters cannot be split over devices")
    return parameters, array_leaves(entry_result_shape(module_proto), "result")
