"""One jitted step compiled four ways: as first called, with a longer batch, donating its weights, and with its
batch sharded over 4 devices (`xlarun modules` tells each later compile from the first)."""

import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def step(w, x):
    return w - 0.1 * jnp.tanh(x @ w).mean(0), jnp.sum(x)

mesh = Mesh(jax.devices(), ("data",))
w, x = jnp.ones((8, 8)), jnp.ones((16, 8))
plain = jax.jit(step)
plain(w, x)
plain(w, jnp.ones((32, 8)))
jax.jit(step, donate_argnums=0)(jnp.ones((8, 8)), x)
plain(w, jax.device_put(x, NamedSharding(mesh, P("data"))))
