"""Shapes XLA's parser fills in where HLO text leaves them out (``outfeed``, ``send``, ``recv``...), and the
inference that gives them: an instruction's shape from its operands' and attributes.
"""

from __future__ import annotations

import re
from typing import Any

_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_INTS = re.compile(r"-?\d+")
_SAME_AS_FIRST_OPERAND = frozenset(
    """
abs acos acosh asin asinh atanh cbrt ceil cholesky copy cosine cosh count-leading-zeros erf exponential
exponential-minus-one floor log log-plus-one logistic negate not opt-barrier popcnt round-nearest-afz
round-nearest-even rsqrt sign sine sinh sqrt tan tanh add subtract multiply divide maximum minimum power remainder
and or xor atan2 shift-left shift-right-arithmetic shift-right-logical while add-dependency domain reverse
triangular-solve sort
""".split()
)
_COMPLEX_PART = {"c64": "f32", "c128": "f64"}


def infer_missing_shapes(computations: dict) -> None:
    """Give shapes to instructions written without one, as XLA infers them (the opcodes common in its tests;
    others keep ""), and to sends, receives and outfeeds the shape XLA gives them whatever the text says."""
    roots: dict[str, str] = {}
    for computation in computations.values():
        shapes: dict[str, str] = {}
        for instruction in computation.instructions:
            if instruction.opcode in _SHAPES_XLA_SETS:
                try:
                    instruction.shape = _SHAPES_XLA_SETS[instruction.opcode](
                        instruction, [shapes.get(o, "") for o in instruction.operands]
                    )
                except (ValueError, IndexError):
                    pass  # left as written
            elif not instruction.shape:
                try:
                    instruction.shape = _inferred(instruction, [shapes.get(o, "") for o in instruction.operands], roots)
                except (ValueError, IndexError, KeyError):
                    instruction.shape = ""  # not inferable from what the text holds: left unknown
            shapes[instruction.name] = instruction.shape
        if computation.instructions:
            root = next((i for i in reversed(computation.instructions) if i.is_root), computation.instructions[-1])
            roots[computation.name] = root.shape


# XLA builds these from their operands, whatever shape the text gives (hlo_parser.cc, CreateRecv etc.)
_SHAPES_XLA_SETS = {
    "outfeed": lambda instruction, operands: "token[]",
    "send-done": lambda instruction, operands: "token[]",
    "send": lambda instruction, operands: f"({operands[0] or _no_shape()}, u32[], token[])",
    "recv": lambda instruction, operands: f"({_tuple_elements(instruction.shape)[0]}, u32[], token[])",
    "recv-done": lambda instruction, operands: f"({_tuple_elements(operands[0])[0]}, token[])",
}


def _no_shape() -> str:
    raise ValueError("an operand without a known shape")


def _dimensions(shape: str) -> tuple[str, list[int]]:
    m = _ARRAY.match(shape)
    if m is None:
        raise ValueError(shape)
    return m.group(1), [int(d) for d in _INTS.findall(m.group(2))]


def _array(element_type: str, dims: list[int]) -> str:
    return f"{element_type}[{','.join(str(d) for d in dims)}]"


def _ints(attributes: dict[str, str], key: str) -> list[int]:
    return [int(v) for v in _INTS.findall(attributes.get(key, ""))]


def _tuple_elements(shape: str) -> list[str]:
    from xlarun.hlo.lex import split_top_level

    if not shape.startswith("("):
        raise ValueError(shape)
    return [p.strip() for p in split_top_level(shape[1:-1]) if p.strip()]


def _inferred(instruction: Any, operands: list[str], roots: dict[str, str]) -> str:
    opcode, attributes = instruction.opcode, instruction.attributes
    callee = instruction.called_computations
    if opcode in _SAME_AS_FIRST_OPERAND:
        return operands[0]
    if opcode in ("select", "clamp"):
        return operands[1]
    if opcode in ("compare", "is-finite"):
        return _array("pred", _dimensions(operands[0])[1])
    if opcode in ("real", "imag"):
        element_type, dims = _dimensions(operands[0])
        return _array(_COMPLEX_PART.get(element_type, element_type), dims)
    if opcode == "complex":
        element_type, dims = _dimensions(operands[0])
        return _array("c128" if element_type == "f64" else "c64", dims)
    if opcode == "tuple":
        return f"({', '.join(operands)})"
    if opcode == "get-tuple-element":
        return _tuple_elements(operands[0])[int(attributes["index"])]
    if opcode in ("call", "conditional") and callee:
        return roots[callee[0]]
    if opcode == "after-all":
        return "token[]"
    if opcode in ("partition-id", "replica-id"):
        return "u32[]"
    if opcode == "transpose":
        element_type, dims = _dimensions(operands[0])
        return _array(element_type, [dims[d] for d in _ints(attributes, "dimensions")])
    if opcode == "concatenate":
        element_type, dims = _dimensions(operands[0])
        axis = _ints(attributes, "dimensions")[0]
        dims[axis] = sum(_dimensions(o)[1][axis] for o in operands)
        return _array(element_type, dims)
    if opcode == "pad":
        element_type, dims = _dimensions(operands[0])
        edges = [[int(v) for v in part.split("_")] for part in attributes["padding"].split("x")] if dims else []
        return _array(
            element_type,
            [d + e[0] + e[1] + (e[2] if len(e) > 2 else 0) * max(d - 1, 0) for d, e in zip(dims, edges, strict=False)],
        )
    if opcode == "dot":
        return _dot_shape(operands, attributes)
    if opcode == "reduce":
        half = len(operands) // 2
        reduced = set(_ints(attributes, "dimensions"))
        kept = [d for n, d in enumerate(_dimensions(operands[0])[1]) if n not in reduced]
        results = [_array(_dimensions(init)[0], kept) for init in operands[half:]]
        return results[0] if len(results) == 1 else f"({', '.join(results)})"
    if opcode == "reduce-window":
        return _reduce_window_shape(operands, attributes)
    raise ValueError(opcode)


def _dot_shape(operands: list[str], attributes: dict[str, str]) -> str:
    element_type, lhs = _dimensions(operands[0])
    rhs = _dimensions(operands[1])[1]
    lhs_batch, rhs_batch = _ints(attributes, "lhs_batch_dims"), _ints(attributes, "rhs_batch_dims")
    lhs_skip = set(lhs_batch) | set(_ints(attributes, "lhs_contracting_dims"))
    rhs_skip = set(rhs_batch) | set(_ints(attributes, "rhs_contracting_dims"))
    dims = [lhs[d] for d in lhs_batch] + [d for n, d in enumerate(lhs) if n not in lhs_skip]
    return _array(element_type, dims + [d for n, d in enumerate(rhs) if n not in rhs_skip])


_WINDOW_FIELD = re.compile(r"(\w+)=([\dx_\-]+)")


def _reduce_window_shape(operands: list[str], attributes: dict[str, str]) -> str:
    half = len(operands) // 2
    dims = _dimensions(operands[0])[1]
    window = dict(_WINDOW_FIELD.findall(attributes.get("window", "")))

    def per_dim(key: str, default: int) -> list[int]:
        return [int(v) for v in window[key].split("x")] if key in window else [default] * len(dims)

    size, stride = per_dim("size", 1), per_dim("stride", 1)
    dilation, base = per_dim("rhs_dilate", 1), per_dim("lhs_dilate", 1)
    pads = [[int(v) for v in p.split("_")] for p in window["pad"].split("x")] if "pad" in window else [[0, 0]] * len(dims)
    out = []
    for n, d in enumerate(dims):
        padded = (d - 1) * base[n] + 1 + pads[n][0] + pads[n][1] if d else 0
        span = (size[n] - 1) * dilation[n] + 1
        out.append(0 if padded < span else (padded - span) // stride[n] + 1)
    results = [_array(_dimensions(init)[0], out) for init in operands[half:]]
    return results[0] if len(results) == 1 else f"({', '.join(results)})"
