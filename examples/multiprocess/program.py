"""One data-parallel training step run as the processes of one job: `processes: 2` in the spec launches this
script twice on this machine, and xlarun tells each process its place (XLARUN_PROCESS_ID, XLARUN_NUM_PROCESSES,
XLARUN_COORDINATOR). The processes join through jax.distributed on loopback (CPU collectives: gloo) and each
feeds its own half of the batch; the gradient all-reduce runs across them.

`--desync-on K` makes process K compile another step (another learning rate: other HLO, the same collectives,
so the job still runs): a desync made on purpose, which `xlarun modules` reports. `--extra-jit-on K` makes process K
compile a logging step of its own first (as a process-0-only eval or logging step does): no desync, but every later
module of process K has another number. `--rows-on K=R` feeds process K R rows per device instead of 4 (an uneven last
batch): each process sees another global shape, so it compiles the step with other shapes (a shape desync; the
gradient all-reduce keeps its size, so the job still runs). `--stall-on K` makes process K stall before its first
step (as if stuck loading data): the others wait in the step's gradient all-reduce until the run's timeout (a hung
collective)."""

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--desync-on", type=int, default=-1, help="this process compiles another step (a desync)")
    parser.add_argument("--extra-jit-on", type=int, default=-1, help="this process compiles a logging step first")
    parser.add_argument("--rows-on", default="", help="K=R: process K feeds R rows per device (a shape desync)")
    parser.add_argument("--stall-on", type=int, default=-1, help="this process stalls before its first step (a hang)")
    args = parser.parse_args()
    process, count = int(os.environ["XLARUN_PROCESS_ID"]), int(os.environ["XLARUN_NUM_PROCESSES"])
    jax.distributed.initialize(coordinator_address=os.environ["XLARUN_COORDINATOR"], num_processes=count, process_id=process)

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    rows = int(args.rows_on.split("=")[1]) if args.rows_on and int(args.rows_on.split("=")[0]) == process else 4
    local_batch = np.random.default_rng(process).normal(size=(rows * jax.local_device_count(), 16)).astype(np.float32)
    if process == args.extra_jit_on:  # this process's own step, before any other: no collectives, local data only
        print(f"process {process} logs batch norm {float(jax.jit(jnp.linalg.norm)(local_batch)):.4f}", flush=True)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local_batch)
    w = jax.jit(lambda: jnp.ones((16, 4), jnp.float32), out_shardings=NamedSharding(mesh, P()))()
    learning_rate = 2e-3 if process == args.desync_on else 1e-3

    @jax.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - learning_rate * grad, loss

    if process == args.stall_on:
        time.sleep(600)
    for _ in range(2):
        w, loss = train_step(w, x)
    print(f"process {process} of {count}: {jax.device_count()} devices, loss {float(loss):.4f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
