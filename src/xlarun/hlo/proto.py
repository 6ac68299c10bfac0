"""Summaries of binary HLO protos, in the same classes as the text parser (:mod:`xlarun.hlo`).

Accepts what XLA writes as ``.pb``: an HloProto (``*.hlo.pb`` dumps; field 1 is the module),
a bare HloModuleProto, or an HloSnapshot (field 1 is an HloProto). Decoded with
:mod:`xlarun.hlo.protowire`; the field numbers below come from XLA's ``xla/service/hlo.proto`` and
``xla/xla_data.proto``, and only those needed are named.

What differs from the text summary of the same module:

- instructions are in the proto's order (XLA writes each computation in post order), which is not
  always the text's order; counts, names, opcodes and wiring agree.
- ``attributes`` holds only what the summary can rebuild: ``kind``, ``calls``/``to_apply``/
  ``condition``/``body``/``branch_computations``/``called_computations``, ``index``,
  ``dimensions``, ``custom_call_target``, ``direction``, ``backend_config``, ``control-predecessors``.
- shapes are rebuilt from ShapeProto: element type, dimensions (``<=`` when dynamic), and a
  layout of minor_to_major plus tiles ``T(..)``, element size ``E(..)`` and memory space ``S(..)``.
- a proto always holds whole constants, so ``has_elided_constant`` is False, and ``literal`` is a
  digest of the LiteralProto (``sha256:...``) rather than its text.
- ``header_attributes`` is empty. Hence :meth:`HloModule.fingerprint` of a proto summary differs
  from that of the text summary of the same module; compare fingerprints within one format only.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, TypeGuard

from xlarun.errors import InputError
from xlarun.hlo.model import HloComputation, HloInstruction, HloModule, format_signature, mark_fusion_computations, signature_of
from xlarun.hlo.protowire import as_signed64, as_str, fields_by_number, first, repeated_varints

# HloProto.hlo_module, and HloSnapshot.hlo (an HloProto)
HLO_PROTO_MODULE = 1
# HloModuleProto
MODULE_NAME, MODULE_ENTRY_NAME, MODULE_COMPUTATIONS, MODULE_HOST_PROGRAM_SHAPE = 1, 2, 3, 4
MODULE_ENTRY_ID, MODULE_STACK_FRAME_INDEX = 6, 17
# HloComputationProto
COMPUTATION_NAME, COMPUTATION_INSTRUCTIONS, COMPUTATION_PROGRAM_SHAPE = 1, 2, 4
COMPUTATION_ID, COMPUTATION_ROOT_ID, COMPUTATION_IS_FUSION = 5, 6, 7
# HloInstructionProto
INSTRUCTION_NAME, INSTRUCTION_OPCODE, INSTRUCTION_SHAPE, INSTRUCTION_METADATA = 1, 2, 3, 7
INSTRUCTION_LITERAL, INSTRUCTION_PARAMETER_NUMBER, INSTRUCTION_FUSION_KIND = 8, 9, 11
INSTRUCTION_TUPLE_INDEX, INSTRUCTION_DIMENSIONS, INSTRUCTION_CUSTOM_CALL_TARGET = 13, 14, 28
INSTRUCTION_ID, INSTRUCTION_OPERAND_IDS, INSTRUCTION_CONTROL_PREDECESSOR_IDS = 35, 36, 37
INSTRUCTION_CALLED_COMPUTATION_IDS, INSTRUCTION_BACKEND_CONFIG, INSTRUCTION_COMPARISON_DIRECTION = 38, 43, 63
# OpMetadata
METADATA_OP_TYPE, METADATA_OP_NAME, METADATA_SOURCE_FILE, METADATA_SOURCE_LINE = 1, 2, 3, 4
METADATA_STACK_FRAME_ID = 15
# ShapeProto, LayoutProto, TileProto, ProgramShapeProto
SHAPE_ELEMENT_TYPE, SHAPE_DIMENSIONS, SHAPE_TUPLE_SHAPES, SHAPE_LAYOUT, SHAPE_IS_DYNAMIC_DIMENSION = 2, 3, 4, 5, 6
LAYOUT_MINOR_TO_MAJOR, LAYOUT_TILES, LAYOUT_ELEMENT_SIZE_IN_BITS, LAYOUT_MEMORY_SPACE = 1, 6, 7, 8
TILE_DIMENSIONS = 1
PROGRAM_SHAPE_PARAMETERS, PROGRAM_SHAPE_RESULT = 1, 2
# StackFrameIndexProto and its FileLocation / StackFrame
FRAME_INDEX_FILE_NAMES, FRAME_INDEX_FILE_LOCATIONS, FRAME_INDEX_STACK_FRAMES = 1, 3, 4
LOCATION_FILE_NAME_ID, LOCATION_LINE = 1, 3
FRAME_FILE_LOCATION_ID = 1

#: xla.PrimitiveType numbers -> the names HLO text uses.
PRIMITIVE_TYPES = {
    1: "pred",
    2: "s8",
    3: "s16",
    4: "s32",
    5: "s64",
    6: "u8",
    7: "u16",
    8: "u32",
    9: "u64",
    10: "f16",
    11: "f32",
    12: "f64",
    13: "tuple",
    14: "opaque",
    15: "c64",
    16: "bf16",
    17: "token",
    18: "c128",
    19: "f8e5m2",
    20: "f8e4m3fn",
    21: "s4",
    22: "u4",
    23: "f8e4m3b11fnuz",
    24: "f8e5m2fnuz",
    25: "f8e4m3fnuz",
    26: "s2",
    27: "u2",
    28: "f8e4m3",
    29: "f8e3m4",
    30: "s1",
    31: "u1",
    32: "f4e2m1fn",
    33: "f8e8m0fnu",
    34: "buffer",
}
TUPLE_TYPE = 13
UNBOUNDED_SIZE = -(1 << 63)  # Shape::kUnboundedSize
_COMBINED_TILE_DIMENSION = "*"  # a negative tile size combines dimensions

_HINT = "xlarun reads XLA's HloProto (*.hlo.pb dumps), bare HloModuleProto and HloSnapshot files"


def _message(value: Any) -> dict | None:
    """A length-delimited field decoded as a message, or None when it is not one."""
    if not isinstance(value, bytes):
        return None
    try:
        return fields_by_number(value)
    except InputError:
        return None


#: HLO opcodes are lower-case words joined by dashes (``add``, ``get-tuple-element``, ``all-reduce-start``).
_OPCODE = re.compile(rb"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _is_text(value: Any) -> TypeGuard[bytes]:
    """A proto string field as XLA writes names: UTF-8 without control characters (a nested message's bytes start
    with a tag byte such as 0x0a, so they never pass)."""
    if not isinstance(value, bytes):
        return False
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return text.isprintable()


def _is_module(fields: dict | None) -> TypeGuard[dict]:
    """A HloModuleProto: a text name, and computations with a text name whose first instruction has a text name and an
    opcode. Names must be text, not just bytes: an HloProto's fields 1 (the module) and 3 (the buffer assignment, whose
    aliases look like instructions) otherwise pass for a module's name and computations, as in TF's snapshots."""
    if not fields or not _is_text(first(fields, MODULE_NAME, b"")):
        return False
    computations = fields.get(MODULE_COMPUTATIONS) or []
    if not computations:
        return False
    computation = _message(computations[0])
    if not computation or not _is_text(first(computation, COMPUTATION_NAME)):
        return False
    instructions = computation.get(COMPUTATION_INSTRUCTIONS) or []
    instruction = _message(instructions[0]) if instructions else None
    if instruction is None or not _is_text(first(instruction, INSTRUCTION_NAME, b"")):
        return False
    opcode = first(instruction, INSTRUCTION_OPCODE)
    return isinstance(opcode, bytes) and _OPCODE.fullmatch(opcode) is not None


def classify_proto(data: bytes) -> tuple[str, bytes, dict]:
    """What a binary XLA dump holds, by the one rule every reader shares (the index, render, replay):
    ``("hlo_proto" | "snapshot" | "module", the HloModuleProto's bytes, its decoded fields)`` for an HloProto
    (XLA's ``*.hlo.pb``), an HloSnapshot (field 1 an HloProto) or a bare HloModuleProto. InputError otherwise."""
    top = _message(data)
    if top is None:
        raise InputError("the file is not a protobuf message", _HINT)
    inner = first(top, HLO_PROTO_MODULE)
    inner_fields = _message(inner)
    if _is_module(inner_fields) and isinstance(inner, bytes):
        return "hlo_proto", inner, inner_fields
    nested = first(inner_fields, HLO_PROTO_MODULE) if inner_fields else None
    nested_fields = _message(nested)
    if _is_module(nested_fields) and isinstance(nested, bytes):
        return "snapshot", nested, nested_fields
    if _is_module(top):
        return "module", data, top
    raise InputError("the protobuf is not an HloProto, HloModuleProto or HloSnapshot", _HINT)


#: What each kind :func:`classify_proto` tells is, in the words ``explain`` uses.
PROTO_KINDS = {
    "snapshot": "an HloSnapshot (the module, with the arguments and result of one execution)",
    "hlo_proto": "an HloProto (the module, and its buffer assignment when dumped after optimizations)",
    "module": "a bare HloModuleProto",
}


def proto_holds(data: bytes) -> str | None:
    """The kind of binary dump ``data`` is, by :func:`classify_proto` (the rule replay reads it by), or None for bytes
    that are no XLA proto."""
    try:
        return classify_proto(data)[0]
    except InputError:
        return None


def find_module_proto(data: bytes) -> dict:
    """The HloModuleProto fields inside an HloProto, an HloSnapshot, or the bare module itself."""
    return classify_proto(data)[2]


def shape_text(data: bytes | None, with_layout: bool = True) -> str:
    """A ShapeProto as HLO text: ``f32[8,128]{1,0}``, ``(s32[], f32[<=4]{0})``, ``token[]``."""
    fields = _message(data) or {}
    element_type = first(fields, SHAPE_ELEMENT_TYPE, 0)
    if element_type == TUPLE_TYPE:
        parts = [shape_text(t, with_layout) for t in fields.get(SHAPE_TUPLE_SHAPES, [])]
        return f"({', '.join(parts)})"
    dims = [as_signed64(d) for d in repeated_varints(fields.get(SHAPE_DIMENSIONS, []))]
    dynamic = repeated_varints(fields.get(SHAPE_IS_DYNAMIC_DIMENSION, []))
    dim_text = ",".join(_dimension_text(d, n < len(dynamic) and bool(dynamic[n])) for n, d in enumerate(dims))
    text = f"{PRIMITIVE_TYPES.get(element_type, f'type{element_type}')}[{dim_text}]"
    layout = _message(first(fields, SHAPE_LAYOUT))
    if with_layout and dims and layout is not None:
        text += _layout_text(layout)
    return text


def _dimension_text(size: int, dynamic: bool) -> str:
    """``8``, ``<=8`` (dynamic, at most 8) or ``?`` (unbounded: XLA stores the smallest int64)."""
    if size == UNBOUNDED_SIZE:
        return "?"
    return f"<={size}" if dynamic else str(size)


def _layout_text(layout: dict) -> str:
    minor_to_major = ",".join(str(d) for d in repeated_varints(layout.get(LAYOUT_MINOR_TO_MAJOR, [])))
    extras = ""
    for tile in layout.get(LAYOUT_TILES, []):
        sizes = repeated_varints((_message(tile) or {}).get(TILE_DIMENSIONS, []))
        extras += "T(" + ",".join(str(s) if as_signed64(s) >= 0 else _COMBINED_TILE_DIMENSION for s in sizes) + ")"
    if first(layout, LAYOUT_ELEMENT_SIZE_IN_BITS, 0):
        extras += f"E({first(layout, LAYOUT_ELEMENT_SIZE_IN_BITS)})"
    if first(layout, LAYOUT_MEMORY_SPACE, 0):
        extras += f"S({first(layout, LAYOUT_MEMORY_SPACE)})"
    return "{" + minor_to_major + (":" + extras if extras else "") + "}"


def _source_table(module: dict) -> tuple[list[dict], list[dict], list[str]]:
    index = _message(first(module, MODULE_STACK_FRAME_INDEX)) or {}
    files = [as_str(f) or "" for f in index.get(FRAME_INDEX_FILE_NAMES, [])]
    locations = [_message(x) or {} for x in index.get(FRAME_INDEX_FILE_LOCATIONS, [])]
    frames = [_message(x) or {} for x in index.get(FRAME_INDEX_STACK_FRAMES, [])]
    return frames, locations, files


def _apply_metadata(instruction: HloInstruction, data: bytes | None, table: Any) -> None:
    metadata = _message(data)
    if not metadata:
        return
    instruction.op_type = as_str(first(metadata, METADATA_OP_TYPE)) or None
    instruction.op_name = as_str(first(metadata, METADATA_OP_NAME)) or None
    instruction.source_file = as_str(first(metadata, METADATA_SOURCE_FILE)) or None
    instruction.source_line = first(metadata, METADATA_SOURCE_LINE) or None
    instruction.stack_frame_id = first(metadata, METADATA_STACK_FRAME_ID) or None
    frames, locations, files = table
    frame_id = instruction.stack_frame_id
    if instruction.source_file is None and frame_id and frame_id <= len(frames):  # ids are 1-based
        location_id = first(frames[frame_id - 1], FRAME_FILE_LOCATION_ID, 0)
        if 0 < location_id <= len(locations):
            location = locations[location_id - 1]
            file_id = first(location, LOCATION_FILE_NAME_ID, 0)
            if 0 < file_id <= len(files):
                instruction.source_file = files[file_id - 1]
                instruction.source_line = first(location, LOCATION_LINE) or None


def _call_attributes(opcode: str, callees: list[str]) -> tuple[dict[str, str], list[str]]:
    """The attribute(s) HLO text would print for an instruction's called computations, and their order."""
    refs = [f"%{c}" for c in callees]
    if opcode == "while" and len(callees) == 2:  # the proto stores (body, condition); text prints condition first
        return {"condition": refs[1], "body": refs[0]}, [callees[1], callees[0]]
    if opcode == "select-and-scatter" and len(callees) == 2:
        return {"select": refs[0], "scatter": refs[1]}, callees
    if opcode == "conditional":
        return {"branch_computations": "{" + ", ".join(refs) + "}"}, callees
    if opcode == "custom-call":
        return {"called_computations": "{" + ", ".join(refs) + "}"}, callees
    if opcode in ("fusion", "async-start") and len(refs) == 1:
        return {"calls": refs[0]}, callees
    if len(refs) == 1:
        return {"to_apply": refs[0]}, callees
    return {"called_computations": "{" + ", ".join(refs) + "}"}, callees


def _instruction(fields: dict, computation: str, names_by_id: Any, computation_names: Any, table: Any) -> HloInstruction:
    opcode = as_str(first(fields, INSTRUCTION_OPCODE)) or ""
    instruction = HloInstruction(
        name=as_str(first(fields, INSTRUCTION_NAME)) or "",
        opcode=opcode,
        shape=shape_text(first(fields, INSTRUCTION_SHAPE)),
        computation=computation,
        operands=[names_by_id(i) for i in repeated_varints(fields.get(INSTRUCTION_OPERAND_IDS, []))],
    )
    attributes: dict[str, str] = {}
    if opcode == "constant":
        literal = first(fields, INSTRUCTION_LITERAL, b"")
        digest = hashlib.sha256(literal if isinstance(literal, bytes) else b"").hexdigest()
        instruction.literal = f"sha256:{digest[:32]}"
    if opcode == "parameter":
        instruction.parameter_number = first(fields, INSTRUCTION_PARAMETER_NUMBER, 0)
    if first(fields, INSTRUCTION_FUSION_KIND) is not None:
        attributes["kind"] = as_str(first(fields, INSTRUCTION_FUSION_KIND)) or ""
    if opcode == "get-tuple-element":
        attributes["index"] = str(first(fields, INSTRUCTION_TUPLE_INDEX, 0))
    dimensions = repeated_varints(fields.get(INSTRUCTION_DIMENSIONS, []))
    if opcode == "iota" and dimensions:
        attributes["iota_dimension"] = str(dimensions[0])
    elif dimensions or opcode == "broadcast":  # text prints a scalar broadcast's empty dimensions={}
        attributes["dimensions"] = "{" + ",".join(str(d) for d in dimensions) + "}"
    if first(fields, INSTRUCTION_CUSTOM_CALL_TARGET) is not None:
        attributes["custom_call_target"] = f'"{as_str(first(fields, INSTRUCTION_CUSTOM_CALL_TARGET))}"'
    if first(fields, INSTRUCTION_COMPARISON_DIRECTION) is not None:
        attributes["direction"] = as_str(first(fields, INSTRUCTION_COMPARISON_DIRECTION)) or ""
    callee_ids = repeated_varints(fields.get(INSTRUCTION_CALLED_COMPUTATION_IDS, []))
    callees = [computation_names.get(i, f"computation_{i}") for i in callee_ids]
    if callees:
        call_attributes, instruction.called_computations = _call_attributes(opcode, callees)
        attributes.update(call_attributes)
    predecessors = repeated_varints(fields.get(INSTRUCTION_CONTROL_PREDECESSOR_IDS, []))
    if predecessors:
        attributes["control-predecessors"] = "{" + ", ".join(f"%{names_by_id(i)}" for i in predecessors) + "}"
    if first(fields, INSTRUCTION_BACKEND_CONFIG):
        attributes["backend_config"] = as_str(first(fields, INSTRUCTION_BACKEND_CONFIG)) or ""
    instruction.attributes = attributes
    _apply_metadata(instruction, first(fields, INSTRUCTION_METADATA), table)
    return instruction


def summarize_hlo_proto(data: bytes) -> HloModule:
    """Summarize an HloProto, HloModuleProto or HloSnapshot (see the module docstring for what differs from text)."""
    module = find_module_proto(data)
    table = _source_table(module)
    raw_computations = [_message(c) or {} for c in module.get(MODULE_COMPUTATIONS, [])]
    computation_names = {
        first(c, COMPUTATION_ID, n): as_str(first(c, COMPUTATION_NAME)) or f"computation_{n}"
        for n, c in enumerate(raw_computations)
    }
    module_ids: dict[int, str] = {}  # ids are module-wide in current XLA; older protos number per computation
    parsed = []
    for raw in raw_computations:
        instructions = [_message(i) or {} for i in raw.get(COMPUTATION_INSTRUCTIONS, [])]
        local = {first(i, INSTRUCTION_ID, n): as_str(first(i, INSTRUCTION_NAME)) or "" for n, i in enumerate(instructions)}
        module_ids.update(local)
        parsed.append((raw, instructions, local))

    computations: dict[str, HloComputation] = {}
    for raw, instructions, local in parsed:
        name = as_str(first(raw, COMPUTATION_NAME)) or f"computation_{len(computations)}"

        def names_by_id(i: int, local: Any = local) -> str:
            return local.get(i) or module_ids.get(i) or f"id_{i}"

        computation = HloComputation(name=name, is_fusion=bool(first(raw, COMPUTATION_IS_FUSION, 0)))
        computation.instructions = [_instruction(i, name, names_by_id, computation_names, table) for i in instructions]
        root_id = first(raw, COMPUTATION_ROOT_ID)
        computation.root = local.get(root_id, "") if root_id is not None else ""
        if not computation.root and computation.instructions:
            computation.root = computation.instructions[-1].name
        for instruction in computation.instructions:
            instruction.is_root = instruction.name == computation.root
        params = [i for i in computation.instructions if i.opcode == "parameter"]
        computation.parameters = sorted(params, key=lambda i: i.parameter_number or 0)
        computations[name] = computation

    entry = computation_names.get(first(module, MODULE_ENTRY_ID, -1)) or as_str(first(module, MODULE_ENTRY_NAME))
    if entry not in computations:
        entry = next(reversed(computations))
    computations[entry].is_entry = True
    summary = HloModule(
        name=as_str(first(module, MODULE_NAME)) or "",
        entry_computation=entry,
        computations=computations,
        entry_signature="",
        parsed_from="proto",
    )
    mark_fusion_computations(summary)
    host_signature = _program_signature(first(module, MODULE_HOST_PROGRAM_SHAPE))
    summary.entry_signature = host_signature or signature_of(summary.entry)
    return summary


def _program_signature(data: bytes | None) -> str | None:
    program = _message(data)
    if not program or PROGRAM_SHAPE_RESULT not in program:
        return None
    parameters = [shape_text(p, with_layout=False) for p in program.get(PROGRAM_SHAPE_PARAMETERS, [])]
    return format_signature(parameters, shape_text(first(program, PROGRAM_SHAPE_RESULT), with_layout=False))
