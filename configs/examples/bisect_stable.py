"""A small f32 layer whose numbers no XLA pass changes beyond 1e-3: xlarun bisect finds nothing.

Prints ``result <value>`` for ``xlarun bisect SPEC --check``.
"""

import jax
import jax.numpy as jnp


@jax.jit
def layer(x, w):
    return jnp.tanh(x @ w) * 2.0 + 1.0


def main():
    x = jax.random.normal(jax.random.PRNGKey(2), (8, 16), dtype=jnp.float32)
    w = jax.random.normal(jax.random.PRNGKey(3), (16, 4), dtype=jnp.float32)
    print(f"result {float(jnp.sum(layer(x, w))):.6f}")


if __name__ == "__main__":
    main()
