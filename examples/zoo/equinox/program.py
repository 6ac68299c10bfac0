"""Equinox: an eqx.nn.MLP trained for a few steps with filter_jit and SGD."""

import equinox as eqx
import jax
import jax.numpy as jnp


def main():
    model = eqx.nn.MLP(in_size=8, out_size=2, width_size=16, depth=2, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (8, 8))
    y = jax.random.normal(jax.random.key(2), (8, 2))

    @eqx.filter_jit
    def equinox_step(model, x, y):
        def loss(m):
            return jnp.mean((jax.vmap(m)(x) - y) ** 2)

        value, grads = eqx.filter_value_and_grad(loss)(model)
        model = eqx.apply_updates(model, jax.tree_util.tree_map(lambda g: -0.1 * g, grads))
        return model, value

    for _ in range(2):
        model, value = equinox_step(model, x, y)
    print("loss", float(value))


if __name__ == "__main__":
    main()
