"""tanh, exp, log1p, erf, gelu and sin over 4,096 points: XLA's CPU approximations of these changed between jaxlib
releases (`xlarun replay transcendental --jaxlib ...`, docs/replay.md)."""

import jax, jax.numpy as jnp
from jax.scipy.special import erf

@jax.jit
def transcendental(x):
    return jnp.stack([jnp.tanh(x), jnp.exp(x), jnp.log1p(jnp.abs(x)), erf(x), jax.nn.gelu(x), jnp.sin(x * 30.0)])

x = jnp.linspace(-4, 4, 4096, dtype=jnp.float32)
print("result", float(transcendental(x).sum()))
