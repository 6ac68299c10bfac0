"""In-process capture of the bundled example's train step against `xlarun capture configs/jax-cpu.yaml`.

    .venv/bin/python -m bench.inline_capture [--repeat 3]   (as a module: bench/bisect.py would shadow the stdlib)

Each side runs in fresh processes. In process: the model is set up first (as in a notebook), then
``xlarun.jax.capture(train_step, ...)`` is timed with the spec's dump options (text and proto, snapshots,
large constants). The CLI: the whole `xlarun capture` command (interpreter start-up, the script's own
jax import, compiling its 8 modules, archiving and indexing) by wall clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results_files import add_output_options, output_path, write_results

REPO = Path(__file__).resolve().parent.parent

IN_PROCESS = """
import json, sys, time
sys.path.insert(0, sys.argv[2])
import jax, jax_mlp
import xlarun, xlarun.jax
params = jax.jit(jax_mlp.init_params, static_argnums=1)(jax.random.PRNGKey(0), (64, 128, 128, 10))
x = jax.random.normal(jax.random.PRNGKey(1), (32, 64))
y = jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 10), 10)
store = xlarun.open_store(sys.argv[1])
t0 = time.perf_counter()
run = xlarun.jax.capture(jax_mlp.train_step, params, x, y, 0.1, snapshots=True, store=store)
took = time.perf_counter() - t0
t1 = time.perf_counter()
jax.jit(jax_mlp.train_step.__wrapped__).lower(params, x, y, 0.1).compile()  # the same compile without dumps, for scale
print(json.dumps({"capture_s": took, "plain_compile_s": time.perf_counter() - t1, "files": run.n_files, "modules": run.n_modules,
                  "instr_before": run.main.instr_before}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inline_capture", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    add_output_options(parser, "inline_capture")
    args = parser.parse_args()
    inline, cli = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [sys.executable, "-c", IN_PROCESS, f"{tmp}/store", str(REPO / "configs" / "examples")],
                capture_output=True,
                text=True,
                check=True,
            )
            inline.append(json.loads(done.stdout.strip().splitlines()[-1]))
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run(
                [
                    str(Path(sys.executable).parent / "xlarun"),
                    "capture",
                    str(REPO / "configs" / "jax-cpu.yaml"),
                    "-q",
                    "--store",
                    f"{tmp}/store",
                ],
                capture_output=True,
                check=True,
            )
            cli.append(time.perf_counter() - t0)
    med = statistics.median
    print(
        f"in-process capture of train_step: median {med(r['capture_s'] for r in inline):.2f} s "
        f"(min {min(r['capture_s'] for r in inline):.2f}; the same compile without dumps {med(r['plain_compile_s'] for r in inline):.2f} s; "
        f"{inline[0]['modules']} module, {inline[0]['files']} files, {inline[0]['instr_before']} instructions)"
    )
    print(f"xlarun capture configs/jax-cpu.yaml: median {med(cli):.2f} s (min {min(cli):.2f}; whole script, 8 modules)")
    results = {
        "repeats": args.repeat,
        "in_process_capture_s": {
            "median": round(med(r["capture_s"] for r in inline), 3),
            "min": round(min(r["capture_s"] for r in inline), 3),
        },
        "plain_compile_s": round(med(r["plain_compile_s"] for r in inline), 3),
        "module": {k: inline[0][k] for k in ("modules", "files", "instr_before")},
        "cli_capture_s": {"median": round(med(cli), 3), "min": round(min(cli), 3)},
    }
    print(f"written to {write_results(output_path(args, 'inline_capture'), results)}")


if __name__ == "__main__":
    main()
