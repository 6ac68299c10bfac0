"""A step with lax.scan over layers, jax.checkpoint (remat) on each layer, and a custom_vjp activation."""

import jax
import jax.numpy as jnp


@jax.custom_vjp
def clipped_relu(x):
    return jnp.clip(x, 0.0, 6.0)


def _fwd(x):
    return clipped_relu(x), x


def _bwd(x, g):
    return (g * ((x > 0) & (x < 6)),)


clipped_relu.defvjp(_fwd, _bwd)


@jax.checkpoint
def layer(h, w):
    return clipped_relu(h @ w)


def loss(ws, x):
    h, _ = jax.lax.scan(lambda h, w: (layer(h, w), None), x, ws)
    return jnp.mean(h**2)


@jax.jit
def scan_step(ws, x):
    value, grads = jax.value_and_grad(loss)(ws, x)
    return ws - 0.01 * grads, value


def main():
    ws = jax.random.normal(jax.random.key(0), (4, 16, 16)) * 0.3
    x = jax.random.normal(jax.random.key(1), (8, 16))
    for _ in range(2):
        ws, value = scan_step(ws, x)
    print("loss", float(value))


if __name__ == "__main__":
    main()
