"""bf16 attention whose numbers move in a pass the module cannot compile without (xlarun bisect's kept-pass case).

On CPU a bf16 dot does not compile unless ``float-normalization-bf16`` rewrites it to f32, so a bisection must keep
that pass on in every replay, and the step-by-step search cannot see it. The pass also keeps bf16 intermediates in
f32 (excess precision): with ``--xla_allow_excess_precision=false`` the result moves from 7.8328 to 7.8475.
Prints ``result <value>``.
"""

import jax
import jax.numpy as jnp


@jax.jit
def attention(q, k, v):
    scores = (q @ k.T) / jnp.sqrt(jnp.bfloat16(q.shape[-1]))
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.sum((weights @ v).astype(jnp.float32))


def main():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, (64, 32), dtype=jnp.bfloat16) for key in keys)
    print(f"result {float(attention(q, k, v)):.6f}")


if __name__ == "__main__":
    main()
