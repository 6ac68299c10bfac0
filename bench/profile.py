"""What ``profile: true`` costs: the profiler's overhead on the job's steps, and the time to index a trace.

    .venv/bin/python -m bench.profile [--rounds 5] [--steps 100] [--record]

Overhead: the bundled example's train step (configs/examples/jax_mlp.py) timed step by step by the job itself
(after one warm-up step that compiles), in rounds of plain steps and steps under ``jax.profiler`` with the options
the bootstrap of ``profile: true`` uses (:mod:`xlarun.capture.profile_job`: no Python tracer), in one process so
that only the profiler differs; the CPU time the process spends per step (every thread, the profiler's included)
is reported beside the wall times, as it moves less with what else the machine runs. Two sizes: the example's own (hidden 128, batch 32: a step of a fraction of a
millisecond, the worst case, since the profiler's cost is per op) and a larger one (hidden 1024, batch 256).
Indexing: a trace of those rounds, read (:func:`xlarun.hlo.xspace.read_op_events`) and written into an index's
tables, per 1,000 op events.

``--zoo`` (the JAX programs of examples/zoo, or those named) times each program's real step the same way
(bench/profile_zoo_job.py: the step called again on copies of its first call's arguments), and says how many op
events a step makes, so the overhead per op event follows.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.results_files import add_output_options, output_path, write_results
from xlarun.hlo.xspace import read_op_events
from xlarun.store.profile_index import ensure_profile_tables, write_op_times

REPO = Path(__file__).resolve().parent.parent

#: The job: the example's train step, each step timed to its result (block_until_ready), the first (compile) left
#: out; rounds of STEPS plain steps then STEPS steps under the profiler (started as the bootstrap starts it: the
#: same options), so that the machine's drift hits both alike (on 2 shared CPUs a plain step's time moves by 50%).
STEPS_JOB = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jax, jax_mlp
steps, hidden, batch, rounds, out = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
params = jax.jit(jax_mlp.init_params, static_argnums=1)(jax.random.PRNGKey(0), (64, hidden, hidden, 10))
x = jax.random.normal(jax.random.PRNGKey(1), (batch, 64))
y = jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(2), (batch,), 0, 10), 10)
params, loss = jax_mlp.train_step(params, x, y, 0.1)
jax.block_until_ready(loss)
cpu = {"plain": 0.0, "profiled": 0.0}
def timed(n, side):
    global params
    times = []
    c0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        params, loss = jax_mlp.train_step(params, x, y, 0.1)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t0)
    cpu[side] += time.process_time() - c0
    return times
plain, profiled, start_stop = [], [], []
for r in range(rounds):
    plain += timed(steps, "plain")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    t0 = time.perf_counter()
    jax.profiler.start_trace(f"{out}/round-{r}", profiler_options=options)
    profiled += timed(steps, "profiled")
    t1 = time.perf_counter()
    jax.profiler.stop_trace()
    start_stop.append(time.perf_counter() - t1)
med = lambda v: sorted(v)[len(v) // 2]
print(json.dumps({"plain_step_s": med(plain), "profiled_step_s": med(profiled), "plain_mean_s": sum(plain) / len(plain),
                  "profiled_mean_s": sum(profiled) / len(profiled), "stop_trace_s": med(start_stop),
                  "plain_cpu_s": cpu["plain"] / len(plain), "profiled_cpu_s": cpu["profiled"] / len(profiled)}))
"""

#: The zoo's JAX programs and their step (as scripts/zoo.py names them).
ZOO_STEPS = {
    "flax_nnx": "train_step",
    "equinox": "equinox_step",
    "keras_jax": "train_step",
    "scan_remat": "scan_step",
    "bf16": "bf16_step",
    "sharded": "sharded_step",
}

SIZES = {"example (hidden 128, batch 32)": (128, 32), "larger (hidden 1024, batch 256)": (1024, 256)}


def _job(folder: Path, steps: int, hidden: int, batch: int, rounds: int) -> dict:
    script = folder / "steps_job.py"
    script.write_text(STEPS_JOB)
    argv = [sys.executable, str(script), str(REPO / "configs" / "examples"), str(steps), str(hidden), str(batch), str(rounds)]
    done = subprocess.run([*argv, str(folder / "traces")], capture_output=True, text=True, check=True, cwd=folder)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _index_time(trace: Path, repeat: int = 3) -> dict:
    data = trace.read_bytes()
    best_read, best_write, events = float("inf"), float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        read = read_op_events(data)
        t1 = time.perf_counter()
        conn = sqlite3.connect(":memory:")
        ensure_profile_tables(conn)
        with conn:
            write_op_times(conn, "run", [(event, 12) for event in read])
        best_read, best_write, events = min(best_read, t1 - t0), min(best_write, time.perf_counter() - t1), len(read)
    per_k = 1000 / events if events else 0.0
    return {
        "events": events,
        "trace_bytes": len(data),
        "read_ms_per_1000": round(best_read * 1000 * per_k, 2),
        "write_ms_per_1000": round(best_write * 1000 * per_k, 2),
        "total_ms_per_1000": round((best_read + best_write) * 1000 * per_k, 2),
    }


def _zoo_job(name: str, folder: Path, steps: int, rounds: int, host_level: int) -> dict:
    program = REPO / "examples" / "zoo" / name / "program.py"
    spec = yaml.safe_load((program.parent / "spec.yaml").read_text())
    env = dict(os.environ, XLA_FLAGS=" ".join(spec.get("dump", {}).get("extra_xla_flags", [])), KERAS_BACKEND="jax")
    argv = [sys.executable, "-m", "bench.profile_zoo_job", str(program), ZOO_STEPS[name], str(steps), str(rounds)]
    done = subprocess.run([*argv, str(folder), str(host_level)], capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    module = f"jit_{ZOO_STEPS[name]}"
    events = sum(
        sum(1 for event in read_op_events(trace.read_bytes()) if event.module == module) for trace in folder.rglob("*.xplane.pb")
    )
    found["op_events_per_step"] = events / (steps * rounds)
    return found


def measure_zoo(names: list[str], steps: int, rounds: int, host_level: int) -> dict:
    """Each zoo program's step: median plain and profiled, the overhead, and what it comes to per op event."""
    results = {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            found = _zoo_job(name, Path(tmp), steps, rounds, host_level)
        if "error" in found:
            results[name] = found
            print(f"{name}: {found['error']}")
            continue
        added = found["profiled_step_s"] - found["plain_step_s"]
        per_event = found["op_events_per_step"]
        results[name] = {
            "step": ZOO_STEPS[name],
            "devices": found["devices"],
            "step_s": {"plain": round(found["plain_step_s"], 6), "profiled": round(found["profiled_step_s"], 6)},
            "step_overhead_pct": round(100 * added / found["plain_step_s"], 1),
            "mean_step_overhead_pct": round(100 * (found["profiled_mean_s"] / found["plain_mean_s"] - 1), 1),
            "cpu_overhead_pct": round(100 * (found["profiled_cpu_s"] / found["plain_cpu_s"] - 1), 1),
            "op_events_per_step": round(per_event, 1),
            "added_us_per_op_event": round(1e6 * added / per_event, 2) if per_event else None,
        }
        r = results[name]
        print(
            f"{name} ({ZOO_STEPS[name]}, {found['devices']} device(s)): median step {1e3 * found['plain_step_s']:.3f} ms plain, "
            f"{1e3 * found['profiled_step_s']:.3f} ms profiled ({r['step_overhead_pct']:+.1f}%; means "
            f"{r['mean_step_overhead_pct']:+.1f}%; CPU {r['cpu_overhead_pct']:+.1f}%), {per_event:.0f} op events a step"
        )
    return results


def format_markdown(results: dict) -> str:
    """The recorded figures as the benchmarks page shows them: one row per step timed."""
    lines = [
        "| step | devices | op events a step | median step, plain | profiled | overhead (median) | (means) | (CPU time) | added per op event |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results.get("sizes", {}).items():
        lines.append(
            f"| bundled example, {label} | 1 | - | {1e3 * r['step_s']['plain']:.3f} ms | {1e3 * r['step_s']['profiled']:.3f} ms "
            f"| {r['step_overhead_pct']:+.1f}% | {r['mean_step_overhead_pct']:+.1f}% | {r['cpu_overhead_pct']:+.1f}% | - |"
        )
    for name, r in results.get("zoo", {}).items():
        if "error" in r:
            lines.append(f"| zoo {name} | - | - | {r['error']} | | | | | |")
            continue
        per_event = f"{r['added_us_per_op_event']:.2f} us" if r.get("added_us_per_op_event") is not None else "-"
        lines.append(
            f"| zoo {name} ({r['step']}) | {r['devices']} | {r['op_events_per_step']:g} | {1e3 * r['step_s']['plain']:.3f} ms "
            f"| {1e3 * r['step_s']['profiled']:.3f} ms | {r['step_overhead_pct']:+.1f}% | {r['mean_step_overhead_pct']:+.1f}% "
            f"| {r['cpu_overhead_pct']:+.1f}% | {per_event} |"
        )
    index = [(label, r["index"]) for label, r in results.get("sizes", {}).items()]
    lines.append("")
    lines.append(
        "Indexing a trace: "
        + "; ".join(
            f"{i['events']} op events ({i['trace_bytes'] / 1e6:.1f} MB, {label}) in {i['total_ms_per_1000']:.1f} ms per 1,000 "
            f"(read {i['read_ms_per_1000']:.1f}, write {i['write_ms_per_1000']:.1f})"
            for label, i in index
        )
        + ". Target for the overhead: <= 10% of the step's wall time."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="steps per round and side")
    parser.add_argument(
        "--zoo", nargs="?", const=",".join(ZOO_STEPS), default=None, help="also the zoo's steps (all, or NAME,NAME)"
    )
    parser.add_argument("--zoo-only", action="store_true", help="only the zoo's steps")
    parser.add_argument("--host-tracer-level", type=int, default=2, help="jax's host tracer level for the zoo's steps")
    add_output_options(parser, "profile")
    args = parser.parse_args()
    results: dict = {"rounds": args.rounds, "steps_per_round": args.steps, "sizes": {}}
    if args.zoo or args.zoo_only:
        names = (args.zoo or ",".join(ZOO_STEPS)).split(",")
        results["zoo"] = measure_zoo(names, args.steps, args.rounds, args.host_tracer_level)
        results["zoo_host_tracer_level"] = args.host_tracer_level
    for label, (hidden, batch) in ({} if args.zoo_only else SIZES).items():
        with tempfile.TemporaryDirectory() as tmp:
            found = _job(Path(tmp), args.steps, hidden, batch, args.rounds)
            trace = max(Path(tmp, "traces").rglob("*.xplane.pb"), key=lambda p: p.stat().st_size)
            index = _index_time(trace)
        overhead = (found["profiled_step_s"] - found["plain_step_s"]) / found["plain_step_s"]
        mean_overhead = (found["profiled_mean_s"] - found["plain_mean_s"]) / found["plain_mean_s"]
        cpu_overhead = (found["profiled_cpu_s"] - found["plain_cpu_s"]) / found["plain_cpu_s"]
        results["sizes"][label] = {
            "step_s": {"plain": round(found["plain_step_s"], 6), "profiled": round(found["profiled_step_s"], 6)},
            "step_overhead_pct": round(100 * overhead, 1),
            "mean_step_overhead_pct": round(100 * mean_overhead, 1),
            "cpu_per_step_s": {"plain": round(found["plain_cpu_s"], 6), "profiled": round(found["profiled_cpu_s"], 6)},
            "cpu_overhead_pct": round(100 * cpu_overhead, 1),
            "stop_trace_s": round(found["stop_trace_s"], 3),
            "index": index,
        }
        print(
            f"{label}: median step {1000 * found['plain_step_s']:.3f} ms plain, {1000 * found['profiled_step_s']:.3f} ms "
            f"profiled ({100 * overhead:+.1f}%; means {100 * mean_overhead:+.1f}%; CPU time per step "
            f"{100 * cpu_overhead:+.1f}%; target <= 10%); writing the trace at "
            f"stop {found['stop_trace_s']:.2f} s; indexing {index['events']} op events: {index['total_ms_per_1000']:.1f} ms "
            f"per 1,000 (read {index['read_ms_per_1000']:.1f}, write {index['write_ms_per_1000']:.1f})"
        )
    print(f"written to {write_results(output_path(args, 'profile'), results)}")


if __name__ == "__main__":
    main()
