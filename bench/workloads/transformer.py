"""A transformer-like JAX training step, the workload the benchmarks capture.

Embedding, ``--layers`` pre-norm blocks (multi-head attention + MLP), layer norm, softmax
cross-entropy, gradients and an Adam-like update. ``--variants`` compiles the training step for
that many sequence lengths (each a distinct module, as a real job with bucketed shapes does), and
``--eval`` adds a separately jitted evaluation step per variant: more modules, more pass dumps.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np


def init_params(seed, vocab: int, d_model: int, layers: int, d_ff: int):
    keys = iter(jax.random.split(jax.random.key(seed), 4 + 6 * layers))

    def dense(fan_in, fan_out):
        return jax.random.normal(next(keys), (fan_in, fan_out)) * (1.0 / fan_in) ** 0.5

    params = {"embed": dense(vocab, d_model), "final_norm": jnp.ones(d_model), "blocks": []}
    for _ in range(layers):
        params["blocks"].append(
            {
                "norm1": jnp.ones(d_model),
                "qkv": dense(d_model, 3 * d_model),
                "proj": dense(d_model, d_model),
                "norm2": jnp.ones(d_model),
                "up": dense(d_model, d_ff),
                "down": dense(d_ff, d_model),
            }
        )
    return params


def init_state(seed, vocab: int, d_model: int, layers: int, d_ff: int):
    """Parameters and the two Adam moments, made in one jitted call (one module, not one per shape)."""
    params = init_params(seed, vocab, d_model, layers, d_ff)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params)


def host_params(rng, vocab: int, d_model: int, layers: int, d_ff: int):
    """The same parameter tree as :func:`init_params`, made with numpy (nothing to compile)."""

    def dense(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) * (1.0 / fan_in) ** 0.5).astype(np.float32)

    ones = lambda n: np.ones(n, np.float32)
    blocks = [
        {
            "norm1": ones(d_model),
            "qkv": dense(d_model, 3 * d_model),
            "proj": dense(d_model, d_model),
            "norm2": ones(d_model),
            "up": dense(d_model, d_ff),
            "down": dense(d_ff, d_model),
        }
        for _ in range(layers)
    ]
    return {"embed": dense(vocab, d_model), "final_norm": ones(d_model), "blocks": blocks}


def layer_norm(x, scale):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def attention(x, block, heads: int):
    batch, seq, d_model = x.shape
    qkv = x @ block["qkv"]
    q, k, v = jnp.split(qkv, 3, axis=-1)

    def split_heads(t):
        return t.reshape(batch, seq, heads, d_model // heads).transpose(0, 2, 1, 3)

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scores = (q @ k.transpose(0, 1, 3, 2)) / jnp.sqrt(d_model // heads).astype(x.dtype)
    mask = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    scores = jnp.where(mask, scores, -1e9)
    out = jax.nn.softmax(scores, axis=-1) @ v
    return out.transpose(0, 2, 1, 3).reshape(batch, seq, d_model) @ block["proj"]


def forward(params, tokens, heads: int):
    x = params["embed"][tokens]
    for block in params["blocks"]:
        x = x + attention(layer_norm(x, block["norm1"]), block, heads)
        x = x + jax.nn.gelu(layer_norm(x, block["norm2"]) @ block["up"]) @ block["down"]
    x = layer_norm(x, params["final_norm"])
    return x @ params["embed"].T  # tied output embedding


def loss_fn(params, tokens, heads: int):
    logits = forward(params, tokens[:, :-1], heads)
    targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1])
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * targets, axis=-1))


def adam_update(params, grads, m, v, step, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
    scale = lr * jnp.sqrt(1 - b2**step) / (1 - b1**step)
    params = jax.tree_util.tree_map(lambda p, m_, v_: p - scale * m_ / (jnp.sqrt(v_) + eps), params, m, v)
    return params, m, v


def make_train_step(heads: int):
    @jax.jit
    def train_step(params, m, v, step, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
        params, m, v = adam_update(params, grads, m, v, step)
        return params, m, v, loss

    return train_step


def make_eval_step(heads: int):
    @jax.jit
    def eval_step(params, tokens):
        return loss_fn(params, tokens, heads)

    return eval_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--variants", type=int, default=1, help="sequence lengths to compile the step for (distinct modules)")
    parser.add_argument("--eval", action="store_true", help="also jit an evaluation step per variant")
    parser.add_argument(
        "--host-init", action="store_true", help="make the parameters with numpy instead of a jitted init (one module fewer)"
    )
    args = parser.parse_args()

    rng = np.random.default_rng(0)  # tokens from numpy: no extra RNG modules
    if args.host_init:
        params = host_params(rng, args.vocab, args.d_model, args.layers, 4 * args.d_model)
        m = jax.tree_util.tree_map(np.zeros_like, params)
        v = jax.tree_util.tree_map(np.zeros_like, params)
    else:
        params, m, v = jax.jit(init_state, static_argnums=(1, 2, 3, 4))(
            0, args.vocab, args.d_model, args.layers, 4 * args.d_model
        )
    train_step = make_train_step(args.heads)
    eval_step = make_eval_step(args.heads)
    for variant in range(args.variants):
        seq = args.seq + 8 * variant
        tokens = rng.integers(0, args.vocab, (args.batch, seq + 1), dtype=np.int32)
        params, m, v, loss = train_step(params, m, v, np.float32(variant + 1), tokens)
        print(f"seq {seq}: loss {float(loss):.4f}")
        if args.eval:
            print(f"seq {seq}: eval loss {float(eval_step(params, tokens)):.4f}")


if __name__ == "__main__":
    main()
