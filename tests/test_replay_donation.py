"""Donated arguments and snapshots, end to end: a snapshot that recorded no result is never a mismatch.

``jax.jit(step, donate_argnums=0)``, as Flax/optax training loops write it, with ``--xla_dump_hlo_snapshots``: jaxlib
before 0.10 aborts the job after writing the first snapshot (which has arguments but no result); 0.10 and later run,
and record an empty tuple for the result. Either way replay compares with the module's before_optimizations dump on
the snapshot's arguments (or, with none beside it, a reference compile on CPU) and says so. Real dumps: the fixtures
under ``fixtures/hlo/snapshots`` and fresh ones from the compat venvs (see ``compat_support``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from tests.compat_support import require_compat, xlarun_env, xlarun_in
from xlarun.replay import ReplayOptions, replay_file
from xlarun.replay.sources import load_source

SNAPSHOTS = Path(__file__).parent / "fixtures" / "hlo" / "snapshots"
PROGRAM = SNAPSHOTS / "donated_step.py"
DUMP_FLAGS = "--xla_dump_hlo_snapshots --xla_dump_hlo_as_proto"
SIGABRT_EXIT = -6
OUTPUTS = ["f32[8,4]", "f32[4]", "f32[]"]


def _dump(python: str | Path, folder: Path) -> tuple[int, str, Path]:
    """Run the donated step under ``python`` with snapshots: (exit code, stderr, jit_step's first snapshot)."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={folder} {DUMP_FLAGS}", JAX_PLATFORMS="cpu")
    proc = subprocess.run([str(python), str(PROGRAM)], env=env, capture_output=True, text=True, timeout=300)
    snapshots = sorted(folder.glob("*.jit_step.snapshot.*.pb"))
    assert snapshots, proc.stderr[-2000:]
    return proc.returncode, proc.stderr, snapshots[0]


def test_a_snapshot_without_its_result_is_read_as_such():
    source = load_source(next((SNAPSHOTS / "jax-0.10.2").glob("*.snapshot.*.pb")))
    assert source.result is None and len(source.arguments or []) == 3
    assert any("recorded no result" in w and "donate_argnums" in w for w in source.warnings)
    np.testing.assert_array_equal(source.arguments[0], np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))


@pytest.mark.slow
@pytest.mark.parametrize("version", ["jax-0.4.30", "jax-0.10.2"])
def test_the_fixture_snapshots_match_their_unoptimized_module(version):
    [path] = (SNAPSHOTS / version).glob("*.snapshot.*.pb")
    result = replay_file(path, ReplayOptions())
    assert (result.verdict, result.exit_code) == ("match", 0), result.error or result.mismatches
    [against] = result.compared_with
    assert against == f"before_optimizations {path.name.split('.snapshot.')[0]}.before_optimizations.hlo.pb"
    assert result.arguments == "snapshot" and [o.type for o in result.outputs] == OUTPUTS
    assert any("recorded no result" in w and "compared with the before_optimizations" in w for w in result.warnings)


@pytest.mark.slow
def test_without_an_unoptimized_dump_a_reference_compile_is_the_comparison(tmp_path):
    [path] = (SNAPSHOTS / "jax-0.10.2").glob("*.snapshot.*.pb")
    alone = tmp_path / path.name
    shutil.copy(path, alone)
    result = replay_file(alone, ReplayOptions())
    assert (result.verdict, result.compared_with) == ("match", ["reference compile on cpu"])
    assert result.max_abs_error == 0


@pytest.mark.slow
def test_the_newest_jax_runs_and_replays_without_a_false_mismatch(tmp_path):
    code, _stderr, snapshot = _dump(sys.executable, tmp_path / "dump")
    assert code == 0
    result = replay_file(snapshot, ReplayOptions())
    assert (result.verdict, result.exit_code) == ("match", 0), result.mismatches
    assert result.compared_with[0].startswith("before_optimizations ")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["jax-0.4.30", "jax-0.7.2", "jax-0.8.3", "jax-0.12.0.1"])
def test_other_jax_versions_replay_their_donated_snapshot_to_a_match(key, tmp_path):
    """jaxlib 0.4.30 to 0.8.3 abort the job (SIGABRT) on the donated call, after writing its snapshot; 0.12 runs on."""
    python = require_compat(key)
    code, stderr, snapshot = _dump(python, tmp_path / "dump")
    if key == "jax-0.12.0.1":
        assert code == 0
    else:
        assert code == SIGABRT_EXIT and "donated buffer" in stderr
    proc = subprocess.run(
        xlarun_in(python, "replay", str(snapshot), "--json", "--store", str(tmp_path / "no-store")),
        env=xlarun_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(proc.stdout)
    assert (proc.returncode, data["verdict"]) == (0, "match"), data.get("error") or data.get("mismatches")
    assert data["compared_with"][0].startswith("before_optimizations ")
    assert [o["type"] for o in data["outputs"]] == OUTPUTS
