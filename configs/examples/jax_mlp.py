"""A small JAX MLP trained for a few steps: the bundled example xlarun captures.

It compiles three modules: the parameter initialisation, the training step (the main program:
forward, loss, gradients and an SGD update) and the evaluation.
"""

import argparse

import jax
import jax.numpy as jnp


def init_params(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in), jnp.zeros(fan_out)))
    return params


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    logits = forward(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def train_step(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - lr * gw, b - lr * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(forward(params, x), -1) == jnp.argmax(y, -1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()

    key = jax.random.PRNGKey(0)
    params = jax.jit(init_params, static_argnums=1)(key, (64, args.hidden, args.hidden, 10))
    x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, 64))
    y = jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(2), (args.batch,), 0, 10), 10)
    for step in range(args.steps):
        params, loss = train_step(params, x, y, 0.1)
        print(f"step {step}: loss {float(loss):.4f}")
    print(f"accuracy {float(accuracy(params, x, y)):.3f}")


if __name__ == "__main__":
    main()
