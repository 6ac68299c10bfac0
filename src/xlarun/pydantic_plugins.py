"""The ``xlarun`` program builds its models without pydantic's plugin discovery.

When pydantic builds its first model class it looks for plugins: it imports ``importlib.metadata`` and reads the
entry points of every installed distribution (measured on this project's environment of ~190 packages: 26 ms of a
capture's CPU, a tenth of its fixed cost). xlarun's own process runs no user code (jobs run in their own processes)
and no plugin observes its models, so :func:`skip_plugin_discovery` lets the console script skip that search.

It is only called by the program itself (``xlarun.__main__``), never on import of the library: a notebook or
script that imports xlarun keeps pydantic's plugins for its own models. It does nothing when pydantic has already
looked (the loader module is imported) or when ``PYDANTIC_DISABLE_PLUGINS`` is set (pydantic's own switch, which
the user then holds). Anything of pydantic's loader other than ``get_plugins`` is read from the real module, loaded
under another name on first use, so a pydantic that asks more of its loader still gets it.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

LOADER = "pydantic.plugin._loader"


class _NoPluginLoader(types.ModuleType):
    """Stands for pydantic's plugin loader: no plugins; every other name from the real loader."""

    def __init__(self) -> None:
        super().__init__(LOADER, "pydantic's plugin loader, without plugin discovery (xlarun.pydantic_plugins)")
        self._real: types.ModuleType | None = None

    @staticmethod
    def get_plugins() -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_real":
            raise AttributeError(name)
        if self._real is None:
            self._real = _load_real_loader()
        return getattr(self._real, name)


def _load_real_loader() -> types.ModuleType:
    import importlib.machinery
    import importlib.util

    import pydantic.plugin

    found = importlib.machinery.PathFinder.find_spec("_loader", list(pydantic.plugin.__path__))
    spec = found and found.origin and importlib.util.spec_from_file_location(f"{LOADER}_real", found.origin)
    if not spec or spec.loader is None:
        raise ImportError(f"cannot find {LOADER}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def skip_plugin_discovery() -> bool:
    """Put :class:`_NoPluginLoader` in pydantic's loader's place unless pydantic's own switch is set or the
    loader is already imported; says whether it did."""
    if LOADER in sys.modules or os.environ.get("PYDANTIC_DISABLE_PLUGINS") is not None:
        return False
    sys.modules[LOADER] = _NoPluginLoader()
    return True
