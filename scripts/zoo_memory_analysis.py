"""jax's own ``Compiled.memory_analysis()`` of a zoo program's step, for scripts/zoo.py to hold xlarun's peak against.

    .venv/bin/python scripts/zoo_memory_analysis.py PROGRAM.py STEP_NAME

Runs the program's ``main()`` with ``jax.jit`` wrapped so that the jitted function named STEP_NAME (jax.jit,
eqx.filter_jit and Keras's train step all go through ``jax.jit``) has its arguments' shapes, dtypes and shardings
recorded at each call, before any donation deletes them; then lowers, for the last call, and compiles it again on those and prints
one JSON line: ``{"arguments": ..., "outputs": ..., "temporaries": ..., "aliased": ...}`` in bytes, or ``{"error": ...}``.
"""

from __future__ import annotations

import importlib.util
import json
import sys


def main() -> int:
    program, step = sys.argv[1], sys.argv[2]
    import jax

    real_jit = jax.jit
    seen: dict = {}

    def shape_of(leaf):
        if isinstance(leaf, jax.Array):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
        return leaf

    class Recorded:
        def __init__(self, jitted):
            self._jitted = jitted

        def __call__(self, *args, **kwargs):
            seen["call"] = (self._jitted, jax.tree_util.tree_map(shape_of, (args, kwargs)))  # the last call's
            return self._jitted(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._jitted, name)

    def recording_jit(fun=None, *args, **kwargs):
        if fun is None:  # jax.jit(**options) used as a decorator factory
            return lambda f: recording_jit(f, *args, **kwargs)
        jitted = real_jit(fun, *args, **kwargs)
        return Recorded(jitted) if getattr(fun, "__name__", "") == step else jitted

    jax.jit = recording_jit
    spec = importlib.util.spec_from_file_location("zoo_program", program)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    if "call" not in seen:
        print(json.dumps({"error": f"no jax.jit of a function named {step} was called"}))
        return 0
    jitted, (args, kwargs) = seen["call"]
    stats = jitted.lower(*args, **kwargs).compile().memory_analysis()
    print(
        json.dumps(
            {
                "arguments": stats.argument_size_in_bytes,
                "outputs": stats.output_size_in_bytes,
                "temporaries": stats.temp_size_in_bytes,
                "aliased": stats.alias_size_in_bytes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
