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
    assert checks["built-in replay engine (PJRT)"]["ok"] and "cpu" in checks["built-in replay engine (PJRT)"]["detail"]
    assert checks["graphviz dot (render, report)"]["ok"] == (shutil.which("dot") is not None)


def test_a_runner_given_by_variable_is_found(cli, tmp_path):
    fake = tmp_path / "run_hlo_module"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    out = cli("doctor", "--no-docker", "--json", env={"XLARUN_RUN_HLO_MODULE": str(fake), "PATH": "/usr/bin:/bin"})
    checks = by_name(json.loads(out.stdout))
    assert checks["run_hlo_module (replay --engine run_hlo_module)"] == {
        "name": "run_hlo_module (replay --engine run_hlo_module)", "ok": True, "detail": str(fake), "fix": None, "essential": False,
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
    monkeypatch.setattr(doctor_module, "check_python_packages", lambda: [doctor_module.Check("a framework to capture", False, "none installed", "pip install 'xlarun[jax]'", essential=True)])
    out = cli("doctor", "--no-docker")
    assert out.exit_code == 3
    assert "MISSING" in out.stdout and "pip install 'xlarun[jax]'" in out.stdout
