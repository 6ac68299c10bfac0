"""replay/downgrade.py on small hand-written protos (no jaxlib needed; real modules: tests/test_replay_pjrt.py)."""

from __future__ import annotations

import pytest

from xlarun.errors import ExitCode
from xlarun.hlo.protowire import LENGTH_DELIMITED, VARINT, ProtoDecodeError, fields_by_number, packed_varints
from xlarun.replay.downgrade import has_wide_instruction_ids, renumber_instructions


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return _varint(number << 3 | LENGTH_DELIMITED) + _varint(len(value)) + value
    return _varint(number << 3 | VARINT) + _varint(value)


WIDE = 1 << 32  # how newer XLA numbers instructions: computation id << 32 | index


def _module() -> bytes:
    """An HloModuleProto: one computation (field 3) of two instructions (field 2: id 35, operand ids 36), root id 6,
    and a schedule (field 7)."""
    first = _field(35, WIDE + 7)
    second = _field(35, WIDE + 9) + _field(36, _varint(WIDE + 7))
    computation = _field(2, first) + _field(2, second) + _field(6, WIDE + 9)
    return _field(1, b"jit_f") + _field(3, computation) + _field(7, b"schedule")


def test_wide_ids_are_numbered_from_one_with_operands_and_root_following():
    module = _module()
    assert has_wide_instruction_ids(module)
    narrow = renumber_instructions(module)
    assert not has_wide_instruction_ids(narrow)
    fields = fields_by_number(narrow)
    assert 7 not in fields and fields[1] == [b"jit_f"]
    computation = fields_by_number(fields[3][0])
    first, second = (fields_by_number(i) for i in computation[2])
    assert first[35] == [1] and second[35] == [2] and packed_varints(second[36][0]) == [1] and computation[6] == [2]


@pytest.mark.parametrize("damage", ["a number where a computation belongs", "a number where an instruction belongs"])
def test_a_proto_of_the_wrong_shape_is_an_input_error_not_a_crash(damage):
    """A field holding a number where a sub-message belongs is refused, never a TypeError (a crash, exit 4)."""
    if damage == "a number where a computation belongs":
        module = _field(3, 5)
    else:
        module = _field(3, _field(2, 5))
    for rewrite in (has_wide_instruction_ids, renumber_instructions):
        with pytest.raises(ProtoDecodeError, match="holds a number where a sub-message belongs") as error:
            rewrite(module)
        assert error.value.exit_code == ExitCode.USAGE
