"""Keras 3 on the JAX backend: a small Sequential model fitted for one epoch (jit_compile on)."""

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import numpy as np


def main():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = rng.normal(size=(32, 2)).astype("float32")
    history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    print("loss", history.history["loss"][-1])


if __name__ == "__main__":
    main()
