"""The layers of ARCHITECTURE.md hold: import-linter's contracts in pyproject.toml, run as the CLI runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    found = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(found).exists():
        pytest.fail("lint-imports is not installed: `bash scripts/setup.sh --dev` installs import-linter")
    return found


def test_every_module_imports_only_from_the_layers_below_it():
    proc = subprocess.run([_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "xlarun's layers KEPT" in proc.stdout and "the hlo package's layers KEPT" in proc.stdout


def test_every_module_is_in_a_layer():
    """A new top-level module must be placed in a layer (else the contract says nothing about it)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {
        name.strip()
        for contract in config
        if "containers" not in contract
        for layer in contract["layers"]
        for name in layer.replace(":", "|").split("|")
    }
    package = REPO / "src" / "xlarun"
    modules = {f"xlarun.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    modules |= {f"xlarun.{p.name}" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules - layered == set(), "add these to a layer in pyproject.toml and ARCHITECTURE.md"
    assert layered - modules == set(), "these layers name modules that no longer exist"
