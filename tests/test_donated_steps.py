"""A training step that donates its parameters (jax.jit(step, donate_argnums=0), as Flax/optax loops write it),
captured with snapshots, on real jaxlibs: 0.10.2 (the suite's) and the newest write a snapshot whose result is
empty, which replay compares with the module's before_optimizations dump instead of calling it a mismatch; older
ones (0.4.30, 0.7.2: the oldest and middle compat venvs) abort, and xlarun warns before the job starts and names the
signal and the cause after; `xlarun.jax.capture` leaves the caller's arrays alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.compat_support import require_compat, xlarun_env, xlarun_in

pytestmark = pytest.mark.slow  # real JAX captures on several jaxlibs

STEP = """
import jax, jax.numpy as jnp
def step(params, x):
    def loss(p):
        return jnp.mean((jnp.tanh(x @ p["w"]) + p["b"]) ** 2)
    g = jax.grad(loss)(params)
    return jax.tree.map(lambda p, d: p - 0.1 * d, params, g), loss(params)
train_step = jax.jit(step, donate_argnums=0)
params = {"w": jnp.ones((8, 4)) * 0.1, "b": jnp.zeros(4)}
x = jnp.ones((16, 8))
for _ in range(2):
    params, loss = train_step(params, x)
print("loss", float(loss))
"""


def _capture(tmp_path, python: str, name: str) -> tuple[subprocess.CompletedProcess, str]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "step.py").write_text(STEP)
    (folder / "spec.yaml").write_text(
        f"name: {name}\nscript: step.py\npython: {python}\nframework: jax\ndump:\n  snapshots: true\n"
    )
    store = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-m", "xlarun", "capture", str(folder / "spec.yaml"), "-q", "--store", store],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, store


def _replay_json(argv_prefix: list[str], store: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [*argv_prefix, "replay", "step", "--json", "--store", store], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("key", [None, "jax-0.12.0.1"], ids=["jax-0.10.2", "newest"])
def test_a_donated_step_replays_against_its_unoptimized_module_not_as_a_mismatch(tmp_path, key):
    python = sys.executable if key is None else str(require_compat(key))
    done, store = _capture(tmp_path, python, "donate")
    assert done.returncode == 0, done.stderr[-2000:]
    runner = [sys.executable, "-m", "xlarun"] if key is None else xlarun_in(require_compat(key))
    result = _replay_json(runner, store, None if key is None else xlarun_env())
    assert result["verdict"] == "match" and result["arguments"] == "snapshot"
    assert len(result["compared_with"]) == 1 and result["compared_with"][0].startswith("before_optimizations module ")
    assert any("donates its buffers" in w for w in result["warnings"])


@pytest.mark.parametrize("key", ["jax-0.4.30", "jax-0.7.2"])
def test_a_jaxlib_that_aborts_on_donated_snapshots_is_warned_about_and_its_abort_explained(tmp_path, key):
    done, _store = _capture(tmp_path, str(require_compat(key)), "donate-old")
    assert done.returncode == 1
    version = key.split("-")[1]
    assert f"dump.snapshots with jaxlib {version}: XLA aborts the job (SIGABRT) when a step donates its buffers" in done.stderr
    assert "the job was killed by SIGABRT (signal 6)" in done.stderr
    assert "set dump.snapshots: false, or drop the donation" in done.stderr
    assert "exited with code -6" not in done.stderr


def test_xlarun_jax_capture_leaves_the_callers_donated_arrays_alone(tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import xlarun
    import xlarun.jax

    namespace: dict = {}
    exec(STEP.split("params = ")[0], namespace)
    params = {"w": jnp.ones((8, 4)) * 0.1, "b": jnp.zeros(4)}
    store = xlarun.open_store(tmp_path / "store")
    run = xlarun.jax.capture(namespace["train_step"], params, jnp.ones((16, 8)), snapshots=True, store=store)
    assert not params["w"].is_deleted() and float(params["w"].sum()) == pytest.approx(3.2)
    assert "input_output_alias" in run.main.text()  # the dumped module still donates
    replayed = run.main.replay()
    assert replayed.verdict == "match" and replayed.result.compared_with[0].startswith("before_optimizations module")
    assert jax is not None


def test_a_job_that_cannot_import_its_framework_says_so_in_the_error(tmp_path, cli):
    folder = tmp_path / "noimport"
    folder.mkdir()
    (folder / "job.py").write_text("import jax_that_is_not_installed\n")
    (folder / "spec.yaml").write_text("name: noimport\nscript: job.py\n")
    out = cli("capture", folder / "spec.yaml", "-q", "--store", tmp_path / "store")
    assert out.exit_code == 1
    assert "ModuleNotFoundError: No module named 'jax_that_is_not_installed'" in out.stderr
    assert "no XLA dump" not in out.stderr
