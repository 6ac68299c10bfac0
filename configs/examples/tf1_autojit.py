"""TensorFlow 1-style graph (the seeds' linear regression) clustered by XLA auto-jit.

Run with TF_XLA_FLAGS=--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit (the spec sets them).
"""

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_eager_execution()


def main():
    w = tf.get_variable("weights", shape=[], initializer=tf.constant_initializer(0.5))
    b = tf.get_variable("bias", shape=[], initializer=tf.constant_initializer(0.0))
    x_observed = tf.placeholder(tf.float32, shape=[None], name="x_observed")
    y_observed = tf.placeholder(tf.float32, shape=[None], name="y_observed")
    y_pred = w * x_observed + b
    loss_op = tf.reduce_mean(tf.square(y_pred - y_observed))
    train_op = tf.train.GradientDescentOptimizer(0.025).minimize(loss_op)

    xs = np.linspace(-1, 1, 64).astype(np.float32)
    ys = (3 * xs + 0.5).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(5):
            _, loss = sess.run([train_op, loss_op], {x_observed: xs, y_observed: ys})
            print(f"step {step}: loss {loss:.4f}")


if __name__ == "__main__":
    main()
