"""A step whose result on 8 host CPU devices differs from its result on one (the spec sets
--xla_force_host_platform_device_count=8): the batch's sum of large terms that cancel. On one device XLA adds the
rows in one order; sharded over the batch, each device adds its 128 rows and an all-reduce adds the 8 partial sums.
Float32 addition is not associative, so the two differ by far more than the sum's own size. Seeded: the same numbers
on every run."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def batch(rows=1024, features=16):
    """Rows whose values reach 1e6 and cancel in pairs (x and -x, shuffled), plus noise of size 1."""
    rng = np.random.default_rng(0)
    half = rng.normal(size=(rows // 2, features)) * 1e6
    big = np.concatenate([half, -half])[rng.permutation(rows)]
    return (big + rng.normal(size=(rows, features))).astype(np.float32)


@jax.jit
def drift_step(x, w):
    return jnp.sum(x @ w)


def main():
    devices = jax.devices()
    assert len(devices) == 8, f"expected 8 host devices, got {len(devices)}"
    x = batch()
    w = np.linspace(-1.0, 1.0, x.shape[1], dtype=np.float32)
    mesh = Mesh(devices, ("data",))
    one = float(drift_step(jax.device_put(x, devices[0]), jax.device_put(w, devices[0])))
    eight = float(drift_step(jax.device_put(x, NamedSharding(mesh, P("data"))), jax.device_put(w, NamedSharding(mesh, P()))))
    exact = float((x.astype(np.float64) @ w).sum())
    print(f"1 device {one}  8 devices {eight}  difference {abs(one - eight)}  float64 {exact:.4f}")


if __name__ == "__main__":
    main()
