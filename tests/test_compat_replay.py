"""The built-in replay engine on three jaxlib ends: the oldest supported, one between, the newest.

Each venv (see ``compat_support``) dumps a small program with its own jax, then this checkout's
xlarun replays, under that venv's python, a text dump, an ``.hlo.pb``, an optimized dump (the
deoptimizing route) and a 64-bit snapshot, each to a match; ``doctor`` proves the engine there.
Modules dumped by jax 0.10.2 (the checked-in fixtures) replay on the oldest jaxlib too, and the
oldest jax's dumps on the newest jaxlib. Each call imports jax (1-3 s), so the set stays small.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.compat_support import compat_python, require_compat, xlarun_env, xlarun_in

# Marked per test: replays dumps of other framework versions

OLDEST, MIDDLE, NEWEST = "jax-0.4.30", "jax-0.7.2", "jax-0.12.0.1"
FIXTURES = Path(__file__).parent / "fixtures" / "hlo"

PROGRAM = """
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np

@jax.jit
def step(w, x):
    h = jnp.tanh(x @ w)
    return jnp.sum(h * h, axis=1), h.max()

@jax.jit
def wide(a, b):
    return (a * 3 + b.astype(jnp.int64)).sum(), jnp.cumsum(b * 0.5), a.astype(jnp.float64) / 7.0

step(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), np.linspace(0, 2, 24, dtype=np.float32).reshape(3, 8))
wide(np.arange(6, dtype=np.int64) * 1_000_000_007, np.linspace(0, 1, 6, dtype=np.float64))
"""
DUMP_FLAGS = "--xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_dump_hlo_snapshots"


def _dump(python: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.py").write_text(PROGRAM)
    env = xlarun_env()
    env["XLA_FLAGS"] = f"--xla_dump_to={folder / 'dump'} {DUMP_FLAGS}"
    subprocess.run([str(python), str(folder / "program.py")], env=env, check=True, capture_output=True, timeout=300)
    return folder / "dump"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """key -> the folder that key's jax dumped PROGRAM into (made on first use)."""
    made: dict[str, Path] = {}

    def dump_of(key: str) -> Path:
        if key not in made:
            made[key] = _dump(require_compat(key), tmp_path_factory.mktemp(key))
        return made[key]

    return dump_of


def _one(folder: Path, pattern: str) -> Path:
    [found] = sorted(folder.glob(pattern))
    return found


def _replay(python: Path, path: Path, *extra: str) -> dict:
    proc = subprocess.run(
        xlarun_in(python, "replay", str(path), "--json", "--store", str(path.parent / "no-store"), *extra),
        env=xlarun_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == data["exit_code"], proc.stderr[-2000:]
    return data


def _assert_match(data: dict, *against: str) -> None:
    assert (data["verdict"], data["exit_code"]) == ("match", 0), data.get("error") or data.get("mismatches")
    assert data["compared_with"] == list(against)


@pytest.mark.slow
@pytest.mark.parametrize("key", [OLDEST, MIDDLE, NEWEST])
def test_text_proto_and_optimized_dumps_replay_to_a_match(key, dumps):
    python, folder = require_compat(key), dumps(key)
    text = _replay(python, _one(folder, "*.jit_step.before_optimizations.txt"), "--reference-platform", "cpu")
    _assert_match(text, "platform cpu")
    assert text["input_kind"].startswith("text") and text["route"] is None
    proto = _replay(python, _one(folder, "*.jit_step.before_optimizations.hlo.pb"), "--reference-platform", "cpu")
    _assert_match(proto, "platform cpu")
    assert proto["input_kind"] == "proto" and [o["type"] for o in proto["outputs"]] == ["f32[3]", "f32[]"]
    optimized = _replay(python, _one(folder, "*.jit_step.cpu_after_optimizations.txt"), "--reference-platform", "cpu")
    _assert_match(optimized, "platform cpu")
    assert optimized["route"].startswith("deoptimized") and optimized["fell_back_to"] is None


@pytest.mark.slow
@pytest.mark.parametrize("key", [OLDEST, MIDDLE, NEWEST])
def test_a_64_bit_snapshot_replays_to_a_match(key, dumps):
    python, folder = require_compat(key), dumps(key)
    data = _replay(python, _one(folder, "*.jit_wide.snapshot.*.pb"))
    _assert_match(data, "snapshot result")
    assert data["arguments"] == "snapshot"
    assert [o["type"] for o in data["outputs"]] == ["s64[]", "f64[6]", "f64[6]"]


@pytest.mark.slow
@pytest.mark.parametrize("key", [OLDEST, MIDDLE, NEWEST])
def test_doctor_proves_the_engine(key):
    python = require_compat(key)
    proc = subprocess.run(
        xlarun_in(python, "doctor", "--no-docker", "--json"), env=xlarun_env(), capture_output=True, text=True, timeout=120
    )
    engine = {c["name"]: c for c in json.loads(proc.stdout)}["built-in replay engine (PJRT)"]
    assert engine["ok"], engine
    route = "xla_computation_to_mlir_module" if key == OLDEST else "hlo_to_stablehlo"
    assert "replayed a test module" in engine["detail"] and f"via {route}" in engine["detail"]


@pytest.mark.slow
def test_modules_of_a_newer_jax_replay_on_the_oldest_jaxlib():
    """jax 0.10.2's dumps: wide instruction ids and stack-frame tables the 0.4.30 parser refuses as they are."""
    python = require_compat(OLDEST)
    proto = _replay(
        python, FIXTURES / "mlp" / "module_0014.jit_train_step.before_optimizations.hlo.pb", "--reference-platform", "cpu"
    )
    _assert_match(proto, "platform cpu")
    text = _replay(python, FIXTURES / "fp" / "module_0004.jit_f.cpu_after_optimizations.txt", "--reference-platform", "cpu")
    _assert_match(text, "platform cpu")


@pytest.mark.slow
def test_the_oldest_jax_dumps_replay_on_the_newest_jaxlib(dumps):
    python = require_compat(NEWEST)
    if compat_python(OLDEST) is None:
        require_compat(OLDEST)  # skips here, fails under CI
    data = _replay(python, _one(dumps(OLDEST), "*.jit_wide.snapshot.*.pb"))
    _assert_match(data, "snapshot result")
