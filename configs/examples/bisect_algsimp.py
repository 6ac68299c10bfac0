"""A residual that is zero in exact arithmetic, which one XLA pass makes zero in floats too.

``(x / 3) * 3 - x`` is not zero in IEEE floats (each operation rounds), but XLA's algebraic
simplifier (pass ``algsimp``) turns the division by a constant into a multiplication and then
folds the two constants into one (``x * (1/3) * 3`` -> ``x * 1``), so the residual vanishes.
With ``--xla_disable_hlo_passes=algsimp`` the per-operation roundings come back. Prints
``result <value>`` (the summed residual, times 1e6) for ``xlarun bisect SPEC --check``.
"""

import jax
import jax.numpy as jnp


@jax.jit
def residual(x):
    return jnp.sum((x / 3.0) * 3.0 - x) * 1e6


def main():
    x = jax.random.normal(jax.random.PRNGKey(1), (4096,), dtype=jnp.float32)
    print(f"result {float(residual(x)):.6f}")


if __name__ == "__main__":
    main()
