"""TF1-style graph (tf.compat.v1 Session) that XLA auto-clusters (--tf_xla_auto_jit=2 in the spec)."""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()


def main():
    x = tf.compat.v1.placeholder(tf.float32, [8, 16], name="x")
    w = tf.compat.v1.get_variable("w", [16, 4], initializer=tf.compat.v1.glorot_uniform_initializer(seed=0))
    y = tf.nn.relu(tf.matmul(x, w))
    loss = tf.reduce_mean(tf.square(y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        feed = {x: np.random.default_rng(0).normal(size=(8, 16)).astype("float32")}
        for _ in range(2):
            value, _ = sess.run([loss, train], feed)
    print("loss", value)


if __name__ == "__main__":
    main()
