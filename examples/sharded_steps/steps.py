from functools import partial
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices()[:4], ("data",))
grid = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("batch", "model"))
w = jax.device_put(jnp.arange(64.0).reshape(8, 8) / 64, NamedSharding(grid, P(None, "model")))
x = jax.device_put(jnp.arange(128.0).reshape(16, 8) / 128, NamedSharding(grid, P("batch", None)))
v = jax.device_put(jnp.ones(16), NamedSharding(mesh, P("data")))
# a sum whose order matters: 3e7 and -3e7 on different devices, ones between them (f32 keeps 3e7 + 1 as 3e7)
c = np.tile(np.array([3e7, 1.0, 1.0, 1.0, -3e7, 1.0, 1.0, 1.0], np.float32), 2)

@jax.jit
def named_step(w, x):
    h = jnp.tanh(x @ w)
    return w - 0.1 * (x.T @ h), jnp.sum(h * h)

@partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))
def grads(w, x):
    local = jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)
    return jax.lax.psum(local, "data"), jax.lax.psum(jnp.sum(x), "data")

@jax.jit
def psum_step(w, x):
    g, total = grads(w, x)
    return w - 1e-3 * g, total

@jax.jit
def split_sum(v):
    return jnp.sum(v * 0.5 + c)

r = jax.device_put(jnp.linspace(-2.0, 2.0, 4096), NamedSharding(mesh, P("data")))

@jax.jit
def sharded_residual(r):  # not zero in floats until algsimp folds (r / 3) * 3 (after the partitioner)
    return ((r / 3.0) * 3.0 - r) * 1e6

print(named_step(w, x)[1], psum_step(w, x)[1], split_sum(v), sharded_residual(r).sum())
