"""Rewrite an optimized (``*_after_optimizations``) HLO module so PJRT can compile it again.

PJRT only compiles StableHLO, and the HLO -> StableHLO route drops what optimized HLO relies
on: backend configs (CPU fusions die with "Fusion must have backend config") and layouts
(``bitcast`` reinterprets memory in its operand's layout; without layouts XLA aborts the whole
process with "Check failed: has_layout()"). This rewrite keeps the optimized module's
semantics in a form the normal pipeline accepts:

- ``fusion(...) kind=K, calls=C`` -> ``call(...) to_apply=C`` (XLA inlines and re-fuses it);
- ``bitcast`` -> ``transpose`` / ``reshape`` / ``transpose`` spelled out from both layouts;
- ``backend_config=`` and the module's ``is_scheduled=true`` are dropped.

What it cannot keep raises :class:`CannotDeoptimize` (tiled layouts, custom calls with
non-default operand layouts, element-type-changing bitcasts); the engine then falls back to
the module's unoptimized dump. The rewrite works on the text line by line, as XLA prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from xlarun.errors import EngineError, InputError
from xlarun.hlo.lex import LineError, walk
from xlarun.hlo.lex import split_top_level as _split_raw
from xlarun.replay.literals import primitive_type


class CannotDeoptimize(EngineError):
    """The optimized module uses something the StableHLO route cannot express."""


_INSTRUCTION = re.compile(r"^(?P<indent>\s*)(?P<root>ROOT )?(?P<name>%?[\w.\-]+) = (?P<rest>.*)$")
_ARRAY_SHAPE = re.compile(r"^(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\](?P<layout>\{[^}]*\})?")
_OPERAND_NAME = re.compile(r"%?([\w.\-]+)\s*$")


@dataclass
class Instruction:
    """One instruction line split into the parts the rewrite touches."""

    indent: str
    root: bool
    name: str
    shape: str
    opcode: str
    operands: str
    attributes: list[str]

    def render(self) -> str:
        attrs = "".join(", " + a for a in self.attributes)
        return f"{self.indent}{'ROOT ' if self.root else ''}{self.name} = {self.shape} {self.opcode}({self.operands}){attrs}"


@dataclass
class DeoptimizedModule:
    text: str
    changes: list[str] = field(default_factory=list)


def _balanced_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]`` (quotes and comments respected)."""
    try:
        return walk(text, start, False)
    except LineError:
        raise CannotDeoptimize(f"unbalanced brackets in HLO line: {text[:80]}") from None


def split_top_level(text: str) -> list[str]:
    """Split ``a, b={c, d}, e="f, g"`` at commas outside brackets and quotes, pieces stripped."""
    try:
        parts = [p.strip() for p in _split_raw(text)]
    except LineError:
        raise CannotDeoptimize(f"unbalanced brackets in HLO line: {text[:80]}") from None
    return parts[:-1] if parts and not parts[-1] else parts


def parse_instruction(line: str) -> Instruction | None:
    """Split an instruction line; ``None`` for headers, braces and blank lines."""
    match = _INSTRUCTION.match(line)
    if not match:
        return None
    rest = match["rest"]
    shape_end = _balanced_end(rest, 0) if rest.startswith("(") else _array_shape_end(rest)
    shape = rest[:shape_end]
    after = rest[shape_end:].lstrip()
    paren = after.find("(")
    if paren <= 0:
        return None
    opcode = after[:paren]
    operands_end = _balanced_end(after, paren)
    attributes = split_top_level(after[operands_end:].lstrip(", "))
    return Instruction(
        match["indent"], bool(match["root"]), match["name"], shape, opcode, after[paren + 1 : operands_end - 1], attributes
    )


def _array_shape_end(text: str) -> int:
    match = _ARRAY_SHAPE.match(text)
    if not match:
        return text.find(" ")
    end = match.end("dims") + 1
    return _balanced_end(text, end) if text[end : end + 1] == "{" else end


@dataclass(frozen=True)
class ArrayShape:
    element_type: str
    dims: tuple[int, ...]
    minor_to_major: tuple[int, ...]
    tiled: bool

    @classmethod
    def parse(cls, text: str) -> ArrayShape | None:
        match = _ARRAY_SHAPE.match(text.strip())
        if not match:
            return None
        dims = tuple(int(d.lstrip("<=")) for d in match["dims"].split(",") if d.strip())
        layout = (match["layout"] or "")[1:-1]
        order_text, _, tiling = layout.partition(":")
        order = tuple(int(d) for d in order_text.split(",") if d.strip())
        return cls(match["type"], dims, order or tuple(reversed(range(len(dims)))), bool(tiling.strip()))

    def text(self, dims: tuple[int, ...] | None = None) -> str:
        return f"{self.element_type}[{','.join(map(str, self.dims if dims is None else dims))}]"

    @property
    def major_to_minor(self) -> list[int]:
        return list(reversed(self.minor_to_major))


def _attribute(instr: Instruction, key: str) -> str | None:
    for attr in instr.attributes:
        if attr.startswith(key + "="):
            return attr[len(key) + 1 :]
    return None


def _drop_attributes(instr: Instruction, *keys: str) -> bool:
    kept = [a for a in instr.attributes if a.split("=", 1)[0] not in keys]
    changed = len(kept) != len(instr.attributes)
    instr.attributes = kept
    return changed


def _fusion_to_call(instr: Instruction) -> None:
    calls = _attribute(instr, "calls")
    if calls is None:
        raise CannotDeoptimize(f"fusion {instr.name} names no fused computation")
    _drop_attributes(instr, "kind", "calls")
    instr.opcode = "call"
    instr.attributes.insert(0, f"to_apply={calls}")


def _bitcast_to_reshape(instr: Instruction, shapes: dict[str, str]) -> list[Instruction]:
    """Spell a layout bitcast as transpose(to physical) -> reshape -> transpose(to logical)."""
    operand = _OPERAND_NAME.search(instr.operands)
    source_text = shapes.get(operand.group(1)) if operand else None
    source = ArrayShape.parse(source_text) if source_text else None
    target = ArrayShape.parse(instr.shape)
    if operand is None or source is None or target is None:
        raise CannotDeoptimize(f"bitcast {instr.name}: cannot read the shapes of {instr.operands!r}")
    if source.tiled or target.tiled:
        raise CannotDeoptimize(f"bitcast {instr.name} uses a tiled layout")
    out: list[Instruction] = []
    current = f"%{operand.group(1)}"
    if source.element_type != target.element_type:
        # a same-width type change is a bitcast-convert; only its layout part needs spelling out
        if _bit_width(source.element_type) != _bit_width(target.element_type):
            raise CannotDeoptimize(f"bitcast {instr.name} changes the element width")
        source = ArrayShape(target.element_type, source.dims, source.minor_to_major, source.tiled)
        out.append(_new(instr, ".xlarun_convert", source.text(), "bitcast-convert", current, None))
        current = out[-1].name
    physical_in = source.major_to_minor
    if physical_in != sorted(physical_in):
        dims = tuple(source.dims[d] for d in physical_in)
        out.append(_new(instr, ".xlarun_to_physical", source.text(dims), "transpose", current, physical_in))
        current = out[-1].name
    physical_out = target.major_to_minor
    physical_dims = tuple(target.dims[d] for d in physical_out)
    to_logical = [physical_out.index(d) for d in range(len(physical_out))]
    if to_logical != sorted(to_logical):
        out.append(_new(instr, ".xlarun_physical", target.text(physical_dims), "reshape", current, None))
        out.append(_new(instr, "", target.text(), "transpose", out[-1].name, to_logical))
    else:
        out.append(_new(instr, "", target.text(), "reshape", current, None))
    out[-1].root = instr.root
    out[-1].name = instr.name
    return out


def _bit_width(element_type: str) -> int | None:
    try:
        return primitive_type(element_type).bits
    except InputError:
        return None


def _new(base: Instruction, suffix: str, shape: str, opcode: str, operand: str, permutation: Any) -> Instruction:
    attrs = [f"dimensions={{{','.join(map(str, permutation))}}}"] if permutation is not None else []
    return Instruction(base.indent, False, base.name + suffix, shape, opcode, operand, attrs)


def _check_custom_call(instr: Instruction) -> None:
    constraints = _attribute(instr, "operand_layout_constraints")
    if not constraints:
        return
    for shape_text in split_top_level(constraints.strip()[1:-1]):
        shape = ArrayShape.parse(shape_text)
        if shape and (shape.tiled or list(shape.minor_to_major) != sorted(shape.minor_to_major, reverse=True)):
            raise CannotDeoptimize(f"custom-call {instr.name} needs operand layout {shape_text}, which StableHLO cannot carry")


_QUOTED_TEXT = re.compile(r'"(?:[^"\\]|\\.)*"')


def logical_lines(text: str) -> list[str]:
    """The text's lines with an instruction written over several lines (an open parenthesis, a trailing comma) joined
    into one, so that no attribute on a continuation line is lost."""
    joined: list[str] = []
    pending = ""
    for line in text.splitlines():
        pending = f"{pending} {line.strip()}" if pending else line
        bare = _QUOTED_TEXT.sub('""', pending)
        if bare.count("(") > bare.count(")") or bare.rstrip().endswith(","):
            continue
        joined.append(pending)
        pending = ""
    if pending:
        joined.append(pending)
    return joined


def deoptimize_hlo_text(text: str) -> DeoptimizedModule:
    """Rewrite optimized HLO text into HLO the StableHLO route compiles; see the module doc."""
    lines_out: list[str] = []
    counts = {"fusion": 0, "bitcast": 0, "backend_config": 0}
    shapes: dict[str, str] = {}  # instruction name -> shape, for the computation being read
    for line in logical_lines(text):
        if line.startswith("HloModule"):
            lines_out.append(re.sub(r",?\s*is_scheduled=true", "", line))
            continue
        if line.rstrip().endswith("{") and "=" not in line.split("(")[0]:
            shapes = {}  # a new computation starts
        instr = parse_instruction(line)
        if instr is None:
            lines_out.append(line)
            continue
        shapes[instr.name.lstrip("%")] = instr.shape
        if _drop_attributes(instr, "backend_config"):
            counts["backend_config"] += 1
        if instr.opcode == "fusion":
            _fusion_to_call(instr)
            counts["fusion"] += 1
        elif instr.opcode == "custom-call":
            _check_custom_call(instr)
        if instr.opcode == "bitcast":
            lines_out.extend(i.render() for i in _bitcast_to_reshape(instr, shapes))
            counts["bitcast"] += 1
            continue
        lines_out.append(instr.render())
    changes = [f"{n} {what}{'s' if n != 1 else ''}" for what, n in counts.items() if n]
    return DeoptimizedModule("\n".join(lines_out) + "\n", changes)
