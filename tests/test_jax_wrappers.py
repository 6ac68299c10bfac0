"""xlarun.jax.capture through every jit wrapper the zoo uses (jax.jit, nnx.jit, eqx.filter_jit, a Keras 3 train step):
each gives a snapshot that replays and matches, or the run says (or the call raises) what failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

import xlarun
import xlarun.jax

REPO = Path(__file__).resolve().parent.parent


def _snapshot_replays(run) -> str:
    """The run succeeded with one snapshot, and its replay on the snapshot's arguments matches: the verdict's text."""
    assert run.status == "succeeded", run.error
    assert run.error is None
    assert len(run.files(kind="snapshot")) == 1
    result = run.main.replay()
    text = str(result)
    assert "arguments      snapshot" in text
    assert "compared with  nothing" not in text
    assert text.rstrip().endswith("match") and "mismatch" not in text
    return text


def test_jax_jit_with_donation(tmp_path):
    step = jax.jit(lambda w, x: (w - 0.1 * x.T @ (x @ w), jnp.sum(x @ w)), donate_argnums=0)
    w, x = jnp.ones((4, 2)), jnp.arange(12.0).reshape(3, 4)
    run = xlarun.jax.capture(step, w, x, store=tmp_path / "store", snapshots=True)
    _snapshot_replays(run)
    assert float(w.sum()) == 8.0  # the caller's donated array is left as it was


def test_nnx_jit_with_donation(tmp_path):
    """nnx.jit's Compiled.args_info raises a TypeError: the capture copies every array instead, and snapshots."""
    nnx = pytest.importorskip("flax.nnx")

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            return self.linear(x)

    @nnx.jit(donate_argnums=0)
    def nnx_step(model, x):
        return jnp.sum(model(x) ** 2)

    model, x = Net(nnx.Rngs(0)), jnp.arange(12.0).reshape(3, 4)
    expected = float(nnx_step(model, x))
    run = xlarun.jax.capture(nnx_step, model, x, store=tmp_path / "store", snapshots=True)
    _snapshot_replays(run)
    assert run.main.name == "jit_nnx_step"
    assert float(nnx_step(model, x)) == pytest.approx(expected)  # the model's arrays survived the capture


def test_eqx_filter_jit(tmp_path):
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(4, 2, 8, 1, key=jax.random.key(0))

    @eqx.filter_jit
    def eqx_step(model, x):
        return jnp.sum(jax.vmap(model)(x))

    run = xlarun.jax.capture(eqx_step, model, jnp.ones((3, 4)), store=tmp_path / "store", snapshots=True)
    _snapshot_replays(run)
    assert run.main.name == "jit_eqx_step"


class _RecompilingWrapper:
    """A jit wrapper whose compiled object runs an executable of its own (not the one compiled with the dump options)."""

    def __init__(self, fn):
        self.fn = fn

    def lower(self, *args):
        lowered = jax.jit(self.fn).lower(*args)
        fn = self.fn

        class Lowered:
            def compile(self, compiler_options=None):
                lowered.compile(compiler_options=compiler_options)
                return jax.jit(lambda *a: fn(*a) + 0)  # another function: another executable

        return Lowered()


def test_a_wrapper_that_writes_no_snapshot_says_so(tmp_path):
    run = xlarun.jax.capture(_RecompilingWrapper(jnp.sin), jnp.ones(3), store=tmp_path / "store", snapshots=True)
    assert run.status == "failed"
    assert "wrote no snapshot" in run.error and "_RecompilingWrapper" in run.error
    assert run.files(kind="snapshot") == []
    assert "failed: snapshots=True, but calling" in str(run)  # the printed result says it


def test_an_error_after_compiling_is_in_the_result(tmp_path):
    """Compiled, then the call failed (a wrong argument count): the dump is kept, the run says failed and why."""

    class BadCall(_RecompilingWrapper):
        def lower(self, *args):
            lowered = jax.jit(self.fn).lower(*args)

            class Lowered:
                def compile(self, compiler_options=None):
                    compiled = lowered.compile(compiler_options=compiler_options)
                    return lambda *a: compiled(*a, *a)

            return Lowered()

    run = xlarun.jax.capture(BadCall(jnp.cos), jnp.ones(3), store=tmp_path / "store", snapshots=True)
    assert run.status == "failed" and run.error.startswith("TypeError: ")
    assert f"failed: {run.error.splitlines()[0]}" in str(run)


KERAS_JOB = textwrap.dedent("""
    import json, os, sys
    os.environ["KERAS_BACKEND"] = "jax"
    import keras, numpy as np
    import xlarun, xlarun.jax

    store = xlarun.open_store(sys.argv[1])
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 8)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    state = model._get_jax_state(
        trainable_variables=True, non_trainable_variables=True, optimizer_variables=True, metrics_variables=True
    )
    run = xlarun.jax.capture(model.train_step, state, (x, y), store=store, snapshots=True, donate_argnums=0)
    replay = run.main.replay()
    model.make_train_function()
    try:  # Keras's train_function is a Python loop over an iterator, not a jittable step
        xlarun.jax.capture(model.train_function, state, iter([(x, y)]), store=store)
        raised = None
    except Exception as exc:
        raised = f"{type(exc).__name__}: {exc}"
    print(json.dumps({
        "status": run.status, "error": run.error, "module": run.main.name,
        "snapshots": len(run.files(kind="snapshot")), "replay": str(replay), "raised": raised,
        "runs": len(store.runs()),
    }))
""")


@pytest.mark.slow
def test_keras_train_step_on_the_jax_backend(tmp_path):
    pytest.importorskip("keras")
    script = tmp_path / "keras_job.py"
    script.write_text(KERAS_JOB)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "KERAS_BACKEND": "jax"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == "succeeded" and seen["error"] is None
    assert seen["module"] == "jit_train_step" and seen["snapshots"] == 1
    assert "arguments      snapshot" in seen["replay"] and seen["replay"].rstrip().endswith("match")
    assert seen["raised"].startswith("TypeError: ") and "iterator" in seen["raised"]
    assert seen["runs"] == 1  # the refused train_function left no run behind
