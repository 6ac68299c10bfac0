"""Replay of a step partitioned over 4 host devices against the replay of the same step on one device.

    .venv/bin/python -m bench.replay_partitioned [--repeat 3] [--iterations 20] [--record]

One program, captured once (text and proto dumps, 4 host devices): an MLP-like step (tanh of a matmul, its
gradient-like update and a loss) jitted twice, once on arrays sharded over a 2 x 2 mesh with NamedSharding, once on
plain arrays on one device. Each optimized module is replayed with `xlarun.replay.replay_file` (the built-in engine in
its child process, as `xlarun replay` runs it): the partitioned one on its 4 devices, checked against its
before_optimizations module on one device and across the devices' copies; the other on one device. Reported: the
wall time of the whole replay (child start, compile, runs, comparisons), the compile, and the median execution.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results_files import add_output_options, output_path, write_results

PROGRAM = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def step(w, x):
    h = jnp.tanh(x @ w)
    return w - 0.01 * (x.T @ h), jnp.mean(h * h)

grid = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("batch", "model"))
w = jnp.ones((512, 512), jnp.float32) / 512
x = jnp.ones((1024, 512), jnp.float32) / 512
sharded_step = jax.jit(step)
print(sharded_step(jax.device_put(w, NamedSharding(grid, P(None, "model"))), jax.device_put(x, NamedSharding(grid, P("batch", None))))[1])
one_device_step = jax.jit(step)
print(one_device_step(jax.device_put(w, jax.devices()[0]), jax.device_put(x, jax.devices()[0]))[1])
"""


def capture(folder: Path) -> Path:
    (folder / "program.py").write_text(PROGRAM)
    flags = "--xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_force_host_platform_device_count=4"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={folder / 'dump'} {flags}", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "program.py"], cwd=folder, env=env, check=True, capture_output=True)
    return folder / "dump"


def optimized_files(dump: Path) -> tuple[Path, Path]:
    """(the 4-device module, the one-device module): two compiles of jit_step, told apart by their config."""
    files = sorted(dump.glob("*.jit_step.cpu_after_optimizations.hlo.pb"))
    partitioned = [f for f in files if "num_partitions=4" in f.with_suffix("").with_suffix(".txt").read_text()[:2000]]
    single = [f for f in files if f not in partitioned]
    assert len(partitioned) == 1 and len(single) == 1, [f.name for f in files]
    return partitioned[0], single[0]


def replay_once(path: Path, iterations: int) -> dict:
    from xlarun.replay import ReplayOptions, replay_file

    started = time.perf_counter()
    result = replay_file(path, ReplayOptions(iterations=iterations))
    wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "compile_s": result.compile_s,
        "median_run_s": result.median_s,
        "verdict": result.verdict,
        "devices": result.devices,
        "compared_with": result.compared_with,
    }


def summarize(runs: list[dict]) -> dict:
    med = statistics.median
    return {
        "devices": runs[0]["devices"],
        "verdict": runs[0]["verdict"],
        "compared_with": runs[0]["compared_with"],
        "wall_s": {"median": round(med(r["wall_s"] for r in runs), 3), "min": round(min(r["wall_s"] for r in runs), 3)},
        "compile_s": round(med(r["compile_s"] for r in runs), 3),
        "median_run_ms": round(med(r["median_run_s"] for r in runs) * 1e3, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_partitioned", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    add_output_options(parser, "replay_partitioned")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xlarun-bench-") as tmp:
        partitioned, single = optimized_files(capture(Path(tmp)))
        sides: dict[str, list[dict]] = {"partitioned": [], "one_device": []}
        for _ in range(args.repeat):  # alternating, so that load on a shared machine hits both sides alike
            sides["partitioned"].append(replay_once(partitioned, args.iterations))
            sides["one_device"].append(replay_once(single, args.iterations))
    results = {"repeats": args.repeat, "iterations": args.iterations, **{k: summarize(v) for k, v in sides.items()}}
    for name in sides:
        s = results[name]
        print(
            f"{name}: {s['devices']} device(s), {s['verdict']}; whole replay median {s['wall_s']['median']} s "
            f"(min {s['wall_s']['min']}), compile {s['compile_s']} s, run median {s['median_run_ms']} ms"
        )
    print(f"written to {write_results(output_path(args, 'replay_partitioned'), results)}")


if __name__ == "__main__":
    main()
