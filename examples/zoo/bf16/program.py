"""bf16 mixed precision: float32 master weights, bf16 compute, float32 loss and update."""

import jax
import jax.numpy as jnp


def loss(w, x, y):
    pred = (x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)).astype(jnp.float32)
    return jnp.mean((pred - y) ** 2)


@jax.jit
def bf16_step(w, x, y):
    value, grad = jax.value_and_grad(loss)(w, x, y)
    return w - 0.05 * grad, value


def main():
    w = jax.random.normal(jax.random.key(0), (16, 4))
    x = jax.random.normal(jax.random.key(1), (8, 16))
    y = jax.random.normal(jax.random.key(2), (8, 4))
    for _ in range(2):
        w, value = bf16_step(w, x, y)
    print("loss", float(value))


if __name__ == "__main__":
    main()
