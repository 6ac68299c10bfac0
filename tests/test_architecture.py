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
    assert "the replay package's layers KEPT" in proc.stdout


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


LAYERED = [
    "store",
    "capture",
    "hlo",
    "replay",
    "bisect",
    "executors",
    "navigate",
    "render",
    "report",
    "api",
    "share",
    "see",
    "present",
]


def test_every_package_but_the_commands_has_a_layers_contract():
    """The commands are leaves that only call down; every other package states the order of its modules."""
    packages = {p.name for p in (REPO / "src" / "xlarun").iterdir() if (p / "__init__.py").exists()}
    assert packages - {"commands"} == set(LAYERED), "add a layers contract for the new package to pyproject.toml"


@pytest.mark.parametrize("package", LAYERED)
def test_every_module_of_a_layered_package_is_in_its_layers(package):
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in config if c.get("containers") == [f"xlarun.{package}"]]
    layered = {name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}
    folder = REPO / "src" / "xlarun" / package
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == layered, f"pyproject.toml's contract for {package}/ and its modules differ"


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(REPO)): n for p in (REPO / "src").rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, "split these along a seam a reader would name"


def test_no_two_modules_share_a_name_except_a_command_and_its_library_module():
    """`commands/batch.py` drives `batch.py`; any other repeated name has two meanings (three worker.py were)."""
    from collections import defaultdict

    where = defaultdict(list)
    for path in (REPO / "src" / "xlarun").rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            where[path.stem].append(path.relative_to(REPO / "src" / "xlarun").as_posix())
    shared = {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}
    mirrored = {name for name, paths in shared.items() if len(paths) == 2 and f"commands/{name}.py" in paths}
    assert {name: paths for name, paths in shared.items() if name not in mirrored} == {}
