"""One zoo program's real step, timed plain and under jax's profiler in one process (bench/profile.py ``--zoo``).

    python -m bench.profile_zoo_job PROGRAM.py STEP_NAME STEPS ROUNDS TRACE_DIR HOST_TRACER_LEVEL

Runs the program's ``main()`` with ``jax.jit`` wrapped so that the first call of the jitted function named
STEP_NAME keeps a copy of its arguments (a donating step deletes the originals); then calls that step again on
fresh copies, each call timed to its result (``block_until_ready``; the copy is made outside the timing), in rounds
of STEPS plain calls and STEPS calls under ``jax.profiler`` started as ``profile: true``'s bootstrap starts it (no
Python tracer; HOST_TRACER_LEVEL as given, 2 being jax's default). Prints one JSON line.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time


def main() -> int:
    program, step, steps, rounds, out, host_level = sys.argv[1:7]
    import jax

    real_jit = jax.jit
    kept: dict = {}

    def keep(leaf):
        return leaf.copy() if isinstance(leaf, jax.Array) else leaf

    class Kept:
        def __init__(self, jitted):
            self._jitted = jitted

        def __call__(self, *args, **kwargs):
            if "call" not in kept:
                kept["call"] = (self._jitted, jax.tree_util.tree_map(keep, (args, kwargs)))
            return self._jitted(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._jitted, name)

    def keeping_jit(fun=None, *args, **kwargs):
        if fun is None:  # jax.jit(**options) used as a decorator factory
            return lambda f: keeping_jit(f, *args, **kwargs)
        jitted = real_jit(fun, *args, **kwargs)
        return Kept(jitted) if getattr(fun, "__name__", "") == step else jitted

    jax.jit = keeping_jit
    spec = importlib.util.spec_from_file_location("zoo_program", program)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    jax.jit = real_jit
    if "call" not in kept:
        print(json.dumps({"error": f"no jax.jit of a function named {step} was called"}))
        return 0
    jitted, (args, kwargs) = kept["call"]
    cpu = {"plain": 0.0, "profiled": 0.0}

    def timed(n: int, side: str) -> list[float]:
        times = []
        c0 = time.process_time()
        for _ in range(n):
            fresh_args, fresh_kwargs = jax.tree_util.tree_map(keep, (args, kwargs))
            jax.block_until_ready((fresh_args, fresh_kwargs))
            t0 = time.perf_counter()
            jax.block_until_ready(jitted(*fresh_args, **fresh_kwargs))
            times.append(time.perf_counter() - t0)
        cpu[side] += time.process_time() - c0
        return times

    timed(2, "plain")  # warm: the step is compiled already, the copies' paths are not
    cpu["plain"] = 0.0
    plain: list[float] = []
    profiled: list[float] = []
    for r in range(int(rounds)):
        plain += timed(int(steps), "plain")
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        options.host_tracer_level = int(host_level)
        jax.profiler.start_trace(f"{out}/round-{r}", profiler_options=options)
        profiled += timed(int(steps), "profiled")
        jax.profiler.stop_trace()

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    print(
        json.dumps(
            {
                "plain_step_s": median(plain),
                "profiled_step_s": median(profiled),
                "plain_mean_s": sum(plain) / len(plain),
                "profiled_mean_s": sum(profiled) / len(profiled),
                "plain_cpu_s": cpu["plain"] / len(plain),
                "profiled_cpu_s": cpu["profiled"] / len(profiled),
                "devices": jax.device_count(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
