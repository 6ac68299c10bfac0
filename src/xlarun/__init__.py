"""xlarun: capture, archive, index and replay XLA dumps.

The Python front door (see the README's "From Python")::

    import xlarun
    store = xlarun.open_store()              # ./.xlarun, or $XLARUN_STORE
    run = xlarun.capture("configs/jax-cpu.yaml", store)
    step = store.module("train_step")        # a module REF, as the CLI takes it
    step.replay()

    import xlarun.jax                        # in-process capture of one jitted function
    run = xlarun.jax.capture(train_step, params, x, y, 0.1)

Names are loaded on first use, so ``import xlarun`` (and the ``xlarun`` command's start-up) stays cheap.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms): `import xlarun` stays cheap

__version__ = "0.1.0"

#: The public API; each name is loaded from its module on first use.
_API = {
    "open_store": "api", "capture": "api", "batch": "api",
    "Store": "api", "Run": "api", "RunList": "api", "Module": "api", "ModuleList": "api", "Found": "api",
    "Diff": "api", "Graph": "api", "Replay": "api", "Bisection": "api", "Batch": "api",
    "XlarunError": "errors", "ExitCode": "errors", "record_arguments": "replay.recorded_arguments",
}  # fmt: skip

__all__ = sorted([*_API, "jax"])

if TYPE_CHECKING:
    from typing import Any

    from xlarun import jax
    from xlarun.api import (
        Batch,
        Bisection,
        Diff,
        Found,
        Graph,
        Module,
        ModuleList,
        Replay,
        Run,
        RunList,
        Store,
        batch,
        capture,
        open_store,
    )
    from xlarun.errors import ExitCode, XlarunError
    from xlarun.replay.recorded_arguments import record_arguments


def __getattr__(name: str) -> Any:
    if name in _API:
        value = getattr(import_module(f".{_API[name]}", __name__), name)
        globals()[name] = value
        return value
    if name == "jax":
        return import_module(".jax", __name__)
    raise AttributeError(f"module 'xlarun' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """Keeps ``xlarun.capture`` and ``xlarun.batch`` the API's functions: importing the package and module of the
    same names (``from xlarun.capture.launch import ...``) would otherwise replace them with those modules."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("capture", "batch") and isinstance(value, types.ModuleType):
            return  # the submodule stays reachable through sys.modules and `from xlarun.capture import ...`
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
