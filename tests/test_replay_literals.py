"""LiteralProto decoding against values written by a real JAX snapshot, and the encoder."""

from __future__ import annotations

import numpy as np
import pytest

from xlarun.errors import InputError
from xlarun.replay.literals import (
    PRIMITIVE_TYPES,
    Shape,
    decode_literal,
    decode_shape,
    describe,
    encode_literal,
    flatten,
    numpy_dtype,
    primitive_type,
)

ml_dtypes = pytest.importorskip("ml_dtypes")

# Every argument type the snapshot test feeds through jax, with its values.
ARGS_SOURCE = """
args = {
    "bf16": np.array([[1.5, -2.25], [3.0, 0.0078125]], dtype=ml_dtypes.bfloat16),
    "f16": np.array([0.5, -65504.0, 6e-5], dtype=np.float16),
    "s8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "u32": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
    "pred": np.array([[True, False, True]]),
    "c64": np.array([1 + 2j, -3.5 - 0.25j], dtype=np.complex64),
    "s16": np.array([-32768, 7], dtype=np.int16),
    "u16": np.array([65535, 3], dtype=np.uint16),
    "s64": np.array([-(2**62), 5], dtype=np.int64),
    "u64": np.array([2**63 + 5], dtype=np.uint64),
    "f64": np.array([np.pi, -np.inf], dtype=np.float64),
    "c128": np.array([1e-300 + 1e300j], dtype=np.complex128),
    "u8": np.arange(6, dtype=np.uint8).reshape(2, 3),
    "f8e4m3fn": np.array([0.5, -448.0], dtype=ml_dtypes.float8_e4m3fn),
    "f32": np.float32(2.5),
}
"""
SNAPSHOT_SCRIPT = (
    "import jax, numpy as np, ml_dtypes\n"
    'jax.config.update("jax_enable_x64", True)\n'
    + ARGS_SOURCE
    + "def echo(*xs):\n    return xs\n"
    + "jax.jit(echo)(*args.values())\n"
)


def expected_args() -> dict:
    scope = {"np": np, "ml_dtypes": ml_dtypes}
    exec(ARGS_SOURCE, scope)
    return scope["args"]


@pytest.fixture(scope="module")
def typed_snapshot(tmp_path_factory):
    pytest.importorskip("jax")
    from tests.test_replay_engine import capture_jax, dump_file

    dump = capture_jax(tmp_path_factory.mktemp("typed"), SNAPSHOT_SCRIPT)
    return dump_file(dump, "jit_echo", r"snapshot\.-?\d+\.pb")


@pytest.mark.slow
def test_every_argument_of_a_real_snapshot_decodes_to_the_values_jax_was_given(typed_snapshot):
    from xlarun.replay.sources import load_source

    source = load_source(typed_snapshot)
    expected_by_name = expected_args()
    assert len(source.arguments) == len(expected_by_name)
    for (name, expected), decoded in zip(expected_by_name.items(), source.arguments, strict=True):
        expected = np.asarray(expected)
        assert decoded.dtype == expected.dtype, name
        assert decoded.shape == expected.shape, name
        assert describe(decoded).startswith(name + "["), (name, describe(decoded))
        np.testing.assert_array_equal(decoded.astype(np.complex128), expected.astype(np.complex128), err_msg=name)
    # the result is a tuple literal of the same values
    result = flatten(source.result)
    assert [describe(r) for r in result] == [describe(a) for a in source.arguments]


@pytest.mark.slow
def test_the_real_snapshot_replays_to_its_recorded_result(typed_snapshot):
    from xlarun.replay import ReplayOptions, replay_file

    result = replay_file(typed_snapshot, ReplayOptions())
    assert result.verdict == "match", result.mismatches


@pytest.mark.parametrize("code", sorted(PRIMITIVE_TYPES))
def test_encode_decode_round_trip_for_every_primitive_type(code):
    ptype = PRIMITIVE_TYPES[code]
    dtype = numpy_dtype(ptype)
    if ptype.name == "pred":
        values = np.array([[True, False, True], [False, False, True]])
    elif ptype.name[0] in "su":
        values = np.array([[0, 1, 0], [1, 1, 0]]).astype(dtype)
    elif ptype.name == "f8e8m0fnu":
        values = np.array([[0.5, 1, 2], [4, 8, 0.25]]).astype(dtype)
    elif ptype.name.startswith("c"):
        values = (np.array([[1, 2, 3], [4, 5, 6]]) + 0.5j).astype(dtype)
    else:
        values = np.array([[0.5, -1, 2], [-4, 1.5, 0]]).astype(dtype)
    decoded = decode_literal(encode_literal(values))
    assert decoded.dtype == dtype and decoded.shape == (2, 3)
    np.testing.assert_array_equal(decoded.astype(np.complex128), values.astype(np.complex128))


def _varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(field, payload):
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _shape(element_type, dims, minor_to_major):
    body = _varint(2 << 3) + _varint(element_type) + _ld(3, b"".join(_varint(d) for d in dims))
    return body + _ld(5, _ld(1, b"".join(_varint(d) for d in minor_to_major)))


def test_column_major_literal_is_returned_in_logical_order():
    # f32[2,3]{0,1}: physically column-major, so the values arrive as a[0,0], a[1,0], a[0,1], ...
    logical = np.arange(6, dtype=np.float32).reshape(2, 3)
    physical = logical.T.reshape(-1).astype("<f4").tobytes()
    literal = _ld(1, _shape(11, (2, 3), (0, 1))) + _ld(8, physical)
    np.testing.assert_array_equal(decode_literal(literal), logical)
    assert decode_shape(_shape(11, (2, 3), (0, 1))).minor_to_major == (0, 1)


def test_unpacked_repeated_fields_and_negative_int32():
    # s32s written one varint per element (not packed); -5 is a 10-byte varint
    literal = _ld(1, _shape(4, (2,), (0,))) + _varint(4 << 3) + _varint((1 << 64) - 5) + _varint(4 << 3) + _varint(7)
    np.testing.assert_array_equal(decode_literal(literal), np.array([-5, 7], dtype=np.int32))


def test_packed_sub_byte_values_are_spread():
    # s4[3] packed two to a byte, low nibble first: 1, -2 (0xE), 7
    literal = _ld(1, _shape(21, (3,), (0,))) + _ld(21, bytes([0xE1, 0x07]))
    np.testing.assert_array_equal(decode_literal(literal).astype(np.int8), np.array([1, -2, 7], dtype=np.int8))


def test_wrong_value_count_is_an_input_error():
    literal = _ld(1, _shape(11, (3,), (0,))) + _ld(8, np.zeros(2, "<f4").tobytes())
    with pytest.raises(InputError, match="holds 2 values"):
        decode_literal(literal)


_DAMAGED = {  # each of these must be refused, never escape as IndexError, ValueError, TypeError or OverflowError (exit 4)
    "a layout naming a dimension the shape lacks": _ld(1, _shape(11, (2, 3), (0, 5))) + _ld(8, np.zeros(6, "<f4").tobytes()),
    "a layout naming a dimension twice": _ld(1, _shape(11, (2, 3), (0, 0))) + _ld(8, np.zeros(6, "<f4").tobytes()),
    "packed floats cut inside a value": _ld(1, _shape(11, (2,), (0,))) + _ld(8, np.zeros(2, "<f4").tobytes()[:7]),
    "bytes cut inside a value": _ld(1, _shape(10, (2,), (0,))) + _ld(11, b"\x00\x3c\x00"),  # f16s: 1.5 values
    "a number where a tuple element belongs": _ld(1, _varint(2 << 3) + _varint(13) + _ld(4, _shape(11, (), ())))
    + _varint(10 << 3)
    + _varint(1),
    "an s32 too large for 32 bits": _ld(1, _shape(4, (1,), (0,))) + _varint(4 << 3) + _varint(1 << 40),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGED))
def test_a_damaged_literal_is_an_input_error(damage):
    with pytest.raises(InputError) as error:
        decode_literal(_DAMAGED[damage])
    assert error.value.hint in ("the snapshot is damaged", "the file is not the XLA proto it was taken for")


def test_randomly_damaged_literals_decode_or_are_input_errors():
    """Bytes flipped, dropped and inserted in literals of several types: never any exception but InputError."""
    rng = np.random.default_rng(0)
    originals = [
        encode_literal(v)
        for v in (
            np.arange(6, dtype=np.float32).reshape(2, 3),
            np.array([1 + 2j, 3j], np.complex64),
            [np.int32(3), np.ones(4, np.float16)],
            np.arange(5, dtype=np.int8),
            np.array([True, False]),
        )
    ]
    outcomes = {"decoded": 0, "refused": 0}
    for trial in range(3000):
        data = bytearray(originals[trial % len(originals)])
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data) + 1))
            kind = trial % 3 if data else 2
            if kind == 0:
                data[min(at, len(data) - 1)] = int(rng.integers(0, 256))
            elif kind == 1:
                del data[min(at, len(data) - 1)]
            else:
                data.insert(at, int(rng.integers(0, 256)))
        try:
            with np.errstate(all="ignore"):
                decode_literal(bytes(data))
        except InputError:
            outcomes["refused"] += 1
        else:
            outcomes["decoded"] += 1
    assert outcomes["refused"] > 1000 and outcomes["decoded"] > 50


def test_tuple_and_token_shapes():
    value = [np.zeros(2, np.float32), [np.int32(3), np.array([True])]]
    decoded = decode_literal(encode_literal(value))
    assert describe(decoded) == "(f32[2], (s32[], pred[1]))"
    assert [describe(v) for v in flatten(decoded)] == ["f32[2]", "s32[]", "pred[1]"]
    assert Shape(17).hlo_text() == "token[]"
    assert primitive_type("bf16").code == 16 and primitive_type(16).name == "bf16"
