"""Fixtures for tests that need a real Docker engine; import them into conftest.py or a test module.

- ``docker_engine`` (session): a client; starts dockerd with scripts/start-dockerd.sh when running as
  root and no daemon answers, else skips with the reason.
- ``docker_client``: the same client, and after the test no container this process started through
  xlarun (label ``xlarun.owner-pid``) may remain: leftovers are removed, then the test fails. Other
  processes' containers (a second test session, a user's capture) are left alone.
- ``base_image`` (session): the local base (``xlarun-base:bookworm``, debootstrap + docker import via
  scripts/make-base-image.sh; the rootfs is cached under ~/.cache/xlarun).
- ``cpu_image`` (session): ``xlarun-cpu:latest`` built from containers/cpu on the base image with the
  host's JAX/TF versions; rebuilt only when the Dockerfile or the versions changed (label hash).

Environment: XLARUN_TEST_BASE_IMAGE, XLARUN_TEST_CPU_IMAGE override the tags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlarun.capture import images
from xlarun.capture.backends.docker import LABEL_OWNER
from xlarun.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("XLARUN_TEST_BASE_IMAGE", "xlarun-base:bookworm")
CPU_IMAGE = os.environ.get("XLARUN_TEST_CPU_IMAGE", "xlarun-cpu:latest")
#: The rootfs cache of scripts/make-base-image.sh, fixed at import: conftest points XDG_CACHE_HOME
#: at a temporary folder per test, which would throw the 70 s debootstrap away every session.
CACHE_DIR = os.environ.get("XLARUN_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlarun")
#: Seconds spent making the images this session: {"base": s, "cpu": s}; absent when they were current.
BUILD_SECONDS: dict[str, float] = {}


def _unavailable(reason: str):
    # in CI (root, dockerd installed by .ci/run) the engine must work: a skip there would hide a broken set-up
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs a Docker engine: {reason}")
    pytest.skip(reason)


def _connect_or_start():
    try:
        return images.connect_docker(timeout=120)
    except EnvironmentProblem as problem:
        if os.geteuid() != 0 or not shutil.which("dockerd"):
            _unavailable(f"no Docker engine and not root to start one: {problem.one_line()}")
    done = subprocess.run([str(REPO / "scripts" / "start-dockerd.sh")], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        _unavailable(f"could not start dockerd: {(done.stderr or done.stdout).strip()[-300:]}")
    try:
        return images.connect_docker(timeout=120)
    except EnvironmentProblem as problem:
        _unavailable(f"dockerd started but does not answer: {problem.one_line()}")


def xlarun_containers(client) -> list:
    """The containers (running or not) this process started through xlarun; other sessions' are not ours."""
    return client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={os.getpid()}"})


@pytest.fixture(scope="session")
def docker_engine():
    client = _connect_or_start()
    yield client
    client.close()


@pytest.fixture
def docker_client(docker_engine):
    before = {c.id for c in xlarun_containers(docker_engine)}
    yield docker_engine
    leftovers = [c for c in xlarun_containers(docker_engine) if c.id not in before]
    for container in leftovers:
        container.remove(force=True)
    assert not leftovers, f"containers left behind: {[c.name for c in leftovers]}"


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    if BASE_IMAGE != "xlarun-base:bookworm" or _exists(docker_engine, BASE_IMAGE):
        if not _exists(docker_engine, BASE_IMAGE):
            _unavailable(f"base image {BASE_IMAGE} is missing")
        return BASE_IMAGE
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        _unavailable("the base image needs root and debootstrap (apt-get install -y debootstrap)")
    started = time.monotonic()
    done = subprocess.run(
        [str(REPO / "scripts" / "make-base-image.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "XLARUN_CACHE_DIR": CACHE_DIR, "XLARUN_BASE_IMAGE": BASE_IMAGE},
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/make-base-image.sh failed: {(done.stderr or done.stdout)[-1000:]}")
    BUILD_SECONDS["base"] = time.monotonic() - started
    return BASE_IMAGE


@pytest.fixture(scope="session")
def cpu_image(docker_engine, base_image) -> str:
    args = {**images.default_build_args("cpu"), "BASE_IMAGE": base_image}
    if not images.image_is_current(docker_engine, CPU_IMAGE, "cpu", args):
        started = time.monotonic()
        images.build_image(
            "cpu",
            base=base_image,
            tag=CPU_IMAGE,
            client=docker_engine,
            progress=lambda line: print(f"[build cpu] {line}", file=sys.stderr),
        )
        BUILD_SECONDS["cpu"] = time.monotonic() - started
    return CPU_IMAGE


def _exists(client, ref: str) -> bool:
    import docker.errors

    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False
