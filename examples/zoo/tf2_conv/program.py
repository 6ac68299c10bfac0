"""TensorFlow 2: a tiny conv net trained with GradientTape and SGD inside tf.function(jit_compile=True)."""

import tensorflow as tf


def main():
    tf.random.set_seed(0)
    kernel = tf.Variable(tf.random.normal([3, 3, 1, 4]) * 0.1)
    dense = tf.Variable(tf.random.normal([4 * 8 * 8, 2]) * 0.1)
    opt = tf.keras.optimizers.SGD(0.1)

    @tf.function(jit_compile=True)
    def conv_train_step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, kernel, strides=1, padding="SAME"))
            logits = tf.reshape(h, [x.shape[0], -1]) @ dense
            loss = tf.reduce_mean(tf.square(logits - y))
        grads = tape.gradient(loss, [kernel, dense])
        opt.apply_gradients(zip(grads, [kernel, dense], strict=True))
        return loss

    x = tf.random.normal([4, 8, 8, 1])
    y = tf.random.normal([4, 2])
    for _ in range(2):
        loss = conv_train_step(x, y)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
