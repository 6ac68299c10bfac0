"""Which instruction of one version of a module is which of another, matched by structure rather than by name.

Names are renumbered between two captures of a changed program (an op inserted early shifts every later
``constant.N``), and constants of equal value swap numbers, so matching by name reports changes that are not there.
Here, in the spirit of XLA's hlo_diff and GumTree: each instruction's *structure hash* covers its opcode, shape,
attributes (provenance left out), literal, the hashes of the computations it calls and, recursively, of its operands;
equal hashes are the same computation of the same inputs and match first (a same-named pair preferred, then in file
order). What is left is matched by *label* (the same hash without the operands), preferring the candidate whose
operands are already matched to this instruction's operands, walking the module in file order so that a match
below enables the one above it. Names and positions settle the rest (:func:`xlarun.see.diff.match_instructions`).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

from xlarun.hlo.model import HloInstruction, HloModule

#: Attributes that say where an instruction came from, not what it computes.
PROVENANCE_ATTRIBUTES = frozenset({"metadata", "origin", "statistics"})
_SPACE = re.compile(r"\s+")


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).hexdigest()


class StructureHashes:
    """Structure hash and label of every instruction of a module (names excluded), computed without recursion."""

    def __init__(self, module: HloModule):
        self.module = module
        self.by_name = {i.name: i for i in module.instructions()}
        self._computation: dict[str, str] = {}
        self.label: dict[str, str] = {}
        self.full: dict[str, str] = {}
        for instruction in module.instructions():
            self._hash(instruction.name)

    def _label(self, instruction: HloInstruction) -> str:
        called = tuple(self._computation_hash(c) for c in instruction.called_computations)
        attributes = tuple(
            sorted(
                (key, _SPACE.sub("", value))
                for key, value in instruction.attributes.items()
                if key not in PROVENANCE_ATTRIBUTES
                and not any(f"%{c}" in value or c == value for c in instruction.called_computations)
            )
        )
        shape = _SPACE.sub("", instruction.shape)
        return _digest(instruction.opcode, shape, attributes, instruction.literal, instruction.parameter_number, called)

    def _computation_hash(self, name: str) -> str:
        if name not in self._computation:
            computation = self.module.computations.get(name)
            if computation is None:
                self._computation[name] = _digest("unknown", name)
            else:
                self._computation[name] = "pending"  # a computation cannot call itself; guards a malformed one
                root = computation.root or (computation.instructions[-1].name if computation.instructions else "")
                params = tuple(self._hash(p.name) for p in computation.parameters)
                self._computation[name] = _digest(computation.is_fusion, params, self._hash(root) if root else None)
        return self._computation[name]

    def _hash(self, name: str) -> str:
        """The structure hash of ``name``, its operands first (an explicit stack: chains may be 100,000 deep)."""
        if name in self.full:
            return self.full[name]
        stack = [name]
        while stack:
            current = stack[-1]
            instruction = self.by_name.get(current)
            if instruction is None:
                self.full[current] = _digest("unknown", current)
                stack.pop()
                continue
            pending = [o for o in instruction.operands if o not in self.full and o != current and o not in stack]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if current in self.full:
                continue
            label = self.label[current] = self._label(instruction)
            self.full[current] = _digest(label, tuple(self.full.get(o, o) for o in instruction.operands))
        return self.full[name]


def match_by_structure(left: StructureHashes, right: StructureHashes) -> dict[str, str]:
    """Instruction names of ``left``'s module mapped to those of ``right``'s that compute the same thing (see the
    module doc)."""
    before, after = left.module, right.module
    mapping: dict[str, str] = {}
    by_hash: dict[str, list[str]] = defaultdict(list)
    for instruction in after.instructions():
        by_hash[right.full[instruction.name]].append(instruction.name)
    taken: set[str] = set()
    groups: dict[str, list[str]] = defaultdict(list)
    for instruction in before.instructions():
        groups[left.full[instruction.name]].append(instruction.name)
    for digest, names in groups.items():
        candidates = [n for n in by_hash.get(digest, []) if n not in taken]
        if not candidates:
            continue
        same = [n for n in names if n in candidates]
        for name in same:
            mapping[name] = name
            taken.add(name)
        rest = [n for n in candidates if n not in taken]
        for name, other in zip([n for n in names if n not in mapping], rest, strict=False):
            mapping[name] = other
            taken.add(other)
    # by label, operands already matched counting for a candidate
    free: dict[str, list[str]] = defaultdict(list)
    for instruction in before.instructions():
        if instruction.name not in mapping:
            free[left.label[instruction.name]].append(instruction.name)
    inverse = {b: a for a, b in mapping.items()}
    for instruction in after.instructions():
        if instruction.name in taken:
            continue
        rivals = free.get(right.label[instruction.name])
        if not rivals:
            continue
        mine = [inverse.get(o) for o in instruction.operands]

        def score(name: str, mine: list[str | None] = mine, target: str = instruction.name) -> tuple[int, bool]:
            operands = left.by_name[name].operands
            return sum(1 for a, b in zip(operands, mine, strict=False) if b is not None and a == b), name == target

        best = max(rivals, key=score)
        if score(best)[0] == 0 and len(rivals) > 1 and best != instruction.name:
            continue  # nothing tells these apart: names and positions decide later
        rivals.remove(best)
        mapping[best] = instruction.name
        inverse[instruction.name] = best
        taken.add(instruction.name)
    return mapping
