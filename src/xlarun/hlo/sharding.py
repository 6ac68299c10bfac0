"""How a module is partitioned, read from its text: partitions and replicas (the header's ``num_partitions`` /
``replica_count``), the device meshes its shardings name (``devices=[8,1]<=[8]``), and its collectives, by kind,
with the bytes each moves per step (its result's size on one device; a collective's ``-start``/``-done`` pair
counted once). ``xlarun show`` prints it for a partitioned module."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

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
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_HEADER_NUMBER = re.compile(r"\b(num_partitions|replica_count)=(\d+)")
_MESH = re.compile(r"sharding=\{[^}]*?devices=\[([\d,]+)\][^}]*\}")
_INSTRUCTION = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*([^\n]*?)\s+([a-z][a-z0-9\-]*)\(", re.M)


@dataclass
class Sharding:
    """A module's partitioning facts; ``partitioned`` is False for a one-device module."""

    partitions: int = 1
    replicas: int = 1
    meshes: list[str] = field(default_factory=list)  # "8x1", "2x2" as the shardings name them
    collectives: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (count, bytes per step)

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1 or self.replicas > 1 or bool(self.collectives)

    @property
    def devices(self) -> int:
        return self.partitions * self.replicas

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) pairs for ``show``."""
        if not self.partitioned:
            return []
        meshes = f"; device meshes {', '.join(self.meshes)}" if self.meshes else ""
        out = [("partitions", f"{self.partitions} partitions x {self.replicas} replicas = {self.devices} devices{meshes}")]
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
    text = _QUOTED.sub('""', text)  # a quoted string can hold a whole module (origin_recovery_table) or an op_name
    header = next((line for line in text.splitlines() if line.startswith("HloModule")), "")
    numbers = dict(_HEADER_NUMBER.findall(header))
    found = Sharding(int(numbers.get("num_partitions", 1)), int(numbers.get("replica_count", 1)))
    found.meshes = sorted({"x".join(m.split(",")) for m in _MESH.findall(text)}, key=lambda m: (len(m), m))
    counts: Counter[str] = Counter()
    moved: Counter[str] = Counter()
    for shape, opcode in _INSTRUCTION.findall(text):
        kind = opcode.removesuffix("-start")
        if kind in COLLECTIVES and not opcode.endswith("-done"):
            counts[kind] += 1
            moved[kind] += shape_bytes(shape.strip()) or 0
    found.collectives = {k: (counts[k], moved[k]) for k in COLLECTIVES if counts[k]}
    return found


_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
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
