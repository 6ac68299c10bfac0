"""Make a module written by a newer XLA readable by an older jaxlib's parser.

Measured with jaxlib 0.4.30 on modules dumped by jax 0.7 to 0.12 (CPU):

- protos: newer XLA numbers instructions ``computation id << 32 | index``; parsers before 2025
  refuse any id past INT_MAX ("Instruction with id > INT_MAX"). :func:`renumber_instructions`
  numbers them 1..N again (operands, control predecessors and roots follow) and drops the
  schedule, the only other place ids appear (a replay recompiles the module anyway);
- text: newer printers add stack-frame tables (``FileNames``, ``FunctionNames``,
  ``FileLocations``, ``StackFrames``) after the ``HloModule`` line and metadata attributes older
  parsers reject (``source_end_line``, ``stack_frame_id``). :func:`strip_debug_info` drops both:
  metadata never changes what a module computes.

Both rewrites are only tried after the installed parser has refused the original.
"""

from __future__ import annotations

import re

from xlarun.hlo.lex import LineError, walk
from xlarun.hlo.protowire import LENGTH_DELIMITED, VARINT, as_bytes, as_int, encode_varint, iter_fields, packed_varints

# HloModuleProto, HloComputationProto, HloInstructionProto field numbers (xla/service/hlo.proto)
_MODULE_COMPUTATIONS, _MODULE_SCHEDULE = 3, 7
_COMPUTATION_INSTRUCTIONS, _COMPUTATION_ROOT_ID = 2, 6
_INSTRUCTION_ID, _INSTRUCTION_OPERAND_IDS, _INSTRUCTION_CONTROL_PREDECESSOR_IDS = 35, 36, 37
_INT_MAX = 2**31 - 1

_FRAME_TABLES = re.compile(r"^(?:FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*", re.MULTILINE)
_METADATA = re.compile(r",\s*metadata=\{")


# ---- protos ----


def has_wide_instruction_ids(module_proto: bytes) -> bool:
    """Whether any instruction id is past INT_MAX (what parsers before 2025 refuse)."""
    return any(i > _INT_MAX for i in _instruction_ids(module_proto))


def renumber_instructions(module_proto: bytes) -> bytes:
    """The HloModuleProto with instruction ids 1..N and no schedule; every other field kept as it was."""
    renumbered = {old: new for new, old in enumerate(_instruction_ids(module_proto), start=1)}
    out = bytearray()
    for number, wire_type, value in iter_fields(module_proto):
        if number == _MODULE_SCHEDULE:
            continue
        if number == _MODULE_COMPUTATIONS:
            value = _rewrite_computation(as_bytes(value), renumbered)
        _emit(out, number, wire_type, value)
    return bytes(out)


def _instruction_ids(module_proto: bytes) -> list[int]:
    ids: list[int] = []
    for number, _, computation in iter_fields(module_proto):
        if number != _MODULE_COMPUTATIONS:
            continue
        for field, _, instruction in iter_fields(as_bytes(computation)):
            if field == _COMPUTATION_INSTRUCTIONS:
                ids.extend(as_int(v) for n, _, v in iter_fields(as_bytes(instruction)) if n == _INSTRUCTION_ID)
    return ids


def _rewrite_computation(data: bytes, renumbered: dict[int, int]) -> bytes:
    out = bytearray()
    for number, wire_type, value in iter_fields(data):
        if number == _COMPUTATION_INSTRUCTIONS:
            value = _rewrite_instruction(as_bytes(value), renumbered)
        elif number == _COMPUTATION_ROOT_ID:
            value = renumbered.get(as_int(value), as_int(value))
        _emit(out, number, wire_type, value)
    return bytes(out)


def _rewrite_instruction(data: bytes, renumbered: dict[int, int]) -> bytes:
    out = bytearray()
    for number, wire_type, value in iter_fields(data):
        if number == _INSTRUCTION_ID:
            value = renumbered.get(as_int(value), as_int(value))
        elif number in (_INSTRUCTION_OPERAND_IDS, _INSTRUCTION_CONTROL_PREDECESSOR_IDS):
            ids = packed_varints(as_bytes(value)) if wire_type == LENGTH_DELIMITED else [as_int(value)]
            value = b"".join(encode_varint(renumbered.get(i, i)) for i in ids)
            wire_type = LENGTH_DELIMITED  # written packed, as XLA writes repeated ids
        _emit(out, number, wire_type, value)
    return bytes(out)


def _emit(out: bytearray, number: int, wire_type: int, value: int | bytes) -> None:
    out += encode_varint(number << 3 | wire_type)
    if wire_type == VARINT:
        out += encode_varint(as_int(value))
    elif wire_type == LENGTH_DELIMITED:
        out += encode_varint(len(as_bytes(value))) + as_bytes(value)
    else:  # fixed64 / fixed32, kept as the raw little-endian integer iter_fields gives
        out += as_int(value).to_bytes(8 if wire_type == 1 else 4, "little")


# ---- text ----


def strip_debug_info(text: str) -> str:
    """The module text without stack-frame tables and ``metadata={...}`` attributes."""
    text = _FRAME_TABLES.sub("", text)
    pieces = []
    pos = 0
    for match in _METADATA.finditer(text):
        if match.start() < pos:  # inside metadata already dropped
            continue
        brace = match.end() - 1
        try:
            end = walk(text, brace, False)
        except LineError:
            return text  # not XLA's printing; leave it to the parser to say what is wrong
        pieces.append(text[pos : match.start()])
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)
