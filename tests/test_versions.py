"""The job interpreter's package versions, kept per install: asked once, asked again when a package is installed,
upgraded or removed where the interpreter imports from, or when it is another interpreter or PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from xlarun import __version__
from xlarun.capture import versions as versions_module
from xlarun.capture.versions import VersionCache, probe_versions


@pytest.fixture
def probes(monkeypatch):
    """Counts the interpreters the cache starts (the real probe still runs)."""
    started: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(argv, *args, **kwargs):
        started.append(list(argv))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    return started


def _settled(folder):
    """Give ``folder`` an mtime well in the past, as an install made yesterday has."""
    past = time.time() - 3600
    os.utime(folder, (past, past))


def _install(folder, name: str, version: str) -> None:
    """What pip leaves for a distribution: a ``NAME-VERSION.dist-info`` folder with its METADATA."""
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_probe_reads_the_interpreters_packages_and_where_it_read_them():
    versions, folders = probe_versions(sys.executable)
    assert versions["xlarun"] == __version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    import numpy

    assert versions["numpy"] == numpy.__version__
    assert folders and all(os.path.isdir(folder) for folder in folders)
    assert any(folder.endswith("site-packages") for folder in folders)


def test_a_second_capture_asks_no_interpreter(tmp_path, probes):
    cache = VersionCache(tmp_path / "cache")
    first = cache.versions(sys.executable)
    assert len(probes) == 1 and probes[0][:2] == [sys.executable, "-c"]
    second = VersionCache(tmp_path / "cache").versions(sys.executable)  # another process would read the same file
    assert second == first and len(probes) == 1
    assert second["xlarun"] == __version__


def test_an_install_upgrade_or_removal_is_seen(tmp_path, probes):
    site = tmp_path / "site"
    site.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    _settled(site)
    cache = VersionCache(tmp_path / "cache")
    import numpy

    assert cache.versions(sys.executable, env)["numpy"] == numpy.__version__
    assert cache.versions(sys.executable, env)["numpy"] == numpy.__version__ and len(probes) == 1  # kept

    _install(site, "numpy", "99.0")  # first on the path: importlib.metadata finds it before the real one
    assert cache.versions(sys.executable, env)["numpy"] == "99.0" and len(probes) == 2
    _settled(site)
    assert cache.versions(sys.executable, env)["numpy"] == "99.0" and len(probes) == 3  # just changed: not kept
    assert cache.versions(sys.executable, env)["numpy"] == "99.0" and len(probes) == 3  # settled: kept

    (site / "numpy-99.0.dist-info" / "METADATA").unlink()
    (site / "numpy-99.0.dist-info").rmdir()
    _install(site, "numpy", "100.1")
    assert cache.versions(sys.executable, env)["numpy"] == "100.1"
    (site / "numpy-100.1.dist-info" / "METADATA").unlink()
    (site / "numpy-100.1.dist-info").rmdir()
    assert cache.versions(sys.executable, env)["numpy"] == numpy.__version__


def test_another_pythonpath_or_interpreter_is_asked(tmp_path, probes):
    cache = VersionCache(tmp_path / "cache")
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "jax", "0.0.1")
    _settled(site)
    plain = cache.versions(sys.executable)
    with_path = cache.versions(sys.executable, {**os.environ, "PYTHONPATH": str(site)})
    assert with_path["jax"] == "0.0.1" and plain.get("jax") != "0.0.1" and len(probes) == 2
    copy = tmp_path / "bin" / "python3"
    copy.parent.mkdir()
    copy.symlink_to(os.path.realpath(sys.executable))  # the same file under another name: another install
    cache.versions(str(copy))
    assert len(probes) == 3


def test_a_failing_interpreter_is_reported_and_not_kept(tmp_path, probes):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    cache = VersionCache(tmp_path / "cache")
    for _ in range(2):
        got = cache.versions(str(broken))
        assert got["probe_error"] == f"could not run {broken} to read package versions" and got["xlarun"] == __version__
    assert len(probes) == 2  # asked each time
    missing = cache.versions(str(tmp_path / "nowhere" / "python"))
    assert "probe_error" in missing


def test_a_damaged_entry_is_probed_again(tmp_path, probes):
    cache = VersionCache(tmp_path / "cache")
    cache.versions(sys.executable)
    (entry,) = (tmp_path / "cache").iterdir()
    entry.write_text("{not json")
    assert cache.versions(sys.executable)["xlarun"] == __version__ and len(probes) == 2
    assert versions_module.CACHE_VERSION >= 1
