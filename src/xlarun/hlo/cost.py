"""The work of one op of an optimized module, from its shapes alone: flops and the bytes it moves.

What ``xlarun profile`` divides measured time by to give achieved GFLOP/s and GB/s:

- flops: a ``dot`` does ``2 * (result elements) * (contracted elements)`` (2*M*N*K for a matmul); an
  elementwise arithmetic op one per result element; a fusion the sum over its fused computation (and those it calls).
- bytes: what the op reads and writes at its own level (its operands and its result), not what stays
  inside a fusion: the memory traffic the roofline needs.

Ops whose work the shapes do not tell (convolutions, custom calls, sorts) have flops None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xlarun.hlo.model import HloComputation, HloInstruction, HloModule
from xlarun.hlo.sharding import shape_bytes

_DIMS = re.compile(r"\[([\d,]*)\]")
#: One flop per result element.
ELEMENTWISE_FLOPS = frozenset(
    """
add subtract multiply divide maximum minimum power remainder negate abs exponential exponential-minus-one log
log-plus-one logistic sqrt rsqrt cbrt tanh sine cosine tan atan2 erf compare select clamp floor ceil sign
round-nearest-afz round-nearest-even
""".split()
)
#: No arithmetic: data movement only.
_MOVES = frozenset(
    """
parameter constant broadcast reshape bitcast transpose copy slice dynamic-slice dynamic-update-slice concatenate
pad iota tuple get-tuple-element convert bitcast-convert reverse gather scatter
""".split()
)


@dataclass(frozen=True)
class OpCost:
    """What one op holds and the work it does."""

    name: str
    opcode: str
    fused_opcodes: list[str]  # a fusion's ops, most frequent first ("dot", "add", ...); empty for a plain op
    sources: list[str]  # file:line of its metadata (and its fused ops'), in order
    op_name: str | None
    flops: int | None
    bytes: int


def _elements(shape: str) -> int:
    match = _DIMS.search(shape)
    if not match:
        return 1
    count = 1
    for d in match.group(1).split(","):
        count *= int(d) if d else 1
    return count


def _dims(shape: str) -> list[int]:
    match = _DIMS.search(shape)
    return [int(d) for d in match.group(1).split(",") if d] if match else []


def instruction_flops(instruction: HloInstruction, shapes: dict[str, str]) -> int | None:
    """Flops of one unfused instruction (None: its work is not told by its shapes)."""
    opcode = instruction.opcode
    if opcode == "dot":
        lhs = _dims(shapes.get(instruction.operands[0], "")) if instruction.operands else []
        contracting = [int(d) for d in re.findall(r"\d+", instruction.attributes.get("lhs_contracting_dims", ""))]
        k = 1
        for d in contracting:
            if d >= len(lhs):
                return None
            k *= lhs[d]
        return 2 * _elements(instruction.shape) * k
    if opcode in ELEMENTWISE_FLOPS:
        return _elements(instruction.shape)
    if opcode in ("reduce", "reduce-window"):
        return _elements(shapes.get(instruction.operands[0], "")) if instruction.operands else None
    if opcode in _MOVES:
        return 0
    return None


def _computation_flops(module: HloModule, computation: HloComputation, seen: set[str]) -> int | None:
    shapes = {i.name: i.shape for i in computation.instructions}
    total = 0
    for instruction in computation.instructions:
        flops = _op_flops(module, instruction, shapes, seen)
        if flops is None:
            return None
        total += flops
    return total


def _op_flops(module: HloModule, instruction: HloInstruction, shapes: dict[str, str], seen: set[str]) -> int | None:
    if instruction.opcode == "fusion":
        total = 0
        for called in instruction.called_computations:
            computation = module.computations.get(called)
            if computation is None or called in seen:
                return None
            flops = _computation_flops(module, computation, seen | {called})
            if flops is None:
                return None
            total += flops
        return total
    if instruction.opcode in ("reduce", "reduce-window"):  # its applied computation runs once per input element
        return _elements(shapes.get(instruction.operands[0], "")) if instruction.operands else None
    return instruction_flops(instruction, shapes)


def _fused(module: HloModule, instruction: HloInstruction) -> list[HloInstruction]:
    out: list[HloInstruction] = []
    for called in instruction.called_computations:
        computation = module.computations.get(called)
        if computation is not None and computation.is_fusion:
            for inner in computation.instructions:
                out += [inner, *_fused(module, inner)] if inner.opcode == "fusion" else [inner]
    return out


def op_costs(module: HloModule) -> dict[str, OpCost]:
    """Every instruction of every non-fused computation (the ops a profile times), by name."""
    costs: dict[str, OpCost] = {}
    for computation in module.computations.values():
        if computation.is_fusion:
            continue
        shapes = {i.name: i.shape for i in computation.instructions}
        for instruction in computation.instructions:
            fused = [i for i in _fused(module, instruction) if i.opcode not in ("parameter",)]
            counted: dict[str, int] = {}
            for inner in fused:
                counted[inner.opcode] = counted.get(inner.opcode, 0) + 1
            sources: list[str] = []
            for holder in [instruction, *fused]:
                if holder.source_file and (where := f"{holder.source_file}:{holder.source_line or '?'}") not in sources:
                    sources.append(where)
            costs[instruction.name] = OpCost(
                name=instruction.name,
                opcode=instruction.opcode,
                fused_opcodes=sorted(counted, key=lambda o: (-counted[o], o)),
                sources=sources,
                op_name=instruction.op_name,
                flops=_op_flops(module, instruction, shapes, set()),
                bytes=sum(shape_bytes(shapes.get(o, "")) for o in instruction.operands) + shape_bytes(instruction.shape),
            )
    return costs
