"""A sharded sum whose 4-device result differs from the 1-device one only on the job's real data.

The data mix +-3e7 with ones: f32 keeps 3e7 + 1 as 3e7, so where the big values cancel decides how many ones
survive. Split over 4 devices (the SPMD partitioner's per-device partial sums, then an all-reduce) the ones are
lost in other places than in one device's sum. Seeded fake data (normal values) has no such cancellation: a
bisection on it finds nothing. ``xlarun.record_arguments`` records the real arguments (XLA writes no snapshot
for a partitioned module), so replay and bisect run on them.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import xlarun

mesh = Mesh(jax.devices()[:4], ("data",))
block = np.array([3e7, 1.0, 1.0, 1.0, -3e7, 1.0, 1.0, 1.0], np.float32)
data = np.tile(block, 512)  # 4096 values


@jax.jit
def total(v):
    return jnp.sum(v * 0.5)


one_device = float(total(jnp.asarray(data)))  # compiled for one device: another module
sharded = jax.device_put(jnp.asarray(data), NamedSharding(mesh, P("data")))
four_devices = float(xlarun.record_arguments(total, sharded))
print(f"1 device {one_device:g}, 4 devices {four_devices:g}, difference {abs(one_device - four_devices):g}")
