"""Every third-party module xlarun imports is declared in pyproject.toml (core or the extra that needs it)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
#: import name -> distribution name, where they differ
DISTRIBUTION = {
    "botocore": "boto3",  # comes with boto3 (the remote extra)
    "yaml": "pyyaml",
    "docker": "docker",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "ray": "ray",
    "tensorflow": "tensorflow-cpu",
}
#: imported only inside a guard that turns their absence into a clear message naming the extra
OPTIONAL = {
    "jax",
    "jaxlib",
    "ray",
    "tensorflow",
    "torch",
    "torch_xla",
    "model_explorer",
    "IPython",
    "playwright",
    "boto3",
    "botocore",
}


def _top_level_imports() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "xlarun").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n != "xlarun" and n not in sys.stdlib_module_names and n != "__future__"}


def test_every_imported_third_party_module_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {Requirement(d).name.lower() for d in project["dependencies"]}
    extras = {Requirement(d).name.lower() for deps in project["optional-dependencies"].values() for d in deps}
    imported = _top_level_imports()
    undeclared = {
        n
        for n in imported - OPTIONAL
        if DISTRIBUTION.get(n, n).lower().replace("_", "-") not in {d.replace("_", "-") for d in declared}
    }
    assert undeclared == set(), "declare these in pyproject.toml's dependencies"
    optional_undeclared = {n for n in imported & OPTIONAL if DISTRIBUTION.get(n, n).lower() not in extras | declared}
    # PyTorch/XLA is deprecated upstream: kept working, never declared; IPython comes with Jupyter itself
    assert optional_undeclared <= {"torch", "torch_xla", "IPython"}, optional_undeclared
