"""Replay on the built-in PJRT engine vs ``jax.jit`` of the same function, measured in one run.

For each workload the same function is (1) compiled and run with ``jax.jit``, and (2) lowered to
HLO text, written as a dump file and replayed with ``xlarun.replay.replay_file`` (compile, then
``iterations`` timed executions), both on the CPU, same arguments. It also replays the module
XLA optimized (``compiled.as_text()``, what ``*_after_optimizations.txt`` holds) through the
rewrite route, whose wall time includes the compile probe in a child process.

Columns: compile seconds (jit: ``lowered.compile()``; replay: PJRT compile of the converted
module), median and min seconds per steady-state execution, and the replay's wall time.

    python bench/replay_vs_jit.py [--quick]

``run(quick)`` returns the numbers as a dict for the benchmark suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def _workloads(quick: bool):
    import jax
    import jax.numpy as jnp
    import numpy as np

    width, depth, batch = (128, 2, 32) if quick else (512, 4, 256)
    rng = np.random.default_rng(0)
    params = [rng.standard_normal((width, width), dtype=np.float32) / width**0.5 for _ in range(depth)]
    x = rng.standard_normal((batch, width), dtype=np.float32)
    y = rng.standard_normal((batch, width), dtype=np.float32)

    def mlp_train_step(params, x, y):
        def loss(params):
            h = x
            for w in params:
                h = jnp.tanh(h @ w)
            return jnp.mean((h - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return value, [w - 0.01 * g for w, g in zip(params, grads, strict=False)]

    def elementwise_chain(x, y):
        for _ in range(8):
            x = jnp.sin(x) * y + jnp.exp(-x * x)
        return x.sum(axis=0)

    return [("mlp_train_step", mlp_train_step, (params, x, y)), ("elementwise_chain", elementwise_chain, (x, y))]


def _time_jit(fn, args, iterations: int) -> dict:
    import jax

    jitted = jax.jit(fn)
    lowered = jitted.lower(*args)
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(*args))  # warm-up, as the replay's first iteration is
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return {"compile_s": compile_s, "median_s": statistics.median(times), "min_s": min(times)}, lowered, compiled


def _time_replay(path: Path, iterations: int) -> dict:
    from xlarun.replay import ReplayOptions, replay_file

    start = time.perf_counter()
    result = replay_file(path, ReplayOptions(iterations=iterations + 1, reference_platform=None))
    wall_s = time.perf_counter() - start
    steady = result.run_times_s[1:]  # the first execution warms up, as for jit
    return {
        "compile_s": result.compile_s,
        "median_s": statistics.median(steady),
        "min_s": min(steady),
        "wall_s": wall_s,
        "verdict": result.verdict,
        "route": result.route,
        "fell_back_to": result.fell_back_to,
    }


def run(quick: bool = False) -> dict:
    """Measure every workload; returns ``{workload: {"jit": {...}, "replay": {...}, "replay_optimized": {...}}}``."""
    iterations = 5 if quick else 30
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="xlarun-bench-") as tmp:
        for number, (name, fn, args) in enumerate(_workloads(quick)):
            jit, lowered, compiled = _time_jit(fn, args, iterations)
            before = Path(tmp) / f"module_{number:04d}.jit_{name}.before_optimizations.txt"
            before.write_text(lowered.as_text(dialect="hlo"))
            after = Path(tmp) / f"module_{number:04d}.jit_{name}.cpu_after_optimizations.txt"
            after.write_text(compiled.as_text())
            out[name] = {
                "jit": jit,
                "replay": _time_replay(before, iterations),
                "replay_optimized": _time_replay(after, iterations),
            }
    return out


def _table(results: dict) -> str:
    rows = [("workload", "how", "compile s", "median ms", "min ms", "wall s", "note")]
    for name, by_how in results.items():
        for how, m in by_how.items():
            note = m.get("route") or m.get("fell_back_to") or m.get("verdict", "")
            wall = f"{m['wall_s']:.2f}" if "wall_s" in m else ""
            rows.append(
                (name, how, f"{m['compile_s']:.3f}", f"{m['median_s'] * 1e3:.3f}", f"{m['min_s'] * 1e3:.3f}", wall, note or "")
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few iterations")
    args = parser.parse_args(argv)
    print(_table(run(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
