"""How a module is partitioned, read from its text: partitions and replicas (the header's ``num_partitions`` /
``replica_count``), its device mesh (by its axes' names where Shardy wrote them, else the shape its shardings'
tile assignments ``devices=[8,1]<=[8]`` are cut from), and its collectives, by kind,
with the bytes each moves per step (its result's size on one device; a collective's ``-start``/``-done`` pair
counted once). ``xlarun show`` prints it for a partitioned module."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from xlarun.hlo.patterns import LazyPattern

#: Collective opcodes (their async ``-start`` forms fold into them; ``-done`` is not counted again).
COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
)
#: custom-call targets that only annotate how values are split (``with_sharding_constraint``, the bounds of a
#: ``shard_map`` body, Shardy's markers ``xla.sdy.*``): the partitioner removes them, and they compute nothing.
ANNOTATION_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
_ANNOTATION_CALL = LazyPattern(rb'custom_call_target="(?:Sharding|SPMDFullToShardShape|SPMDShardToFullShape|xla\.sdy\.[\w.]+)"')


def is_annotation_target(target: str) -> bool:
    """A custom-call target that annotates sharding and computes nothing (``Sharding``, ``xla.sdy.*``...)."""
    target = target.strip('"')
    return target in ANNOTATION_TARGETS or target.startswith("xla.sdy.")


def count_annotation_calls(text: bytes) -> int:
    """How many custom-calls of a module's text are sharding annotations (see :data:`ANNOTATION_TARGETS`)."""
    return len(_ANNOTATION_CALL.findall(text))


_QUOTED = LazyPattern(r'"(?:[^"\\]|\\.)*"', re.S)
_HEADER_NUMBER = LazyPattern(r"\b(num_partitions|replica_count)=(\d+)")
_MESH = LazyPattern(r"sharding=\{[^}]*?devices=\[([\d,]+)\][^}]*\}")
_TILES = LazyPattern(r"devices=\[([\d,]+)\](?:<=\[([\d,]+)\])?")
_SDY_MESH = LazyPattern(r"(\w+)\s*=\s*#sdy\.mesh<\[([^\]]*)\]")
_SDY_AXIS = LazyPattern(r'"([^"]+)"\s*=\s*(\d+)')
_INSTRUCTION = LazyPattern(r"^[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*([^\n]*?)\s+([a-z][a-z0-9\-]*)\(", re.M)


@dataclass
class Sharding:
    """A module's partitioning facts; ``partitioned`` is False for a one-device module."""

    partitions: int = 1
    replicas: int = 1
    meshes: list[str] = field(default_factory=list)  # "8x1", "2x2" as the shardings' tile assignments name them
    #: The device meshes by the names the program gave their axes (Shardy's ``xla.sdy.meshes`` header attribute):
    #: {"mesh": [("data", 4), ("model", 2)]}; empty where the HLO has no names (GSPMD shardings).
    named_meshes: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    mesh_shape: str | None = None  # "4x2": the mesh the tile assignments are cut from, where no names are known
    collectives: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (count, bytes per step)

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1 or self.replicas > 1 or bool(self.collectives)

    @property
    def devices(self) -> int:
        return self.partitions * self.replicas

    @property
    def mesh(self) -> str | None:
        """The device mesh in words: ``data=4, model=2`` by its axes' names, else its shape once (``4x2 (axis
        names not in the HLO)``), not one entry per tile assignment; None when no sharding says it."""
        if self.named_meshes:
            words = [", ".join(f"{axis}={size}" for axis, size in axes) for axes in self.named_meshes.values()]
            if len(words) == 1:
                return words[0]
            return "; ".join(f"{name}: {w}" for name, w in zip(self.named_meshes, words, strict=True))
        return f"{self.mesh_shape} (axis names not in the HLO)" if self.mesh_shape else None

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs for ``show``."""
        if not self.partitioned:
            return []
        mesh = f"; mesh {self.mesh}" if self.mesh else ""
        out = [("partitions", f"{self.partitions} partitions x {self.replicas} replicas = {self.devices} devices{mesh}")]
        if self.collectives:
            total = sum(b for _, b in self.collectives.values())
            kinds = ", ".join(f"{kind} {n} ({_bytes(b)})" for kind, (n, b) in self.collectives.items())
            out.append(("collectives", f"{kinds}; {_bytes(total)} per device per step"))
        else:
            out.append(("collectives", "none after optimization"))
        return out


def sharding_of_text(data: bytes | str) -> Sharding:
    """The partitioning facts of one module's text (best read from its after-optimizations dump)."""
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    named = named_meshes(text)
    text = _QUOTED.sub('""', text)  # a quoted string can hold a whole module (origin_recovery_table) or an op_name
    header = next((line for line in text.splitlines() if line.startswith("HloModule")), "")
    numbers = dict(_HEADER_NUMBER.findall(header))
    found = Sharding(int(numbers.get("num_partitions", 1)), int(numbers.get("replica_count", 1)), named_meshes=named)
    found.meshes = sorted({"x".join(m.split(",")) for m in _MESH.findall(text)}, key=lambda m: (len(m), m))
    found.mesh_shape = _mesh_shape(text)
    counts: Counter[str] = Counter()
    moved: Counter[str] = Counter()
    for shape, opcode in _INSTRUCTION.findall(text):
        kind = opcode.removesuffix("-start")
        if kind in COLLECTIVES and not opcode.endswith("-done"):
            counts[kind] += 1
            moved[kind] += shape_bytes(shape.strip()) or 0
    found.collectives = {k: (counts[k], moved[k]) for k in COLLECTIVES if counts[k]}
    return found


def named_meshes(text: str) -> dict[str, list[tuple[str, int]]]:
    """The meshes a module's header names with their axes (``xla.sdy.meshes={mesh = #sdy.mesh<["data"=4,
    "model"=2]>}``, as JAX writes it with Shardy): {"mesh": [("data", 4), ("model", 2)]}; meshes of no axes left out."""
    header = next((line for line in text.splitlines() if line.startswith("HloModule")), "")
    at = header.find("xla.sdy.meshes=")
    if at < 0:
        return {}
    found = {name: [(axis, int(size)) for axis, size in _SDY_AXIS.findall(axes)] for name, axes in _SDY_MESH.findall(header[at:])}
    return {name: axes for name, axes in found.items() if axes}


def _mesh_shape(text: str) -> str | None:
    """The mesh the shardings' tile assignments are cut from (``4x2``): the device order of an iota assignment
    (``devices=[1,2,4]<=[4,2]T(1,0)`` is cut from a 4x2 mesh), else an assignment's tiles of more than one
    device; the largest such, then the most-dimensioned, then the most common. None when nothing is split."""
    shapes: Counter[tuple[int, ...]] = Counter()
    for tiles, iota in _TILES.findall(text):
        dims = [int(d) for d in (iota if "," in iota else tiles).split(",") if int(d) > 1]
        if dims:
            shapes[tuple(dims)] += 1
    if not shapes:
        return None
    best = max(shapes.items(), key=lambda kv: (_product(kv[0]), len(kv[0]), kv[1]))[0]
    return "x".join(map(str, best))


def _product(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


_ARRAY = LazyPattern(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
_ELEMENT_BYTES = {"pred": 1, "c64": 8, "c128": 16}


def shape_bytes(shape: str) -> int:
    """Bytes of the arrays in a shape (a tuple's elements summed); 4-bit and fp8 types count one byte each."""
    total = 0
    for element, dims in _ARRAY.findall(shape):
        width = _ELEMENT_BYTES.get(element)
        if width is None:
            digits = re.search(r"\d+", element)
            width = max(1, int(digits.group()) // 8) if digits else 0
        count = 1
        for d in dims.split(","):
            count *= int(d) if d else 1
        total += width * count
    return total


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
