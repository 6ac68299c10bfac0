"""xlarun.jax: in-process capture of jitted functions, one run each, with dump options for that compile only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Marked per test: real JAX captures in the process

pytest.importorskip("jax")

import xlarun
import xlarun.jax

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "configs" / "examples"

# Runs in a fresh process: XLA reads XLA_FLAGS once, at its first use, so the caller's flags must be set
# before jax starts. Several functions are captured between ordinary compiles; it prints what it saw.
SEVERAL = textwrap.dedent("""
    import json, os, sys
    import jax, jax.numpy as jnp
    import xlarun, xlarun.jax

    store = xlarun.open_store(sys.argv[1])
    x = jnp.arange(16.0).reshape(4, 4)

    def before(v): return v - 1
    def f(v): return jnp.sin(v) @ v.T
    def g(v): return (v * 2 + 1).sum()
    def between(v): return jnp.cos(v) * 3
    def h(v, n): return jnp.tanh(v) * n
    def after(v): return v / 7

    jax.jit(before)(x).block_until_ready()
    with xlarun.jax.capturing(store, snapshots=True) as session:
        session.capture(f, x)
        jax.jit(between)(x).block_until_ready()
        session.capture(g, x, name="gee")
    lone = xlarun.jax.capture(h, x, 3, store=store, static_argnums=1, pass_re="simp")
    jax.jit(after)(x).block_until_ready()
    jax.jit(f)(x + 1).block_until_ready()  # f again, compiled the ordinary way: not dumped
    print(json.dumps({
        "session": [r.id for r in session.runs], "batch": session.batch_id, "lone": lone.id,
        "xla_flags": os.environ.get("XLA_FLAGS"), "staging": sorted(os.listdir(store.path / "staging")),
    }))
""")


def _run_script(source: str, tmp_path: Path, *args: str, env: dict | None = None) -> dict:
    script = tmp_path / "job.py"
    script.write_text(source)
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **(env or {})}
    done = subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def several(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("several")
    flags = "--xla_cpu_enable_fast_math=false"
    seen = _run_script(SEVERAL, tmp, str(tmp / "store"), env={"XLA_FLAGS": flags})
    return xlarun.open_store(tmp / "store"), seen, flags, tmp


@pytest.mark.slow
def test_several_functions_become_separate_runs_of_kind_inline(several):
    store, seen, _flags, _tmp = several
    runs = [store.run(r) for r in [*seen["session"], seen["lone"]]]
    assert [r.name for r in runs] == ["f", "gee", "h"]
    assert {r.kind for r in runs} == {"inline"} and all(r.ok for r in runs)
    assert [r.main.name for r in runs] == ["jit_f", "jit_g", "jit_h"]
    # the session's runs share its batch id; the lone capture has none
    assert [r.batch_id for r in runs] == [seen["batch"], seen["batch"], None]
    assert [r.id for r in store.runs(batch=seen["batch"])] == seen["session"]
    f_run = runs[0]
    assert f_run.main.instr_before == 4 and "sine" in f_run.main.opcodes_before
    assert [f.kind for f in f_run.files("snapshot")] == ["snapshot"]  # snapshots=True ran it once
    assert runs[2].files("snapshot") == [] and runs[2].main.n_pass_dumps > 0  # pass_re="simp"


@pytest.mark.slow
def test_nothing_else_is_dumped(several):
    store, seen, _flags, tmp = several
    for run_id in [*seen["session"], seen["lone"]]:
        run = store.run(run_id)
        dumped_modules = {f.path.split(".")[0] for f in run.files() if f.path.startswith("module_")}
        assert len(dumped_modules) == 1, dumped_modules  # only the captured function's module
        names = {f.path.split(".")[1] for f in run.files() if f.path.startswith("module_")}
        assert names == {run.main.name}
    # compiles after a capture write nowhere: its staging folder (XLA's dump folder) is gone and stays gone
    assert seen["staging"] == []
    assert sorted(p.name for p in tmp.iterdir()) == ["job.py", "store"]


@pytest.mark.slow
def test_the_callers_xla_flags_are_left_alone(several):
    store, seen, flags, _tmp = several
    assert seen["xla_flags"] == flags
    manifest = store.run(seen["lone"]).manifest
    assert manifest["env_delta"] == {}
    assert "--xla_dump_hlo_pass_re=simp" in manifest["xla_flags"] and not any("fast_math" in f for f in manifest["xla_flags"])


@pytest.mark.slow
def test_the_compilation_cache_cannot_hide_the_compile(tmp_path):
    source = textwrap.dedent("""
        import json, sys
        import jax, jax.numpy as jnp
        import xlarun, xlarun.jax
        jax.config.update("jax_compilation_cache_dir", sys.argv[2])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        def f(v): return jnp.sin(v) @ v.T
        x = jnp.ones((8, 8))
        jax.jit(f)(x).block_until_ready()        # compiled and cached
        run = xlarun.jax.capture(f, x, store=sys.argv[1])
        print(json.dumps({"run": run.id, "modules": run.n_modules, "cache_on_after": jax.config.jax_enable_compilation_cache}))
    """)
    seen = _run_script(source, tmp_path, str(tmp_path / "store"), str(tmp_path / "cache"))
    assert any((tmp_path / "cache").iterdir())  # the persistent cache was in use
    assert seen["modules"] == 1
    assert seen["cache_on_after"] is True  # turned off for the capture's compile only


@pytest.mark.slow
def test_the_bundled_example_train_step_in_process(tmp_path):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import jax
        import jax_mlp
    finally:
        sys.path.remove(str(EXAMPLES))
    params = jax.jit(jax_mlp.init_params, static_argnums=1)(jax.random.PRNGKey(0), (64, 128, 128, 10))
    x = jax.random.normal(jax.random.PRNGKey(1), (32, 64))
    y = jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 10), 10)
    run = xlarun.jax.capture(jax_mlp.train_step, params, x, y, 0.1, snapshots=True, store=tmp_path / "store")
    assert (run.name, run.kind, run.framework, run.backend) == ("train_step", "inline", "jax", "in-process")
    assert run.tags["function"] == "jax_mlp.train_step"
    assert (
        run.tags["source_file"] == str(EXAMPLES / "jax_mlp.py") and run.tags["source_line"] == "33"
    )  # its first line: the @jax.jit decorator, as Python counts it
    versions = run.manifest["versions"]
    assert versions["jax"] == jax.__version__ and versions["jaxlib"] == jax.lib.__version__
    step = run.main
    # the same module `xlarun capture configs/jax-cpu.yaml` finds: 159 instructions before optimizations on jax 0.10
    assert step.name == "jit_train_step" and step.instr_before == 159 and run.n_modules == 1
    assert step.replay().verdict == "match"


def test_a_jax_without_per_compile_options_is_refused_cleanly(tmp_path, monkeypatch):
    import jax

    def old_compile(self):  # the signature of Lowered.compile before compiler_options existed
        raise AssertionError("not reached")

    monkeypatch.setattr(jax.stages.Lowered, "compile", old_compile)
    store = xlarun.open_store(tmp_path / "store")
    with pytest.raises(xlarun.XlarunError, match="cannot pass dump options to one compilation") as caught:
        xlarun.jax.capture(lambda v: v + 1, jax.numpy.ones(3), store=store)
    assert caught.value.exit_code == 3
    assert list(store.path.joinpath("staging").iterdir()) == [] and len(store.runs()) == 0


@pytest.mark.slow
def test_options_are_the_specs_dump_flags():
    options = xlarun.jax.compiler_options_for("/d", pass_re=".*", snapshots=True, formats=("text", "proto"))
    assert options == {
        "xla_dump_to": "/d",
        "xla_dump_hlo_as_text": True,
        "xla_dump_hlo_as_proto": True,
        "xla_dump_hlo_snapshots": True,
        "xla_dump_hlo_pass_re": ".*",
        "xla_dump_large_constants": True,
    }


COMPAT_JAX = (
    Path(os.environ.get("XLARUN_COMPAT_DIR") or Path.home() / ".cache" / "xlarun" / "compat") / "jax-0.4.30" / "bin" / "python"
)


@pytest.mark.slow
@pytest.mark.skipif(not COMPAT_JAX.exists(), reason="needs the jax 0.4.30 compat venv (scripts/compat.py venvs jax-0.4.30)")
def test_oldest_jax_of_the_matrix_captures_in_process(tmp_path):
    source = textwrap.dedent("""
        import json, sys
        import jax, jax.numpy as jnp
        import xlarun, xlarun.jax
        run = xlarun.jax.capture(lambda v: jnp.sin(v) @ v.T, jnp.ones((4, 4)), name="f", snapshots=True, store=sys.argv[1])
        print(json.dumps({"jax": jax.__version__, "module": run.main.name, "instr": run.main.instr_before, "snapshots": len(run.files("snapshot"))}))
    """)
    seen = _run_in_old_jax(tmp_path, source)
    assert seen == {"jax": "0.4.30", "module": "jit__lambda_", "instr": 4, "snapshots": 1}


def _donated_step():
    import jax
    import jax.numpy as jnp

    def step(params, x):
        w, b = params
        loss = lambda p: jnp.mean((jnp.tanh(x @ p[0]) + p[1]) ** 2)
        g = jax.grad(loss)(params)
        return (w - 0.1 * g[0], b - 0.1 * g[1]), loss(params)

    return step


@pytest.mark.slow
def test_donated_arguments_survive_a_capture_with_snapshots(tmp_path):
    """Flax/optax write jax.jit(step, donate_argnums=0): the snapshot run uses copies, so the caller's arrays are
    neither deleted nor changed, and the dumped module still aliases the donated inputs to its outputs."""
    import jax.numpy as jnp
    import numpy as np

    w = jnp.asarray(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    params, x = (w, jnp.zeros(4, jnp.float32)), jnp.ones((3, 8), jnp.float32)
    run = xlarun.jax.capture(_donated_step(), params, x, snapshots=True, donate_argnums=0, store=tmp_path / "store")
    assert not params[0].is_deleted() and not params[1].is_deleted()
    np.testing.assert_array_equal(np.asarray(params[0]), np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    step = run.main
    text = step.text("before_optimizations")
    assert "input_output_alias={ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias) }" in text
    assert len(run.files("snapshot")) == 1
    replayed = step.replay()
    assert replayed.verdict == "match" and replayed.result.compared_with[0].startswith("before_optimizations ")


@pytest.mark.slow
@pytest.mark.skipif(not COMPAT_JAX.exists(), reason="needs the jax 0.4.30 compat venv (scripts/compat.py venvs jax-0.4.30)")
def test_an_aborting_jaxlib_refuses_snapshots_of_donated_arguments(tmp_path):
    """jaxlib 0.4.30's XLA would abort the caller's process (SIGABRT): refused with a one-line InputError instead."""
    source = textwrap.dedent("""
        import json, sys
        import jax, jax.numpy as jnp
        import xlarun.jax
        from xlarun.errors import InputError
        params = jnp.ones((4, 4))
        try:
            xlarun.jax.capture(lambda p: p * 2, params, snapshots=True, donate_argnums=0, store=sys.argv[1])
        except InputError as exc:
            print(json.dumps({"error": exc.message, "hint": exc.hint, "deleted": params.is_deleted()}))
    """)
    seen = _run_in_old_jax(tmp_path, source)
    assert seen["error"] == "jaxlib 0.4.30 aborts the process writing a snapshot of a call with donated arguments"
    assert "snapshots=False" in seen["hint"] and seen["deleted"] is False


def _run_in_old_jax(tmp_path, source: str) -> dict:
    """Run ``source`` (it gets the store's path as its argument) under jax 0.4.30's venv with this xlarun; the JSON
    of its last line."""
    script = tmp_path / "job.py"
    script.write_text(source)
    done = subprocess.run(
        [str(COMPAT_JAX), str(script), str(tmp_path / "store")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
