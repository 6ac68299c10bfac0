"""The tools that keep the code as ARCHITECTURE.md says it is: ruff (lint and format) and mypy over src/, run as a
developer runs them. (import-linter: tests/test_architecture.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    path = BIN / tool
    if not path.exists():
        pytest.fail(f"{tool} is not installed: `bash scripts/setup.sh --dev` installs it")
    return subprocess.run([str(path), *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_to_fix():
    proc = _run("ruff", "check", "--no-cache", "src", "tests", "bench", "scripts")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-1000:]


def test_the_code_is_formatted_as_ruff_formats_it():
    proc = _run("ruff", "format", "--check", "--no-cache", "src", "tests", "bench", "scripts")
    assert proc.returncode == 0, "run `.venv/bin/ruff format src tests bench scripts`:\n" + proc.stdout[-4000:]


@pytest.mark.slow
def test_mypy_finds_no_type_errors_in_src():
    proc = _run("mypy", "--no-incremental")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-1000:]
    assert "Success: no issues found" in proc.stdout


def test_the_coverage_floor_only_rises():
    """.ci/coverage-floor is what scripts/test.sh holds the whole suite to; no commit may lower it."""
    floor = REPO / ".ci" / "coverage-floor"
    history = subprocess.run(
        ["git", "log", "--format=%H", "--follow", "--", ".ci/coverage-floor"], cwd=REPO, capture_output=True, text=True
    )
    values = [int(floor.read_text())]
    for commit in history.stdout.split():  # newest first
        shown = subprocess.run(["git", "show", f"{commit}:.ci/coverage-floor"], cwd=REPO, capture_output=True, text=True)
        if shown.returncode == 0:
            values.append(int(shown.stdout))
    assert values == sorted(values, reverse=True), f"the floor was lowered: {values} (newest first)"
    assert 0 < values[0] <= 100


def test_the_slow_tier_is_marked_per_test():
    """A module-wide slow mark would put its quick tests in the slow tier too: each slow test says so itself.
    The corpus sweeps are the exception (every test of theirs is a sweep of XLA's corpus)."""
    import re

    sweeps = {"test_hlo_corpus.py", "test_replay_corpus.py"}
    whole_modules = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests").rglob("test_*.py"))
        if path.name not in sweeps and re.search(r"^pytestmark\b[^\n]*slow", path.read_text(encoding="utf-8"), re.M)
    ]
    assert whole_modules == []


def test_a_skip_under_ci_is_a_failure_unless_the_test_does_not_apply_to_the_host(tmp_path):
    """CI installs everything the suite needs, so there a skip for something missing fails (with its reason);
    off CI it stays a skip, and a test that does not apply to the host (it has IPUs) skips everywhere."""
    import os

    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_three.py").write_text(
        "import pytest\n"
        "def test_missing():\n    pytest.skip('needs frob')\n"
        "@pytest.mark.skipif(True, reason='needs grault')\ndef test_marked():\n    pass\n"
        "def test_not_here():\n    pytest.skip('this host has IPUs')\n"
    )

    def run(ci: str) -> str:
        env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:cov", str(tmp_path)]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120).stdout

    on_ci, off_ci = run("true"), run("")
    assert "FAILED test_three.py::test_missing - skipped under CI=true" in on_ci and "needs frob" in on_ci
    assert "ERROR test_three.py::test_marked - skipped under CI=true" in on_ci and "needs grault" in on_ci
    assert "SKIPPED [1] test_three.py:8: this host has IPUs" in on_ci
    assert "3 skipped" in off_ci and "failed" not in off_ci
