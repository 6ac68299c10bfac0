"""TensorFlow 2: a dense layer and its gradient compiled with tf.function(jit_compile=True)."""

import tensorflow as tf


@tf.function(jit_compile=True)
def train_step(w, b, x, y):
    with tf.GradientTape() as tape:
        tape.watch([w, b])
        logits = tf.matmul(x, w) + b
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
    gw, gb = tape.gradient(loss, [w, b])
    return w - 0.1 * gw, b - 0.1 * gb, loss


def main():
    tf.random.set_seed(0)
    w = tf.random.normal((32, 10))
    b = tf.zeros((10,))
    x = tf.random.normal((16, 32))
    y = tf.one_hot(tf.random.uniform((16,), maxval=10, dtype=tf.int32), 10)
    for step in range(2):
        w, b, loss = train_step(w, b, x, y)
        print(f"step {step}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
