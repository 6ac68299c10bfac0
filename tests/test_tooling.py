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
