"""Seeded, deterministic fake arguments for a module's entry parameters.

The same shapes and seed always give the same bytes, on any machine, so two replays (or a
replay and a reference run) see identical inputs. Values are small, like XLA's own fake data
without ``--use_large_float_range``, so reductions do not overflow to inf:

- floating types (f16, bf16, f32, f64, every fp8/fp4): uniform in [-1, 1); f8e8m0fnu, which
  has no sign, uniform in [0.5, 2);
- complex: real and imaginary parts each uniform in [-1, 1);
- signed integers: uniform in [-8, 8) clipped to the type's range; unsigned in [0, 16) clipped;
  small so that values used as indices, shift amounts or loop bounds stay sane;
- pred: fair coin flips;
- tuples (nested too): a list of fake values, one per element; tokens: ``None`` (the engine passes
  the empty array PJRT takes for a token); zero-sized arrays: empty arrays; bounded-dynamic
  dimensions (``f32[<=8]``): filled to their bound, the size XLA gives such a parameter when no
  runtime size is known. Anything else (opaque, buffer) is refused by name.

Each parameter draws from its own stream (``seed`` and the parameter number), so adding a
parameter does not change the values of the others.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xlarun.errors import InputError
from xlarun.replay.literals import Shape, numpy_dtype, primitive_type


def fake_argument(shape: Shape, seed: int = 0, parameter_number: int = 0) -> Any:
    """A deterministic fake value for one parameter shape (a list for a tuple shape)."""
    rng = np.random.default_rng([seed, parameter_number])
    return _fake(shape, rng)


def fake_arguments(shapes: list[Shape], seed: int = 0) -> list:
    """Fake values for every entry parameter, in parameter order."""
    return [fake_argument(shape, seed, number) for number, shape in enumerate(shapes)]


def _fake(shape: Shape, rng: np.random.Generator) -> Any:
    if shape.is_tuple:
        return [_fake(sub, rng) for sub in shape.tuple_shapes]
    if shape.is_token:
        return None
    if not shape.is_array:
        raise InputError(
            f"cannot make fake data for a {shape.hlo_text()} parameter (element type {shape.element_type})",
            "replay it with a snapshot that holds its value",
        )
    ptype = primitive_type(shape.element_type)
    dtype = numpy_dtype(ptype)
    dims = shape.dimensions
    name = ptype.name
    if name == "pred":
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if name in ("c64", "c128"):
        real = rng.uniform(-1.0, 1.0, size=dims)
        imag = rng.uniform(-1.0, 1.0, size=dims)
        return (real + 1j * imag).astype(dtype)
    if name[0] in "su":
        low, high = (-8, 8) if name[0] == "s" else (0, 16)
        bits = ptype.bits
        type_low, type_high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if name[0] == "s" else (0, (1 << bits) - 1)
        values = np.clip(rng.integers(low, high, size=dims), type_low, type_high)
        if dtype.name != ptype.numpy_name:  # raw storage: no ml_dtypes for this type
            return (values & ((1 << bits) - 1)).astype(dtype)
        return values.astype(dtype)
    span = (0.5, 2.0) if name == "f8e8m0fnu" else (-1.0, 1.0)
    return rng.uniform(*span, size=dims).astype(np.float32).astype(dtype)
