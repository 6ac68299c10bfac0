"""XLA literals <-> numpy arrays, without XLA's .proto files.

Decodes ``ShapeProto`` and ``LiteralProto`` (field numbers from ``xla/xla_data.proto``) with
:mod:`xlarun.hlo.protowire`, for every ``PrimitiveType``. 8/16-bit, sub-byte and fp8 types arrive
as little-endian bytes and become ``ml_dtypes`` arrays (jax depends on ``ml_dtypes``); without
it they stay raw unsigned storage of the same width. Array data in a literal is stored in the
physical order of its layout (``minor_to_major``); the decoded array is always in logical order.
The encoder (numpy -> LiteralProto bytes) writes the default row-major layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xlarun.errors import InputError
from xlarun.hlo.protowire import (
    LENGTH_DELIMITED,
    as_bytes,
    as_signed64,
    encode_varint,
    fields_by_number,
    first,
    repeated_varints,
)

try:  # a jax dependency; optional so the decoder also runs without jax
    import ml_dtypes
except ImportError:  # pragma: no cover - exercised only without jax installed
    ml_dtypes = None  # type: ignore[assignment]


@dataclass(frozen=True)
class PrimitiveType:
    """One XLA element type: its enum code, HLO spelling, numpy dtype and literal field."""

    code: int
    name: str  # spelling in HLO text: f32, bf16, pred, s8 ...
    numpy_name: str  # numpy dtype name, or an ml_dtypes attribute
    field: int  # LiteralProto field that holds the values
    wire: str  # bool | bytes | varint | fixed32 | fixed64
    bits: int


def _t(code: Any, name: Any, numpy_name: Any, field: Any, wire: Any, bits: Any) -> Any:
    return PrimitiveType(code, name, numpy_name, field, wire, bits)


PRIMITIVE_TYPES: dict[int, PrimitiveType] = {
    t.code: t
    for t in (
        _t(1, "pred", "bool", 2, "bool", 8),
        _t(30, "s1", "int1", 30, "bytes", 1),
        _t(26, "s2", "int2", 26, "bytes", 2),
        _t(21, "s4", "int4", 21, "bytes", 4),
        _t(2, "s8", "int8", 15, "bytes", 8),
        _t(3, "s16", "int16", 17, "bytes", 16),
        _t(4, "s32", "int32", 4, "varint", 32),
        _t(5, "s64", "int64", 5, "varint", 64),
        _t(31, "u1", "uint1", 31, "bytes", 1),
        _t(27, "u2", "uint2", 27, "bytes", 2),
        _t(22, "u4", "uint4", 22, "bytes", 4),
        _t(6, "u8", "uint8", 3, "bytes", 8),
        _t(7, "u16", "uint16", 16, "bytes", 16),
        _t(8, "u32", "uint32", 6, "varint", 32),
        _t(9, "u64", "uint64", 7, "varint", 64),
        _t(10, "f16", "float16", 11, "bytes", 16),
        _t(16, "bf16", "bfloat16", 13, "bytes", 16),
        _t(11, "f32", "float32", 8, "fixed32", 32),
        _t(12, "f64", "float64", 9, "fixed64", 64),
        _t(19, "f8e5m2", "float8_e5m2", 19, "bytes", 8),
        _t(28, "f8e4m3", "float8_e4m3", 28, "bytes", 8),
        _t(20, "f8e4m3fn", "float8_e4m3fn", 20, "bytes", 8),
        _t(23, "f8e4m3b11fnuz", "float8_e4m3b11fnuz", 23, "bytes", 8),
        _t(29, "f8e3m4", "float8_e3m4", 29, "bytes", 8),
        _t(24, "f8e5m2fnuz", "float8_e5m2fnuz", 24, "bytes", 8),
        _t(25, "f8e4m3fnuz", "float8_e4m3fnuz", 25, "bytes", 8),
        _t(32, "f4e2m1fn", "float4_e2m1fn", 32, "bytes", 4),
        _t(33, "f8e8m0fnu", "float8_e8m0fnu", 33, "bytes", 8),
        _t(15, "c64", "complex64", 12, "fixed32", 64),
        _t(18, "c128", "complex128", 18, "fixed64", 128),
    )
}
TUPLE, OPAQUE_TYPE, TOKEN, BUFFER = 13, 14, 17, 34
_BY_NAME = {t.name: t for t in PRIMITIVE_TYPES.values()}
_LITERAL_SHAPE, _LITERAL_TUPLE = 1, 10
_SHAPE_ELEMENT_TYPE, _SHAPE_DIMS, _SHAPE_TUPLE, _SHAPE_LAYOUT, _SHAPE_DYNAMIC = 2, 3, 4, 5, 6
_LAYOUT_MINOR_TO_MAJOR, _LAYOUT_TILES = 1, 6


def primitive_type(code_or_name: int | str) -> PrimitiveType:
    """The element type for an enum code (``11``) or an HLO spelling (``"f32"``)."""
    try:
        return PRIMITIVE_TYPES[code_or_name] if isinstance(code_or_name, int) else _BY_NAME[code_or_name]
    except KeyError:
        raise InputError(f"unsupported XLA element type {code_or_name!r}") from None


def numpy_dtype(ptype: PrimitiveType) -> np.dtype:
    """The numpy dtype of an element type; raw unsigned storage when ml_dtypes is missing."""
    if hasattr(np, ptype.numpy_name) and ptype.numpy_name not in ("int1", "int2", "int4"):
        return np.dtype(ptype.numpy_name)
    if ml_dtypes is not None and hasattr(ml_dtypes, ptype.numpy_name):
        return np.dtype(getattr(ml_dtypes, ptype.numpy_name))
    return np.dtype(np.uint16 if ptype.bits == 16 else np.uint8)


def primitive_type_of(dtype: np.dtype) -> PrimitiveType:
    """The element type of a numpy (or ml_dtypes) dtype."""
    dtype = np.dtype(dtype)
    for ptype in PRIMITIVE_TYPES.values():
        if ptype.numpy_name == dtype.name:
            return ptype
    raise InputError(f"numpy dtype {dtype} has no XLA element type")


@dataclass(frozen=True)
class Shape:
    """A decoded ShapeProto: an array shape with an optional layout, or a tuple of shapes."""

    element_type: int
    dimensions: tuple[int, ...] = ()
    minor_to_major: tuple[int, ...] | None = None
    tuple_shapes: tuple[Shape, ...] = ()
    tiled: bool = False
    #: Per dimension: True where the dimension is bounded-dynamic (``f32[<=8]``: at most 8).
    dynamic: tuple[bool, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.element_type == TUPLE

    @property
    def is_array(self) -> bool:
        return self.element_type in PRIMITIVE_TYPES

    @property
    def is_token(self) -> bool:
        return self.element_type == TOKEN

    def leaves(self) -> list[Shape]:
        """The array and token shapes of a (nested) tuple shape, in the order XLA flattens them."""
        if self.is_tuple:
            return [leaf for sub in self.tuple_shapes for leaf in sub.leaves()]
        return [self]

    def nbytes(self) -> int:
        """Bytes a value of this shape takes as numpy arrays (dynamic dimensions at their bound, sub-byte types one byte)."""
        if self.is_tuple:
            return sum(sub.nbytes() for sub in self.tuple_shapes)
        if not self.is_array:
            return 0
        count = 1
        for dim in self.dimensions:
            count *= max(dim, 0)
        return count * numpy_dtype(primitive_type(self.element_type)).itemsize

    def hlo_text(self) -> str:
        """The shape as HLO text prints it, without the layout: ``f32[3,4]``, ``(f32[], s32[2])``."""
        if self.is_tuple:
            return "(" + ", ".join(s.hlo_text() for s in self.tuple_shapes) + ")"
        if self.element_type == TOKEN:
            return "token[]"
        if not self.is_array:
            return "opaque[]"
        dims = [("<=" if i < len(self.dynamic) and self.dynamic[i] else "") + str(d) for i, d in enumerate(self.dimensions)]
        return f"{primitive_type(self.element_type).name}[{','.join(dims)}]"


def decode_shape(data: bytes) -> Shape:
    """Decode a ShapeProto."""
    fields = fields_by_number(data)
    element_type = first(fields, _SHAPE_ELEMENT_TYPE, 0)
    dims = tuple(as_signed64(v) for v in repeated_varints(fields.get(_SHAPE_DIMS, [])))
    tuple_shapes = tuple(decode_shape(as_bytes(raw)) for raw in fields.get(_SHAPE_TUPLE, []))
    minor_to_major = None
    tiled = False
    layout = first(fields, _SHAPE_LAYOUT)
    if isinstance(layout, bytes):
        layout_fields = fields_by_number(layout)
        order = repeated_varints(layout_fields.get(_LAYOUT_MINOR_TO_MAJOR, []))
        minor_to_major = tuple(order) if len(order) == len(dims) else None
        tiled = bool(layout_fields.get(_LAYOUT_TILES))
    dynamic = tuple(bool(v) for v in repeated_varints(fields.get(_SHAPE_DYNAMIC, [])))
    return Shape(element_type, dims, minor_to_major, tuple_shapes, tiled, dynamic if any(dynamic) else ())


def decode_literal(data: bytes) -> Any:
    """Decode a LiteralProto: a numpy array, a list for a tuple literal, ``None`` for a token."""
    fields = fields_by_number(data)
    raw_shape = first(fields, _LITERAL_SHAPE)
    if not isinstance(raw_shape, bytes):
        raise InputError("literal without a shape", "the snapshot is damaged or not an HloSnapshot")
    return _decode_piece(decode_shape(raw_shape), fields)


def _decode_piece(shape: Shape, fields: dict) -> Any:
    if shape.is_tuple:
        elements = [fields_by_number(as_bytes(raw)) for raw in fields.get(_LITERAL_TUPLE, [])]
        if len(elements) != len(shape.tuple_shapes):
            raise InputError(
                f"tuple literal has {len(elements)} elements, its shape {len(shape.tuple_shapes)}",
                "the snapshot is damaged",
            )
        return [_decode_piece(sub, sub_fields) for sub, sub_fields in zip(shape.tuple_shapes, elements, strict=True)]
    if not shape.is_array:
        return None
    ptype = primitive_type(shape.element_type)
    count = int(np.prod(shape.dimensions, dtype=np.int64))
    flat = _decode_values(ptype, fields.get(ptype.field, []), count)
    if flat.size != count:
        raise InputError(
            f"{ptype.name} literal holds {flat.size} values, its shape {shape.hlo_text()} needs {count}",
            "the snapshot is damaged",
        )
    return _to_logical_order(flat, shape)


def _to_logical_order(flat: np.ndarray, shape: Shape) -> np.ndarray:
    """Reshape physically ordered values into a logical (row-major) array."""
    if shape.tiled:
        raise InputError(f"literal of shape {shape.hlo_text()} has a tiled layout", "tiled literals are not supported")
    major_to_minor = list(reversed(shape.minor_to_major)) if shape.minor_to_major else list(range(len(shape.dimensions)))
    if sorted(major_to_minor) != list(range(len(shape.dimensions))):
        raise InputError(
            f"literal of shape {shape.hlo_text()} has a layout that is not an order of its dimensions ({shape.minor_to_major})",
            "the snapshot is damaged",
        )
    physical = flat.reshape([shape.dimensions[d] for d in major_to_minor])
    logical = np.transpose(physical, np.argsort(major_to_minor)) if major_to_minor != sorted(major_to_minor) else physical
    return logical.copy(order="C")


def _decode_values(ptype: PrimitiveType, values: list, count: int) -> np.ndarray:
    dtype = numpy_dtype(ptype)
    if ptype.wire == "bool":
        return np.array(repeated_varints(values), dtype=np.bool_)
    if ptype.wire == "varint":
        ints = repeated_varints(values)
        if ptype.name in ("s32", "s64"):
            ints = [as_signed64(v) for v in ints]
        try:
            return np.array(ints, dtype=dtype)
        except OverflowError:
            raise InputError(f"{ptype.name} literal holds a value its type cannot hold", "the snapshot is damaged") from None
    if ptype.wire in ("fixed32", "fixed64"):
        return _decode_fixed(ptype, values, dtype)
    raw = b"".join(v for v in values if isinstance(v, bytes))
    return _decode_bytes(ptype, raw, dtype, count)


def _decode_fixed(ptype: PrimitiveType, values: list, dtype: np.dtype) -> np.ndarray:
    width = 4 if ptype.wire == "fixed32" else 8
    component = np.dtype("<f4" if width == 4 else "<f8")
    parts = []
    for value in values:
        if isinstance(value, bytes):  # packed
            if len(value) % width:
                raise _cut_values(ptype, len(value), width)
            parts.append(np.frombuffer(value, dtype=component))
        else:  # one unpacked element, delivered as its raw unsigned integer
            parts.append(np.frombuffer(value.to_bytes(width, "little"), dtype=component))
    flat = np.concatenate(parts) if parts else np.zeros(0, component)
    if ptype.name in ("c64", "c128"):
        if flat.size % 2:
            raise _cut_values(ptype, flat.size * width, 2 * width)
        pairs = flat.reshape(-1, 2)
        return (pairs[:, 0] + 1j * pairs[:, 1]).astype(dtype)
    return flat.astype(dtype)


def _decode_bytes(ptype: PrimitiveType, raw: bytes, dtype: np.dtype, count: int) -> np.ndarray:
    if ptype.bits < 8 and len(raw) != count:
        raw = _unpack_sub_byte(raw, ptype.bits, count)
    if len(raw) % dtype.itemsize:
        raise _cut_values(ptype, len(raw), dtype.itemsize)
    return np.frombuffer(raw, dtype=f"<u{dtype.itemsize}").view(dtype)


def _cut_values(ptype: PrimitiveType, size: int, width: int) -> InputError:
    return InputError(f"{ptype.name} literal holds {size} bytes of values, not a multiple of {width}", "the snapshot is damaged")


def _unpack_sub_byte(raw: bytes, bits: int, count: int) -> bytes:
    """Spread values packed ``8 // bits`` to a byte (low bits first) into one byte each."""
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    packed = np.frombuffer(raw, dtype=np.uint8)
    spread = np.stack([(packed >> (bits * i)) & mask for i in range(per_byte)], axis=1).reshape(-1)[:count]
    return spread.astype(np.uint8).tobytes()


# ---- encoding (numpy -> LiteralProto), used to write snapshots and test fixtures ----


def _field(number: int, wire_type: int, payload: bytes | int) -> bytes:
    key = encode_varint((number << 3) | wire_type)
    if isinstance(payload, bytes):
        assert wire_type == LENGTH_DELIMITED
        return key + encode_varint(len(payload)) + payload
    return key + encode_varint(payload)


def encode_shape(array_or_list: Any) -> bytes:
    """A ShapeProto for an array (row-major layout) or a list of arrays (a tuple)."""
    if isinstance(array_or_list, (list, tuple)):
        body = _field(_SHAPE_ELEMENT_TYPE, 0, TUPLE)
        for element in array_or_list:
            body += _field(_SHAPE_TUPLE, LENGTH_DELIMITED, encode_shape(element))
        return body
    array = np.asarray(array_or_list)
    ptype = primitive_type_of(array.dtype)
    dims = b"".join(encode_varint(d) for d in array.shape)
    layout = b"".join(encode_varint(d) for d in reversed(range(array.ndim)))
    body = _field(_SHAPE_ELEMENT_TYPE, 0, ptype.code)
    if dims:
        body += _field(_SHAPE_DIMS, LENGTH_DELIMITED, dims)
    return body + _field(
        _SHAPE_LAYOUT, LENGTH_DELIMITED, _field(_LAYOUT_MINOR_TO_MAJOR, LENGTH_DELIMITED, layout) if layout else b""
    )


def encode_literal(value: Any) -> bytes:
    """A LiteralProto for a numpy array, or for a list of them (a tuple literal)."""
    body = _field(_LITERAL_SHAPE, LENGTH_DELIMITED, encode_shape(value))
    if isinstance(value, (list, tuple)):
        for element in value:
            body += _field(_LITERAL_TUPLE, LENGTH_DELIMITED, encode_literal(element))
        return body
    array = np.ascontiguousarray(value)
    ptype = primitive_type_of(array.dtype)
    flat = array.reshape(-1)
    if ptype.wire == "bool" or ptype.wire == "varint":
        payload = b"".join(
            encode_varint(int(v)) for v in flat.astype(np.int64 if ptype.name[0] == "s" or ptype.wire == "bool" else np.uint64)
        )
    elif ptype.name in ("c64", "c128"):
        component = "<f4" if ptype.name == "c64" else "<f8"
        payload = np.stack([flat.real, flat.imag], axis=1).astype(component).tobytes()
    elif ptype.wire in ("fixed32", "fixed64"):
        payload = flat.astype("<f4" if ptype.wire == "fixed32" else "<f8").tobytes()
    else:
        payload = flat.view(f"<u{array.dtype.itemsize}").tobytes()
    return body + (_field(ptype.field, LENGTH_DELIMITED, payload) if payload else b"")


def describe(value: Any) -> str:
    """A short type description: ``f32[3,4]`` or ``(f32[3], s32[])``."""
    if isinstance(value, list):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    if value is None:
        return "token[]"
    ptype = primitive_type_of(value.dtype) if _has_ptype(value.dtype) else None
    name = ptype.name if ptype else str(value.dtype)
    return f"{name}[{','.join(map(str, value.shape))}]"


def _has_ptype(dtype: Any) -> bool:
    return any(p.numpy_name == np.dtype(dtype).name for p in PRIMITIVE_TYPES.values())


def flatten(value: Any) -> list:
    """The leaves of a (possibly nested) tuple literal, in order."""
    if isinstance(value, list):
        return [leaf for element in value for leaf in flatten(element)]
    return [value]


__all__ = [
    "PRIMITIVE_TYPES",
    "PrimitiveType",
    "Shape",
    "decode_literal",
    "decode_shape",
    "describe",
    "encode_literal",
    "encode_shape",
    "flatten",
    "numpy_dtype",
    "primitive_type",
    "primitive_type_of",
]


def hlo_snapshot_bytes(module_proto: bytes, arguments: list, result: Any = None) -> bytes:
    """An HloSnapshot{hlo=HloProto{hlo_module}, arguments, result} as XLA writes them (``result`` None: none)."""
    out = _field(1, 2, _field(1, 2, module_proto))
    for value in arguments:
        out += _field(2, 2, encode_literal(value))
    if result is not None:
        out += _field(3, 2, encode_literal(result))
    return out
