"""doctor: real checks of this machine, with fixes for what is missing."""

from __future__ import annotations

import json
import shutil

import pytest

from xlarun import doctor as doctor_module


def by_name(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks}


def test_doctor_reports_the_installed_frameworks_and_engine(cli):
    jax = pytest.importorskip("jax")
    out = cli("doctor", "--no-docker", "--json")
    assert out.exit_code == 0
    checks = by_name(json.loads(out.stdout))
    assert checks["jax"]["ok"] and checks["jax"]["detail"] == jax.__version__
    engine = checks["built-in replay engine (PJRT)"]
    assert engine["ok"] and engine["detail"].startswith("replayed a test module on cpu") and "match" in engine["detail"]
    assert engine["detail"].endswith("platforms: cpu") or "platforms: cpu," in engine["detail"]
    assert checks["graphviz dot (render, report)"]["ok"] == (shutil.which("dot") is not None)


def test_a_runner_given_by_variable_is_found(cli, tmp_path):
    fake = tmp_path / "run_hlo_module"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    out = cli("doctor", "--no-docker", "--json", env={"XLARUN_RUN_HLO_MODULE": str(fake), "PATH": "/usr/bin:/bin"})
    checks = by_name(json.loads(out.stdout))
    assert checks["run_hlo_module (replay --engine run_hlo_module)"] == {
        "name": "run_hlo_module (replay --engine run_hlo_module)",
        "ok": True,
        "detail": str(fake),
        "fix": None,
        "essential": False,
    }
    assert not checks["hlo_runner_main (replay --engine hlo_runner_main)"]["ok"]
    assert "bazel build //xla/tools:hlo_runner_main" in checks["hlo_runner_main (replay --engine hlo_runner_main)"]["fix"]


def test_a_dead_docker_daemon_is_reported_with_a_fix(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    [daemon] = doctor_module.check_docker()
    assert not daemon.ok
    assert "cannot reach unix:///nonexistent/docker.sock" in daemon.detail
    assert "DOCKER_HOST" in daemon.fix


def test_missing_essentials_exit_3(cli, monkeypatch):
    monkeypatch.setattr(
        doctor_module,
        "check_python_packages",
        lambda: [
            doctor_module.Check("a framework to capture", False, "none installed", "pip install 'xlarun[jax]'", essential=True)
        ],
    )
    out = cli("doctor", "--no-docker")
    assert out.exit_code == 3
    assert "MISSING" in out.stdout and "pip install 'xlarun[jax]'" in out.stdout


def test_the_engine_proof_replays_64_bit_values_against_numpy():
    pytest.importorskip("jax")
    from xlarun.replay.engine import prove_engine

    proof = prove_engine("cpu")
    assert proof.ok, proof.detail
    assert proof.route == "hlo_to_stablehlo" and proof.compile_s > 0 and proof.run_s > 0


def test_an_engine_that_cannot_replay_is_reported_with_the_reason(monkeypatch):
    """What doctor said "ok" to before: names present, but a replay with 64-bit arguments failed (jax 0.6/0.7)."""
    pytest.importorskip("jax")
    from xlarun.errors import EnvironmentProblem
    from xlarun.replay import pjrt

    def no_switch():
        raise EnvironmentProblem("jax 0.7.2 has neither jax.enable_x64 nor jax.experimental.enable_x64")

    monkeypatch.setattr(pjrt, "_x64_switch", no_switch)
    check = doctor_module.check_replay_engine()
    assert not check.ok and check.detail == "jax 0.7.2 has neither jax.enable_x64 nor jax.experimental.enable_x64"
    assert "0.4.30 to 0.12" in check.fix


def test_a_wrong_answer_is_not_ok(monkeypatch):
    pytest.importorskip("jax")
    from xlarun.replay import pjrt

    real = pjrt.CompiledModule.download
    monkeypatch.setattr(pjrt.CompiledModule, "download", staticmethod(lambda outputs: [o * 0 for o in real(outputs)]))
    check = doctor_module.check_replay_engine()
    assert not check.ok and check.detail.startswith("the test module ran but did not match numpy")
