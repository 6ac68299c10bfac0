"""Find the per-version framework venvs that scripts/compat.py builds (jax 0.4.30 ... 0.12, TF 2.16 ..., torch_xla).

They live outside the clone, cached between runs: ``$XLARUN_COMPAT_DIR`` or ``~/.cache/xlarun/compat/<key>``
(keys such as ``jax-0.4.30``, ``tf-2.16.2``, ``torch_xla-2.9.0``). A venv counts only once its marker file
``.xlarun-compat-ok`` exists (written last by the builder, so a half-built venv is never used). The home folder
is taken from the password database, not ``XDG_CACHE_HOME``, which the test suite points at a temporary folder.

Each venv holds the framework and xlarun's dependencies but not xlarun itself: run xlarun there as
``VENV/bin/python -m xlarun`` with ``PYTHONPATH=<repo>/src`` (see :func:`xlarun_in`).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MARKER = ".xlarun-compat-ok"


def compat_root() -> Path:
    explicit = os.environ.get("XLARUN_COMPAT_DIR")
    if explicit:
        return Path(explicit)
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "xlarun" / "compat"


def compat_python(key: str) -> Path | None:
    """The venv's python for ``key`` when that venv is complete, else None."""
    venv = compat_root() / key
    python = venv / "bin" / "python"
    return python if (venv / MARKER).is_file() and python.exists() else None


def require_compat(key: str) -> Path:
    """The venv's python; a skip where it is missing, but a failure under CI (``CI=true``), where the
    test command builds it first and a missing venv means the set-up broke."""
    python = compat_python(key)
    if python is None:
        message = f"compat venv {key} missing under {compat_root()} (build it: .venv/bin/python scripts/compat.py venvs {key})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python


def xlarun_in(python: Path, *args: str) -> list[str]:
    """argv that runs this checkout's xlarun under another venv's python (pass :func:`xlarun_env` too)."""
    return [str(python), "-m", "xlarun", *args]


def xlarun_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
