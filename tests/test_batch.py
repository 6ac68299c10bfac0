"""Batch runs over a matrix, for real on the local backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from xlarun.batch import run_batch
from xlarun.capture.spec_yaml import load_batch
from xlarun.store.facade import LocalStore

from .conftest import CONFIGS, write_spec
from .test_capture import TINY_JAX

# Marked per test: real JAX captures of every cell, Ctrl-C of a batch

TWO_SCALES = """name: scales
script: job.py
args: ["${matrix.scale}"]
matrix:
  scale: ["1.0", "2.0"]
"""
SCALED_JAX = """
import sys, jax, jax.numpy as jnp
scale = float(sys.argv[1])
f = jax.jit(lambda x: jnp.tanh(x * scale).sum())
print("value", float(f(jnp.ones((4, 4)))), flush=True)
if scale > 1.5:
    raise SystemExit(7)
"""


@pytest.mark.slow
def test_batch_runs_every_cell_in_parallel_and_compares(cli, tmp_path):
    spec = write_spec(
        tmp_path / "p",
        TWO_SCALES.replace('args: ["${matrix.scale}"]', 'args: ["${matrix.scale}", "ok"]'),
        SCALED_JAX.replace("if scale > 1.5:", "if len(sys.argv) < 3:"),
    )
    out = cli("batch", spec, "-j", "2", "--store", tmp_path / "s", "--json")
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert [c["values"] for c in data["cells"]] == [{"scale": "1.0"}, {"scale": "2.0"}]
    assert all(c["status"] == "succeeded" and c["modules"] >= 1 for c in data["cells"])
    # the scale is a constant in the HLO, so the two cells' main modules differ
    assert data["cells"][0]["main_fingerprint"] != data["cells"][1]["main_fingerprint"]
    listed = json.loads(cli("runs", "--batch", data["batch_id"][:8], "--store", tmp_path / "s", "--json").stdout)
    assert sorted(r["matrix"]["scale"] for r in listed) == ["1.0", "2.0"]
    assert {r["batch_id"] for r in listed} == {data["batch_id"]}


@pytest.mark.slow
def test_a_failing_cell_fails_the_batch_and_fail_fast_skips_the_rest(tmp_path):
    spec = write_spec(tmp_path / "p", TWO_SCALES.replace('["1.0", "2.0"]', '["2.0", "1.0"]'), SCALED_JAX)
    store = LocalStore.open(tmp_path / "s")
    result = run_batch(load_batch(spec), store, jobs=1, fail_fast=True)
    assert not result.ok
    assert [c.status for c in result.cells] == ["failed", "skipped"]
    assert result.cells[0].result.exit_code == 7
    assert len(store.run_ids()) == 1  # the failing cell is archived; the skipped one never ran


@pytest.mark.slow
def test_capture_of_a_matrix_spec_runs_the_batch(cli, tmp_path):
    out = cli("capture", CONFIGS / "matrix-flags.yaml", "--store", tmp_path / "s")
    assert out.exit_code == 0, out.stderr
    assert "fast_math=false" in out.stdout and "fast_math=true" in out.stdout
    assert "identical in every cell" in out.stdout


@pytest.mark.slow
def test_ctrl_c_stops_a_batch_and_archives_its_running_cells(tmp_path):
    waiting = TINY_JAX + "print('ready', flush=True)\nimport time\ntime.sleep(120)\n"
    spec = write_spec(tmp_path / "p", "name: w\nscript: job.py\nmatrix:\n  n: [1, 2]\n", waiting)
    env = dict(os.environ, XLARUN_STORE=str(tmp_path / "s"), PYTHONUNBUFFERED="1")
    # SIGINT at its default in the child, as in a terminal: the suite may run under nohup, where it is ignored
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "batch", str(spec), "-j", "2", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # jobs in a batch don't echo; wait until both have dumped something
    import time

    deadline = time.monotonic() + 90
    store_root = tmp_path / "s" / "staging"
    while time.monotonic() < deadline:
        logs = list(store_root.glob("*/stdout.log")) if store_root.exists() else []
        if len(logs) == 2 and all("ready" in p.read_text() for p in logs):
            break
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    runs = LocalStore.open(tmp_path / "s").index.runs()
    assert sorted(r.status for r in runs) == ["interrupted", "interrupted"]


@pytest.mark.slow
def test_batch_on_local_and_docker_cpu_gives_matching_fingerprints(cli, tmp_path, cpu_image, docker_client):
    out = cli("batch", CONFIGS / "matrix-backends.yaml", "-j", "2", "--store", tmp_path / "s", "--json")
    assert out.exit_code == 0, out.stderr + out.stdout
    cells = {c["values"]["backend"]: c for c in json.loads(out.stdout)["cells"]}
    assert set(cells) == {"local", "docker-cpu"}
    assert cells["local"]["main_module"] == cells["docker-cpu"]["main_module"] == "jit_train_step"
    assert cells["local"]["main_fingerprint"] == cells["docker-cpu"]["main_fingerprint"]
    store = LocalStore.open(tmp_path / "s")
    runs = {r.backend: r for r in store.index.runs()}
    assert set(runs) == {"local", "docker-cpu"}
    docker_manifest = store.manifest(runs["docker-cpu"].run_id)
    assert docker_manifest["backend_details"]["image"] == "xlarun-cpu:latest"
    assert docker_manifest["backend_details"]["image_id"].startswith("sha256:")
    assert docker_manifest["versions"]["jax"] == store.manifest(runs["local"].run_id)["versions"]["jax"]
    # the same modules, by fingerprint, on both backends
    prints = [{m.fingerprint for m in store.index.modules(r.run_id)} for r in runs.values()]
    assert prints[0] == prints[1]


def test_a_batch_exits_as_capture_would_for_its_cells():
    """A store it cannot write (every cell: exit 3, as capture), failures alike (their code), failures that differ
    (3 when one is the store's or a component's, else 1), a signal (its code)."""
    from xlarun.batch import BatchResult, CellOutcome
    from xlarun.errors import ExitCode

    def cells(*codes: ExitCode | None) -> list[CellOutcome]:
        return [
            CellOutcome(i, {"n": i}, state="error", error="why", error_exit=code)
            if code is not None
            else CellOutcome(i, {"n": i}, state="skipped")
            for i, code in enumerate(codes)
        ]

    read_only = BatchResult("b", cells(ExitCode.ENVIRONMENT, ExitCode.ENVIRONMENT))
    assert read_only.exit_code == 3 and cells(ExitCode.ENVIRONMENT)[0].exit_code == 3
    assert BatchResult("b", cells(ExitCode.TIMEOUT, None)).exit_code == 124  # the one that failed, fail-fast skipped the rest
    assert BatchResult("b", cells(ExitCode.TIMEOUT, ExitCode.FAILED)).exit_code == 1
    assert BatchResult("b", cells(ExitCode.FAILED, ExitCode.ENVIRONMENT)).exit_code == 3
    assert BatchResult("b", cells(ExitCode.FAILED), interrupted=True, signal="SIGTERM").exit_code == 143
    assert BatchResult("b", []).exit_code == 0
