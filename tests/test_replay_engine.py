"""The built-in PJRT replay engine on real JAX captures and the checked-in JAX/TF dumps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

# Marked per test: every test compiles and runs modules with XLA

pytest.importorskip("jax")

from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay import ReplayOptions, choose_replay_input, replay_file
from xlarun.replay.sources import load_source

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
DUMP_FLAGS = "--xla_dump_hlo_snapshots --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"


def capture_jax(folder: Path, script: str, extra_flags: str = "") -> Path:
    """Run ``script`` with JAX dumping into ``folder/dump`` (snapshots, text, proto); return the dump dir."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(textwrap.dedent(script))
    dump = folder / "dump"
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_dump_to={dump} {DUMP_FLAGS} {extra_flags}",
        "JAX_ENABLE_COMPILATION_CACHE": "false",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    proc = subprocess.run([sys.executable, "job.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder / "stdout.txt").write_text(proc.stdout)
    return dump


def dump_file(dump: Path, module: str, suffix: str) -> Path:
    """The one file of jit module ``module`` whose name ends with ``suffix`` (a regex)."""
    found = [p for p in dump.iterdir() if re.search(rf"\.{re.escape(module)}\.{suffix}$", p.name)]
    assert len(found) == 1, (module, suffix, sorted(p.name for p in dump.iterdir()))
    return found[0]


@pytest.fixture(scope="module")
def affine_dump(tmp_path_factory) -> Path:
    """jit_affine: y = tanh(x @ w) * 3 + b, captured with its arguments and result."""
    return capture_jax(
        tmp_path_factory.mktemp("affine"),
        """
        import jax, jax.numpy as jnp, numpy as np
        def affine(x, w, b):
            return jnp.tanh(x @ w) * 3.0 + b
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        w = np.linspace(0, 0.5, 20, dtype=np.float32).reshape(4, 5)
        b = np.arange(5, dtype=np.float32)
        out = jax.jit(affine)(x, w, b)
        np.save("expected.npy", np.asarray(out))
        """,
    )


@pytest.fixture(scope="module")
def chol_dump(tmp_path_factory) -> Path:
    """jit_chol: a LAPACK custom call whose optimized module needs a column-major operand."""
    return capture_jax(
        tmp_path_factory.mktemp("chol"),
        """
        import jax, jax.numpy as jnp, numpy as np
        def chol(a):
            return jnp.linalg.cholesky(a @ a.T + 4 * jnp.eye(a.shape[0]))
        print(jax.jit(chol)(np.arange(16, dtype=np.float32).reshape(4, 4) / 10).sum())
        """,
    )


@pytest.mark.slow
def test_snapshot_replay_reproduces_the_recorded_result(affine_dump):
    snapshot = dump_file(affine_dump, "jit_affine", r"snapshot\.-?\d+\.pb")
    lines = []
    result = replay_file(snapshot, ReplayOptions(iterations=3), sink=lines.append)

    assert result.verdict == "match", result.to_dict()
    assert result.engine == "pjrt" and result.platform == "cpu"
    assert result.input_kind == "snapshot" and result.arguments == "snapshot"
    assert result.compared_with == ["snapshot result"]
    assert result.max_abs_error <= 1e-6 and result.max_rel_error <= 1e-6
    # the snapshot's module is the optimized one: replayed through the rewrite, not a fallback
    assert result.route.startswith("deoptimized") and result.fell_back_to is None
    assert len(result.run_times_s) == 3 and result.compile_s > 0
    assert result.min_s <= result.median_s
    assert [o.type for o in result.outputs] == ["f32[3,5]"]
    assert any("match against snapshot result" in line for line in lines)
    assert result.log.splitlines() == lines
    # and the recorded result is what jax computed
    expected = np.load(affine_dump.parent / "expected.npy")
    np.testing.assert_array_equal(load_source(snapshot).result, expected)


@pytest.mark.slow
def test_reference_platform_compares_two_runs(affine_dump):
    before = dump_file(affine_dump, "jit_affine", r"before_optimizations\.hlo\.pb")
    result = replay_file(before, ReplayOptions(reference_platform="cpu", seed=7))

    assert result.verdict == "match"
    assert result.arguments == "fake" and result.compared_with == ["platform cpu"]
    assert result.max_abs_error == 0.0


@pytest.mark.slow
def test_perturbed_constant_is_a_mismatch_against_the_original_snapshot(affine_dump, tmp_path):
    original = dump_file(affine_dump, "jit_affine", r"before_optimizations\.txt").read_text()
    assert "constant(3)" in original
    edited = tmp_path / "module_0000.jit_affine.before_optimizations.txt"
    edited.write_text(original.replace("constant(3)", "constant(3.01)"))
    snapshot = dump_file(affine_dump, "jit_affine", r"snapshot\.-?\d+\.pb")

    result = replay_file(edited, ReplayOptions(), snapshot=snapshot)
    assert result.verdict == "mismatch" and int(result.exit_code) == 1
    assert result.arguments == "snapshot" and result.compared_with == ["snapshot result"]
    assert 0.005 < result.max_abs_error < 0.04  # 0.01 * |tanh(.)| <= 0.01, plus rounding
    assert result.mismatches and result.mismatches[0].startswith("output 0 [")
    with pytest.raises(Exception, match="miscompared"):
        result.raise_for_verdict()

    unchanged = tmp_path / "same" / edited.name
    unchanged.parent.mkdir()
    unchanged.write_text(original)
    assert replay_file(unchanged, ReplayOptions(), snapshot=snapshot).verdict == "match"


@pytest.mark.slow
def test_optimized_dump_replays_through_the_rewrite(affine_dump):
    optimized = dump_file(affine_dump, "jit_affine", r"cpu_after_optimizations\.txt")
    result = replay_file(optimized, ReplayOptions(reference_platform="cpu"))
    assert result.verdict == "match"
    assert result.route.startswith("deoptimized: ") and "fusion" in result.route
    assert result.fell_back_to is None


@pytest.mark.slow
def test_unrecompilable_optimized_module_falls_back_to_its_unoptimized_dump(chol_dump):
    snapshot = dump_file(chol_dump, "jit_chol", r"snapshot\.-?\d+\.pb")
    result = replay_file(snapshot, ReplayOptions())

    assert result.fell_back_to.endswith("jit_chol.before_optimizations.hlo.pb")
    assert any("operand layout f32[4,4]{0,1}" in w and "unoptimized dump" in w for w in result.warnings)
    # the fallback still uses the snapshot's arguments and is judged against its result
    assert result.arguments == "snapshot" and result.verdict == "match"


@pytest.mark.slow
def test_unrecompilable_optimized_module_without_fallback_is_an_engine_error(chol_dump, tmp_path):
    optimized = dump_file(chol_dump, "jit_chol", r"cpu_after_optimizations\.txt")
    alone = tmp_path / optimized.name
    alone.write_bytes(optimized.read_bytes())
    result = replay_file(alone, ReplayOptions())
    assert result.verdict == "engine-error" and int(result.exit_code) == 3
    assert "no before_optimizations dump" in result.error


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*before_optimizations*") if p.suffix in (".txt", ".pb")),
)
def test_fake_data_runs_every_before_optimizations_fixture(path):
    """Real JAX and TF (tf/) dumps run on seeded fake data, deterministically."""
    first = replay_file(FIXTURES / path, ReplayOptions(seed=3, print_literals=True))
    again = replay_file(FIXTURES / path, ReplayOptions(seed=3, print_literals=True))
    assert first.arguments == "fake" and first.outputs
    # a partitioned module runs on its N devices, and is checked against itself on one device
    assert (first.verdict, first.devices) == (("match", 2) if path.startswith("sharded/") else ("ran", 1))
    if first.input_kind != "text-elided-constants":  # elided constants are uninitialized memory
        assert [o.literal for o in first.outputs] == [o.literal for o in again.outputs]


@pytest.mark.slow
def test_tf_module_with_reference_platform():
    tf = next(FIXTURES.glob("tf/*before_optimizations.hlo.pb"))
    result = replay_file(tf, ReplayOptions(reference_platform="cpu"))
    assert result.verdict == "match" and result.module_name.startswith("a_inference_f_")


@pytest.mark.slow
def test_elided_constants_are_replayed_with_a_loud_warning():
    elided = FIXTURES / "lookup_elided" / "module_0002.jit_lookup.before_optimizations.txt"
    result = replay_file(elided, ReplayOptions())
    assert result.input_kind == "text-elided-constants"
    assert any(w.startswith("WARNING:") and "GARBAGE" in w for w in result.warnings)
    assert "GARBAGE" in result.log

    whole = replay_file(FIXTURES / "lookup_large" / elided.name, ReplayOptions())
    assert whole.input_kind == "text-large-constants" and not whole.warnings


@pytest.mark.slow
def test_choose_prefers_snapshot_then_proto_then_whole_text(affine_dump):
    files = [(p, None) for p in affine_dump.iterdir() if ".jit_affine." in p.name]
    choice = choose_replay_input(files)
    assert choice.input_kind == "snapshot" and ".snapshot." in choice.path
    assert choice.unoptimized.endswith("jit_affine.before_optimizations.hlo.pb")
    kinds = [k for _, k in choice.candidates]
    assert kinds[:3] == ["snapshot", "proto", "text-large-constants"]

    no_snapshot = [(p, n) for p, n in files if ".snapshot." not in p.name]
    assert choose_replay_input(no_snapshot).path.endswith("before_optimizations.hlo.pb")

    elided = choose_replay_input([(p, None) for p in (FIXTURES / "lookup_elided").glob("*.txt")])
    assert elided.input_kind == "text-elided-constants"
    assert elided.path.endswith("before_optimizations.txt")
    assert any("GARBAGE" in w for w in elided.warnings)

    with pytest.raises(InputError, match="no replayable dump"):
        choose_replay_input([(affine_dump / "x.ir-no-opt.ll", None)])


@pytest.mark.slow
def test_inputs_snapshot_needs_a_snapshot():
    text = FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt"
    with pytest.raises(InputError, match="holds no captured arguments"):
        replay_file(text, ReplayOptions(inputs="snapshot"))


@pytest.mark.slow
def test_fake_inputs_on_a_snapshot_skip_the_recorded_result(affine_dump):
    snapshot = dump_file(affine_dump, "jit_affine", r"snapshot\.-?\d+\.pb")
    result = replay_file(snapshot, ReplayOptions(inputs="fake"))
    assert result.arguments == "fake" and result.verdict == "ran" and result.compared_with == []


@pytest.mark.slow
def test_unavailable_platform_names_the_available_ones():
    text = FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt"
    with pytest.raises(EnvironmentProblem, match=r"platform 'cuda' is not available.*available: cpu"):
        replay_file(text, ReplayOptions(platform="cuda"))


@pytest.mark.slow
def test_result_round_trips_through_json(affine_dump):
    import json

    from xlarun.replay import ReplayResult

    snapshot = dump_file(affine_dump, "jit_affine", r"snapshot\.-?\d+\.pb")
    result = replay_file(snapshot, ReplayOptions(print_literals=True))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["verdict"] == "match" and data["exit_code"] == 0 and data["median_s"] > 0
    assert ReplayResult.from_dict(data) == result
    assert "[[" in data["outputs"][0]["literal"]
