"""One data-parallel training step run as the processes of one job: `processes: 2` in the spec launches this
script twice on this machine, and xlarun tells each process its place (XLARUN_PROCESS_ID, XLARUN_NUM_PROCESSES,
XLARUN_COORDINATOR). The processes join through jax.distributed on loopback (CPU collectives: gloo) and each
feeds its own half of the batch; the gradient all-reduce runs across them.

`--desync-on K` makes process K compile another step (another learning rate: other HLO, the same collectives,
so the job still runs): a desync made on purpose, which `xlarun modules` reports."""

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--desync-on", type=int, default=-1, help="this process compiles another step (a desync)")
    args = parser.parse_args()
    process, count = int(os.environ["XLARUN_PROCESS_ID"]), int(os.environ["XLARUN_NUM_PROCESSES"])
    jax.distributed.initialize(coordinator_address=os.environ["XLARUN_COORDINATOR"], num_processes=count, process_id=process)

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    local_batch = np.random.default_rng(process).normal(size=(4 * jax.local_device_count(), 16)).astype(np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local_batch)
    w = jax.jit(lambda: jnp.ones((16, 4), jnp.float32), out_shardings=NamedSharding(mesh, P()))()
    learning_rate = 2e-3 if process == args.desync_on else 1e-3

    @jax.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w) ** 2))(w)
        return w - learning_rate * grad, loss

    for _ in range(2):
        w, loss = train_step(w, x)
    print(f"process {process} of {count}: {jax.device_count()} devices, loss {float(loss):.4f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
