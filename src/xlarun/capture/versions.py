"""The package versions a run's manifest records, read once per interpreter install and then kept.

Reading them means starting the job's interpreter with ``importlib.metadata`` (:func:`probe_versions`,
some 60 ms of CPU), which every capture paid though the answer changes only when packages are
installed or removed. :class:`VersionCache` keeps the answer keyed by the interpreter (its path, size
and mtime) and ``PYTHONPATH``, and checks it against the folders the interpreter imports from: the
probe names them, and installing, upgrading or removing a package adds or removes a ``*.dist-info``
folder there, which changes that folder's mtime. Any change, and the interpreter is asked again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from xlarun import __version__
from xlarun.capture.cache_entries import entry_path, read_entry, write_entry

#: Packages whose versions are recorded (read with importlib.metadata by the job's own interpreter).
VERSIONED_PACKAGES = (
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "tensorflow",
    "tensorflow-cpu",
    "tf-keras",
    "torch",
    "torch_xla",
    "numpy",
)
#: Bump when what is recorded changes (the probe's packages, the entry's layout): older entries are then ignored.
CACHE_VERSION = 1
#: A folder changed this recently when probed may be changing still: its answer is not kept.
_SETTLED_NS = 2_000_000_000

# Runs in the job's interpreter: package versions without importing the frameworks (fast), and the folders
# ``importlib.metadata`` read them from (its ``sys.path`` folders that exist), which the cache checks.
_PROBE = """
import json, os, sys, platform
from importlib import metadata
out = {"python": platform.python_version(), "python_executable": sys.executable}
for name in %r:
    try:
        out[name] = metadata.version(name)
    except Exception:
        pass
print(json.dumps({"versions": out, "folders": [p for p in sys.path if p and os.path.isdir(p)]}))
"""


def probe_versions(
    python: str, env: Mapping[str, str] | None = None, timeout_s: float = 30
) -> tuple[dict[str, str], list[str] | None]:
    """Versions of Python and the ML packages as ``python`` sees them (``xlarun``'s own among them), and the
    folders it read them from (None when the probe failed: then ``probe_error`` says so among the versions)."""
    import subprocess

    versions = {"xlarun": __version__}
    try:
        out = subprocess.run(
            [python, "-c", _PROBE % (VERSIONED_PACKAGES,)],
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if out.returncode == 0:
            answer = json.loads(out.stdout.strip().splitlines()[-1])
            versions.update(answer["versions"])
            return versions, [str(folder) for folder in answer["folders"]]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError, TypeError):
        pass
    versions["probe_error"] = f"could not run {python} to read package versions"
    return versions, None


def _folder_stamps(folders: list[str]) -> dict[str, int] | None:
    """Each folder's mtime (ns); None when one is gone."""
    try:
        return {folder: os.stat(folder).st_mtime_ns for folder in folders}
    except OSError:
        return None


class VersionCache:
    """Package versions per interpreter install, one small JSON file each (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)

    @classmethod
    def default(cls) -> VersionCache:
        """The cache under xlarun's cache folder (``$XDG_CACHE_HOME/xlarun`` or ``~/.cache/xlarun``)."""
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlarun"
        return cls(root / "versions")

    def versions(self, python: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """What :func:`probe_versions` says of ``python``: from the cache when the interpreter and the folders it
        imports from are as they were, else probed (and kept when the probe worked)."""
        env = os.environ if env is None else env
        key = self._key(python, env)
        if key is None:
            return probe_versions(python, env)[0]
        entry = entry_path(self.folder, key)
        stored = read_entry(entry, key)
        try:
            if stored is not None and stored.get("folders") == _folder_stamps(list(stored["folders"])):
                return {**stored["versions"], "xlarun": __version__}
        except (KeyError, TypeError, AttributeError, ValueError):  # a damaged entry: probed again
            pass
        started = time.time_ns()
        versions, folders = probe_versions(python, env)
        stamps = _folder_stamps(folders) if folders is not None else None
        # a folder changed since shortly before the probe (an install while it read; mtimes tick coarsely) is not
        # trusted: probed again next time
        if stamps is not None and all(stamp < started - _SETTLED_NS for stamp in stamps.values()):
            write_entry(entry, {"key": key, "folders": stamps, "versions": versions})
        return versions

    @staticmethod
    def _key(python: str, env: Mapping[str, str]) -> str | None:
        """What names one interpreter install: its path and file (size, mtime), ``PYTHONPATH`` and friends."""
        try:
            found = python if os.sep in python else _which(python)
            if found is None:
                return None
            real = os.path.realpath(found)
            info = os.stat(real)
        except OSError:
            return None
        settings = [env.get(name, "") for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE")]
        return "\0".join(map(str, (CACHE_VERSION, os.path.abspath(found), real, info.st_size, info.st_mtime_ns, *settings)))


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)
