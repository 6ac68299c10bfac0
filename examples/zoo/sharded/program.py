"""A step sharded over 8 host CPU devices (the spec sets --xla_force_host_platform_device_count=8):
NamedSharding on the batch, and shard_map with psum for the gradient all-reduce."""

from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def main():
    devices = jax.devices()
    assert len(devices) == 8, f"expected 8 host devices, got {len(devices)}"
    mesh = Mesh(devices, ("data",))
    w = jax.device_put(jax.random.normal(jax.random.key(0), (16, 4)), NamedSharding(mesh, P()))
    x = jax.device_put(jax.random.normal(jax.random.key(1), (32, 16)), NamedSharding(mesh, P("data")))

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))
    def grads(w, x):
        local = jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)
        return jax.lax.psum(local, "data"), jax.lax.psum(jnp.sum(x), "data")

    @jax.jit
    def sharded_step(w, x):
        g, total = grads(w, x)
        return w - 1e-3 * g, total

    for _ in range(2):
        w, total = sharded_step(w, x)
    print("total", float(total))


if __name__ == "__main__":
    main()
