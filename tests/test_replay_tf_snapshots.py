"""TensorFlow snapshots replay as snapshots: a TF 2 conv net trained with GradientTape and SGD under
``tf.function(jit_compile=True)``. Its snapshot's HloProto carries a buffer assignment with aliases, which was once
read as a bare module, so replay failed ("Failed to deserialize HloModuleProto") and --json printed the module name as
protobuf bytes. Dumped by TF 2.21 (this venv) and TF 2.16.2 (its compat venv), replayed here on the built-in engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat_support import require_compat
from xlarun.hlo.names import decode_dump_name
from xlarun.hlo.proto import classify_proto
from xlarun.replay import ReplayOptions, replay_file

# Marked per test: each case runs TensorFlow, then a replay

CONV_NET = """
import tensorflow as tf

tf.random.set_seed(0)
conv = tf.keras.layers.Conv2D(4, 3, activation="relu")
dense = tf.keras.layers.Dense(3)
x, y = tf.random.normal([2, 8, 8, 1]), tf.constant([0, 2])
conv.build(x.shape)
dense.build([2, 144])
variables = conv.trainable_variables + dense.trainable_variables


@tf.function(jit_compile=True)
def step(x, y):
    with tf.GradientTape() as tape:
        logits = dense(tf.reshape(conv(x), [2, -1]))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    for v, g in zip(variables, tape.gradient(loss, variables)):
        v.assign_sub(0.1 * g)
    return loss


for _ in range(2):
    step(x, y)
"""
FLAGS = "--xla_dump_hlo_snapshots --xla_dump_hlo_as_proto --xla_embed_ir_in_executable"  # as a TF capture sets them


def _tf_python(key: str | None) -> str:
    if key is None:
        pytest.importorskip("tensorflow")
        return sys.executable
    return str(require_compat(key))


@pytest.mark.slow
@pytest.mark.parametrize("key", [None, "tf-2.16.2"], ids=["tf-2.21", "tf-2.16.2"])
def test_a_conv_net_snapshot_replays_and_matches(key, tmp_path):
    script = tmp_path / "conv_net.py"
    script.write_text(CONV_NET)
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={tmp_path / 'dump'} {FLAGS}", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([_tf_python(key), str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    snapshots = sorted((tmp_path / "dump").glob("*step*.execution_*.hlo_snapshot.pb"))
    assert len(snapshots) == 2  # one per execution
    path: Path = snapshots[0]
    assert decode_dump_name(path.name).kind == classify_proto(path.read_bytes())[0] == "snapshot"
    result = replay_file(path, ReplayOptions())
    assert (result.verdict, result.exit_code, result.error) == ("match", 0, None), result.mismatches
    assert result.input_kind == "snapshot" and result.arguments == "snapshot"
    assert result.compared_with == ["snapshot result"]
    assert (result.module_name or "").startswith("a_inference_step_") and (result.module_name or "").isprintable()
    # loss, then the conv kernel and bias and the dense kernel and bias, updated in place
    assert [o.type for o in result.outputs] == ["f32[]", "f32[3,3,1,4]", "f32[4]", "f32[144,3]", "f32[3]"]
