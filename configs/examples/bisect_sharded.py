"""A sum whose order matters, sharded over 4 host devices: the SPMD partitioner is the pass that moves it.

``sum(v * 0.5 + c)`` with ``c`` holding 3e7 and -3e7 on different devices and ones between them. On one device
the sum runs in one order; partitioned over 4 devices (``v`` is sharded on its only axis), each device sums its
quarter first (f32 keeps 3e7 + 1 as 3e7) and an all-reduce adds the partial sums: another answer, which is what
partitioning a reduction does to floats. Prints ``result <value>`` for ``xlarun bisect SPEC --check``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

C = np.tile(np.array([3e7, 1.0, 1.0, 1.0, -3e7, 1.0, 1.0, 1.0], np.float32), 2)


@jax.jit
def split_sum(v):
    return jnp.sum(v * 0.5 + C)


def main():
    mesh = Mesh(jax.devices()[:4], ("data",))
    v = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (16,)), NamedSharding(mesh, P("data")))
    print(f"result {float(split_sum(v)):.6f}")


if __name__ == "__main__":
    main()
