"""The HLO model: modules, computations and instructions, and what is derived from them once a reader has
built them (the entry signature, the fingerprint, XLA's async wrapping, stack frames).

Counting convention: :meth:`HloModule.instruction_count`, :meth:`HloModule.instructions` and
:meth:`HloModule.opcode_histogram` cover every instruction of every computation, parameters,
ROOTs and the bodies of fused, called, while and reduction computations included (so a
fusion counts once as ``fusion`` and once more per instruction of its fused computation).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from xlarun.hlo.lex import split_top_level, strip_comments, strip_layouts, unquote

#: Attributes whose value names computations the instruction calls (``calls=%fused``, ``branch_computations={...}``).
CALLED_COMPUTATION_KEYS = frozenset(
    {
        "calls",
        "to_apply",
        "condition",
        "body",
        "branch_computations",
        "true_computation",
        "false_computation",
        "called_computations",
        "select",
        "scatter",
    }
)
#: Attributes whose value names other instructions of the same computation.
INSTRUCTION_REF_KEYS = frozenset({"control-predecessors"})
#: Attributes the fingerprint leaves out: they say where an op came from, not what it computes.
PER_RUN_ATTRIBUTES = frozenset({"metadata", "origin", "statistics"})
# GPU scheduling bookkeeping inside backend_config that changes between otherwise equal compiles.
_PER_RUN_BACKEND_KEYS = re.compile(r'"(?:operation_queue_id|wait_on_operation_queues)":(?:"[^"]*"|\[[^\]]*\]),?')
_NAME_REF = re.compile(r"%?([^\s,{}%]+)")
_FIELD = re.compile(r'([\w.]+)=("[^"\\]*(?:\\.[^"\\]*)*"|[^\s}]+)')

#: XLA's opcodes (xla/hlo/ir/hlo_opcode.h). ``<opcode>-start`` of any other is an async pair, for which XLA's
#: parser builds a computation wrapping the one instruction (see :func:`wrap_async_operations`).
OPCODES = frozenset(
    """
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start all-reduce all-reduce-done
all-reduce-start all-to-all and asin asinh async-done async-start async-update atan atan2 atanh batch-norm-grad
batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call cbrt ceil cholesky clamp
count-leading-zeros collective-broadcast collective-permute collective-permute-done collective-permute-start
collective-reduce compare complex concatenate conditional constant convert convolution copy copy-done copy-start
cosine cosh custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf exponential
exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element imag infeed iota is-finite log
log-plus-one logistic map maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter partition-id
popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce reduce-precision reduce-scatter reduce-window
remainder replica-id reshape reverse rng rng-bit-generator rng-get-and-update-state round-nearest-afz
round-nearest-even rsqrt scaled-dot scan scatter select select-and-scatter send send-done set-dimension-size
shift-left shift-right-arithmetic shift-right-logical shuffle sign sine sinh slice sort sqrt stochastic-convert
subtract tan tanh topk transpose triangular-solve tuple while xor
""".split()
)


@dataclass
class HloInstruction:
    """One HLO instruction. Names never carry the leading ``%``."""

    name: str
    opcode: str
    shape: str
    operands: list[str] = field(default_factory=list)
    computation: str = ""
    is_root: bool = False
    #: Raw attribute text by key, e.g. ``{"kind": "kLoop", "calls": "%fused_computation"}``.
    attributes: dict[str, str] = field(default_factory=dict)
    called_computations: list[str] = field(default_factory=list)
    op_name: str | None = None
    op_type: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    #: A constant printed as ``{...}`` because the dump was made without --xla_dump_large_constants.
    has_elided_constant: bool = False
    #: Constants: the text inside ``constant(...)``; from a proto, a digest ``sha256:...`` of the literal.
    literal: str | None = None
    parameter_number: int | None = None
    #: ``metadata={... stack_frame_id=N}``: JAX's pointer into the module's StackFrames table.
    stack_frame_id: int | None = None


@dataclass
class HloComputation:
    name: str
    is_entry: bool = False
    #: The name says fused, or a ``fusion`` instruction calls it.
    is_fusion: bool = False
    parameters: list[HloInstruction] = field(default_factory=list)  # by parameter number
    instructions: list[HloInstruction] = field(default_factory=list)  # in file order, parameters included
    root: str = ""


@dataclass
class HloModule:
    name: str
    entry_computation: str
    computations: dict[str, HloComputation]
    #: ``(f32[8,128], f32[128]) -> (f32[8,128])``: parameter and result shapes without layouts.
    entry_signature: str
    #: Raw ``key=value`` text of the ``HloModule`` line (empty for protos).
    header_attributes: dict[str, str] = field(default_factory=dict)
    #: ``"text"`` or ``"proto"``; fingerprints are only comparable between modules read the same way.
    parsed_from: str = "text"
    #: False when read with ``parse_hlo_text(text, summary=True)``: instructions lack operands and
    #: attributes, so there is no canonical form (nor fingerprint, graph or replay) to make from it.
    complete: bool = True

    @property
    def entry(self) -> HloComputation:
        return self.computations[self.entry_computation]

    def instructions(self) -> Iterator[HloInstruction]:
        """Every instruction of every computation, computations in file order."""
        for computation in self.computations.values():
            yield from computation.instructions

    def instruction_count(self) -> int:
        """Instructions in all computations, parameters and fused bodies included."""
        return sum(len(c.instructions) for c in self.computations.values())

    def opcode_histogram(self) -> dict[str, int]:
        """Opcode -> count over :meth:`instructions`, most frequent first (ties by name)."""
        counts = Counter(i.opcode for i in self.instructions())
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def has_elided_constants(self) -> bool:
        """True when some constant was dumped as ``{...}``: replaying this text would use garbage values."""
        return any(i.has_elided_constant for i in self.instructions())

    def find_instruction(self, name: str) -> HloInstruction | None:
        """The instruction called ``name`` (a leading ``%`` is ignored), or None."""
        name = name.lstrip("%")
        return next((i for i in self.instructions() if i.name == name), None)

    def canonical_form(self) -> str:
        """The module with per-run detail removed; see :meth:`fingerprint`."""
        if not self.complete:
            raise ValueError("a summary parse has no canonical form: parse the text in full")
        return "\n".join(_canonical_lines(self))

    def fingerprint(self) -> str:
        """sha256 of :meth:`canonical_form`.

        Metadata (op names, source locations, stack frames), ``origin=`` and GPU queue bookkeeping
        are dropped, and the module, every computation and every instruction are renamed by
        position, so the same program dumped by another process, under another module id or from
        another script path gets the same fingerprint. Opcodes, shapes with layouts, literals,
        parameter numbers, all other attributes and the wiring are kept: changing any of them
        changes it. Text and proto summaries of one module fingerprint differently (the proto
        summary keeps fewer attributes).
        """
        return hashlib.sha256(self.canonical_form().encode("utf-8")).hexdigest()


def format_signature(parameters: list[str], result: str) -> str:
    """``(a, b) -> r`` from parameter and result shapes, layouts dropped, spaces as XLA prints them."""
    return f"({', '.join(_plain_shape(p) for p in parameters)}) -> {_plain_shape(result)}"


def _plain_shape(shape: str) -> str:
    return strip_layouts("".join(shape.split()) if " " in shape or "\n" in shape else shape)


def _signature_from_layout(layout: str) -> str | None:
    """``{(f32[8]{0}, s32[])->f32[8]{0}}`` -> ``(f32[8], s32[]) -> f32[8]``."""
    text = strip_comments(layout.strip())
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    params, arrow, result = text.partition("->")
    if not arrow:
        return None
    params = params.strip()
    if params.startswith("(") and params.endswith(")"):
        params = params[1:-1]
    return format_signature([p for p in split_top_level(params) if p.strip()], result)


def called_computations(attributes: dict[str, str]) -> list[str]:
    """The computations an instruction's attributes name (``calls=%f``, ``branch_computations={%a, %b}``)."""
    return [name for key, value in attributes.items() if key in CALLED_COMPUTATION_KEYS for name in _NAME_REF.findall(value)]


def apply_metadata(instruction: HloInstruction, metadata: str) -> None:
    """Fill op_name, op_type, source_file, source_line and stack_frame_id from ``metadata={...}`` text."""
    for key, value in _FIELD.findall(metadata.strip()[1:-1]):
        if key in ("op_name", "op_type", "source_file"):
            setattr(instruction, key, unquote(value))
        elif key in ("source_line", "stack_frame_id") and value.isdigit():
            setattr(instruction, key, int(value))


def _finish(computation: HloComputation) -> None:
    instructions = computation.instructions
    params = [i for i in instructions if i.opcode == "parameter"]
    computation.parameters = sorted(params, key=lambda i: (i.parameter_number is None, i.parameter_number or 0))
    roots = [i for i in instructions if i.is_root]
    if not roots and instructions:  # XLA takes the last instruction when none is marked ROOT
        instructions[-1].is_root = True
        roots = [instructions[-1]]
    computation.root = roots[-1].name if roots else ""


#: Opcodes whose shape XLA's parser builds from the operands, whatever the text says.
SHAPE_SET_BY_XLA = frozenset({"outfeed", "send", "send-done", "recv", "recv-done"})


def _root_of(computation: HloComputation) -> HloInstruction:
    return next(i for i in reversed(computation.instructions) if i.name == computation.root)


def assemble_module(
    name: str | None,
    computations: dict[str, HloComputation],
    entry: str | None,
    header: dict[str, str],
    tables: dict[str, dict[int, str]],
    complete: bool = True,
) -> HloModule:
    """The module from parsed computations: the async computations XLA builds added, roots, parameters,
    the entry (the last computation when none is marked ENTRY, as XLA takes it), sources and signature."""
    computations = wrap_async_operations(computations)
    for computation in computations.values():
        expand_tuple_references(computation)
        _finish(computation)
    entry = entry or next(reversed(computations))
    computations[entry].is_entry = True
    if computations[entry].root and _root_of(computations[entry]).opcode in SHAPE_SET_BY_XLA:
        from xlarun.hlo.shapes import infer_missing_shapes  # the signature shows the shape XLA gives it

        infer_missing_shapes(computations)
    _resolve_stack_frames(computations.values(), tables)
    module = HloModule(
        name=name if name is not None else f"module_{entry}",
        entry_computation=entry,
        computations=computations,
        entry_signature="",
        header_attributes=header,
        parsed_from="text",
        complete=complete,
    )
    mark_fusion_computations(module)
    layout = header.get("entry_computation_layout")
    module.entry_signature = (layout and _signature_from_layout(layout)) or signature_of(module.entry)
    return module


_TUPLE_REFERENCE = re.compile(r"(.+)#(\d+)")


def expand_tuple_references(computation: HloComputation) -> None:
    """Build the get-tuple-elements behind operands written ``%x#1`` (element 1 of tuple-shaped %x), as XLA's
    parser does for the text XLA prints since jax 0.11: one per element used, named ``x_1``, placed after %x."""
    if not any("#" in operand for instruction in computation.instructions for operand in instruction.operands):
        return
    by_name = {i.name: i for i in computation.instructions}
    made: dict[str, HloInstruction] = {}
    for instruction in computation.instructions:
        for position, operand in enumerate(instruction.operands):
            match = _TUPLE_REFERENCE.fullmatch(operand)
            if match is None or operand in by_name:
                continue
            if operand not in made:
                base, index = match.group(1), int(match.group(2))
                name, number = f"{base}_{index}", 0
                while name in by_name:
                    number += 1
                    name = f"{base}_{index}.{number}"
                source = by_name.get(base)
                elements = _tuple_shapes(source.shape) if source is not None else []
                made[operand] = gte = HloInstruction(
                    name=name,
                    opcode="get-tuple-element",
                    shape=elements[index] if index < len(elements) else "",
                    computation=computation.name,
                    operands=[base],
                    attributes={"index": str(index)},
                )
                by_name[name] = gte
            instruction.operands[position] = made[operand].name
    after: dict[str, list[HloInstruction]] = {}
    for _operand, gte in sorted(made.items(), key=lambda item: int(item[0].rsplit("#", 1)[1])):
        after.setdefault(gte.operands[0], []).append(gte)
    known = {i.name for i in computation.instructions}
    ordered = [gte for base, gtes in after.items() if base not in known for gte in gtes]  # names no instruction here
    for instruction in computation.instructions:
        ordered.append(instruction)
        ordered += after.get(instruction.name, [])
    computation.instructions = ordered


def _tuple_shapes(shape: str) -> list[str]:
    if not shape.startswith("("):
        return []
    return [strip_comments(p).strip() for p in split_top_level(shape[1:-1]) if strip_comments(p).strip()]


def wrap_async_operations(computations: dict[str, HloComputation]) -> dict[str, HloComputation]:
    """Add the computation XLA's parser builds for each ``<opcode>-start`` of an op without async opcodes
    of its own (``custom-call-start``, ``fusion-start``...): parameters for the operands and the op itself
    as root, named ``async_wrapped`` (uniquified) and placed before the computation that starts it."""
    if not any(i.opcode.endswith("-start") and i.opcode not in OPCODES for c in computations.values() for i in c.instructions):
        return computations
    result: dict[str, HloComputation] = {}
    taken = set(computations)
    for computation in computations.values():
        for instruction in computation.instructions:
            wrapped = instruction.opcode.removesuffix("-start")
            if wrapped == instruction.opcode or instruction.opcode in OPCODES or wrapped not in OPCODES:
                continue
            name, number = "async_wrapped", 0
            while name in taken:
                number += 1
                name = f"async_wrapped.{number}"
            taken.add(name)
            result[name] = _async_wrapped(name, wrapped, instruction)
        result[computation.name] = computation
    return result


def _async_wrapped(name: str, opcode: str, start: HloInstruction) -> HloComputation:
    # the start's shape is ((operand shapes), result shape, state...)
    parts = [strip_comments(p).strip() for p in split_top_level(start.shape[1:-1])] if start.shape.startswith("(") else []
    operand_shapes = (
        [p.strip() for p in split_top_level(parts[0][1:-1]) if p.strip()] if parts and parts[0].startswith("(") else []
    )
    computation = HloComputation(name=name)
    for number in range(len(start.operands)):
        shape = operand_shapes[number] if number < len(operand_shapes) else ""
        parameter_name = "async_param" if number == 0 else f"async_param.{number}"
        computation.instructions.append(
            HloInstruction(
                name=parameter_name,
                opcode="parameter",
                shape=shape,
                computation=name,
                parameter_number=number,
            )
        )
    computation.instructions.append(
        HloInstruction(
            name="async_op",
            opcode=opcode,
            shape=parts[1] if len(parts) > 1 else "",
            computation=name,
            is_root=True,
            operands=[p.name for p in computation.instructions],
            attributes=dict(start.attributes),
            called_computations=list(start.called_computations),
        )
    )
    return computation


def _resolve_stack_frames(computations: Any, tables: dict[str, dict[int, str]]) -> None:
    """Fill source_file/source_line from JAX's StackFrames table (the innermost frame is the user's line)."""
    where_is = _frame_locator(tables)
    for computation in computations:
        for instruction in computation.instructions:
            if instruction.stack_frame_id is not None and instruction.source_file is None:
                where = where_is(instruction.stack_frame_id)
                if where is not None:
                    instruction.source_file, instruction.source_line = where


def _frame_locator(tables: dict[str, dict[int, str]]) -> Any:
    """frame id -> (file, line) or None, from the StackFrames, FileLocations and FileNames tables, each frame
    looked up once (many instructions share one). The text printer writes each frame's parent id one too
    high; only file locations are used here."""
    frames, locations, files = tables["StackFrames"], tables["FileLocations"], tables["FileNames"]
    resolved: dict[int, tuple[str, int | None] | None] = {}

    def locate(frame_id: int) -> tuple[str, int | None] | None:
        if frame_id not in resolved:
            frame = dict(_FIELD.findall(frames.get(frame_id, "")))
            location = dict(_FIELD.findall(locations.get(int(frame.get("file_location_id", "0") or 0), "")))
            file_name = files.get(int(location.get("file_name_id", "0") or 0))
            line = location.get("line", "")
            resolved[frame_id] = None if file_name is None else (unquote(file_name), int(line) if line.isdigit() else None)
        return resolved[frame_id]

    return locate


def mark_fusion_computations(module: HloModule) -> None:
    """Flag computations that are fused by name (``fused_*``) or because a fusion instruction calls them."""
    fused = {c for i in module.instructions() if i.opcode == "fusion" for c in i.called_computations}
    for computation in module.computations.values():
        if computation.name in fused or computation.name.startswith("fused_") or ".fused" in computation.name:
            computation.is_fusion = True


def signature_of(computation: HloComputation) -> str:
    """The signature built from a computation's parameters and root."""
    root = next((i for i in computation.instructions if i.name == computation.root), None)
    return format_signature([p.shape for p in computation.parameters], root.shape if root else "()")


def _canonical_lines(module: HloModule) -> Iterator[str]:
    computation_ids = {name: f"c{n}" for n, name in enumerate(module.computations)}

    def calls(m: re.Match) -> str:
        return computation_ids.get(m.group(1), m.group(0))

    header = (f"{k}={v}" for k, v in sorted(module.header_attributes.items()) if k not in PER_RUN_ATTRIBUTES)
    yield "HloModule " + ", ".join(header)
    position = 0
    for computation in module.computations.values():
        local: dict[str, str] = {}
        for instruction in computation.instructions:
            local.setdefault(instruction.name, f"v{position}")
            position += 1

        def wire(m: re.Match) -> str:
            return local.get(m.group(1), m.group(0))  # noqa: B023 (used only within this computation's iteration)

        yield f"{'ENTRY ' if computation.is_entry else ''}{computation_ids[computation.name]} {{"
        for instruction in computation.instructions:
            if instruction.opcode == "constant":
                arguments = instruction.literal or ""
            elif instruction.opcode == "parameter":
                arguments = str(instruction.parameter_number)
            else:
                arguments = ", ".join(local.get(o, o) for o in instruction.operands)
            attributes = []
            for key, value in sorted(instruction.attributes.items()):
                if key in PER_RUN_ATTRIBUTES:
                    continue
                if key in CALLED_COMPUTATION_KEYS:
                    value = _NAME_REF.sub(calls, value)
                elif key in INSTRUCTION_REF_KEYS:
                    value = _NAME_REF.sub(wire, value)
                elif key == "backend_config":
                    value = _PER_RUN_BACKEND_KEYS.sub("", value)
                attributes.append(f", {key}={value}")
            root = "ROOT " if instruction.is_root else ""
            shape = re.sub(r"\s+", "", instruction.shape)
            yield f"  {root}{local[instruction.name]} = {shape} {instruction.opcode}({arguments}){''.join(attributes)}"
        yield "}"
