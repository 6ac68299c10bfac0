"""bf16 arithmetic whose result depends on one XLA pass (xlarun bisect's first test case).

On CPU, XLA keeps bf16 intermediates in f32 when excess precision is allowed (the default):
the pass ``float-normalization-bf16`` decides it. With the pass disabled (or
``--xla_allow_excess_precision=false``) every intermediate is rounded to bf16 and the sum moves
from -112.938 to -113.007 (1,000 bf16 normals from PRNGKey(0)). Prints ``result <value>`` for ``xlarun bisect SPEC --check``.
"""

import jax
import jax.numpy as jnp


@jax.jit
def bf16_sum(a, b, c):
    return jnp.sum(((a * b + c) * a - b).astype(jnp.float32))


def main():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    a, b, c = (jax.random.normal(k, (1000,), dtype=jnp.bfloat16) for k in keys)
    print(f"result {float(bf16_sum(a, b, c)):.6f}")


if __name__ == "__main__":
    main()
