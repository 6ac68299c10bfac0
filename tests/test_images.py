"""xlarun's images: Dockerfiles, build arguments, builds (cold, cached, failing), inspection, runners."""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.docker_support import BUILD_SECONDS, REPO, base_image, cpu_image, docker_client, docker_engine  # noqa: F401
from xlarun.capture import images
from xlarun.errors import EnvironmentProblem, InputError

DOCKERFILES = {kind: REPO / "containers" / kind / "Dockerfile" for kind in images.IMAGE_KINDS}


@pytest.mark.parametrize("kind", images.IMAGE_KINDS)
def test_dockerfiles_take_their_base_as_an_argument_and_end_non_root(kind):
    text = DOCKERFILES[kind].read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+\nFROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.findall(r"^USER (\S+)$", text, re.M)[-1] == "xlarun"
    assert "COPY Dockerfile pip-ca.cr[t] /tmp/xlarun-build/" in text  # builds with or without a CA bundle
    assert images.RUNNERS_FILE in text


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_framework_versions_are_build_arguments(kind):
    text = DOCKERFILES[kind].read_text()
    assert "ARG JAX_VERSION=" in text and "ARG TF_VERSION=" in text


def test_public_default_bases():
    bases = {k: re.search(r"^ARG BASE_IMAGE=(\S+)$", p.read_text(), re.M).group(1) for k, p in DOCKERFILES.items()}
    assert bases == {"cpu": "python:3.11-slim", "gpu": "ghcr.io/nvidia/jax:jax", "ipu": "graphcore/tensorflow:2"}


def test_default_build_args_pin_the_host_versions():
    cpu = images.default_build_args("cpu")
    assert cpu["JAX_VERSION"] == importlib.metadata.version("jax")
    assert cpu["JAXLIB_VERSION"] == importlib.metadata.version("jaxlib")
    assert cpu["TF_VERSION"] == importlib.metadata.version("tensorflow-cpu")
    assert "JAXLIB_VERSION" not in images.default_build_args("gpu")
    assert images.default_build_args("ipu") == {}


def test_build_hash_follows_dockerfile_and_arguments(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    first = images.build_hash(dockerfile, {"JAX_VERSION": "0.10.2"})
    assert first == images.build_hash(dockerfile, {"JAX_VERSION": "0.10.2"})
    assert first != images.build_hash(dockerfile, {"JAX_VERSION": "0.10.1"})
    dockerfile.write_text("FROM scratch\nUSER nobody\n")
    assert first != images.build_hash(dockerfile, {"JAX_VERSION": "0.10.2"})


def test_build_context_carries_the_ca_bundle_only_when_given(tmp_path):
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    with_ca = images._build_context("cpu", ca)
    without = images._build_context("cpu", None)
    try:
        assert (with_ca / images.BUILD_CA_NAME).read_text() == ca.read_text()
        assert (with_ca / "Dockerfile").read_bytes() == DOCKERFILES["cpu"].read_bytes()
        assert not (without / images.BUILD_CA_NAME).exists()
    finally:
        for folder in (with_ca, without):
            subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_unknown_kind_is_an_input_error():
    with pytest.raises(InputError, match="unknown image kind 'tpu'"):
        images.build_image("tpu")


def test_missing_image_hint_names_the_build_command():
    assert images.build_hint("xlarun-gpu:latest") == "build it with `xlarun images build gpu`"
    assert "docker pull nvcr.io/nvidia/jax:25.04-py3" in images.build_hint("nvcr.io/nvidia/jax:25.04-py3", "docker")


def test_daemon_down_message(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(
        EnvironmentProblem,
        match=r"cannot reach the Docker daemon at unix://.*none.sock: start it \(`sudo systemctl start docker` or `dockerd &`\) or set DOCKER_HOST",
    ):
        images.connect_docker()


def test_engine_facts_without_a_daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    facts = images.engine_facts()
    assert facts.problem.startswith(f"cannot reach the Docker daemon at unix://{tmp_path}/none.sock")
    assert facts.problem.endswith("(no socket there)")
    assert (facts.server_version, facts.images) == (None, {})


# ----------------------------------------------------------------------------------- real engine
@pytest.mark.docker
def test_engine_facts(docker_client, cpu_image):
    facts = images.engine_facts()
    assert facts.problem is None and facts.server_version and "runc" in facts.runtimes
    assert set(facts.images) == {"xlarun-cpu:latest", "xlarun-gpu:latest", "xlarun-ipu:latest"}
    if cpu_image == "xlarun-cpu:latest":
        assert facts.images["xlarun-cpu:latest"] == docker_client.images.get(cpu_image).id


@pytest.mark.docker
def test_cpu_image_runs_the_host_versions_as_a_non_root_user(docker_client, cpu_image):
    out = (
        docker_client.containers.run(
            cpu_image,
            ["python", "-c", "import os, jax, tensorflow as tf; print(os.getuid(), jax.__version__, tf.__version__)"],
            remove=True,
            labels={"xlarun.run": "test", "xlarun.owner-pid": str(os.getpid())},
            network_mode="none",
        )
        .decode()
        .split()
    )
    assert out == ["1000", importlib.metadata.version("jax"), importlib.metadata.version("tensorflow-cpu")]
    info = images.image_info(cpu_image, client=docker_client)
    assert info.labels["xlarun.kind"] == "cpu" and info.id.startswith("sha256:") and info.digest is None


@pytest.mark.docker
def test_cached_rebuild_takes_seconds(docker_client, cpu_image, base_image, record_property):
    before = images.image_info(cpu_image, client=docker_client).id
    started = time.monotonic()
    info = images.build_image("cpu", base=base_image, tag=cpu_image, client=docker_client)
    cached_s = time.monotonic() - started
    record_property("cpu_image_cached_build_s", round(cached_s, 2))
    record_property("cpu_image_cold_build_s", round(BUILD_SECONDS.get("cpu", -1), 1))
    print(f"cpu image: cold build {BUILD_SECONDS.get('cpu', 'not built this session')} s, cached rebuild {cached_s:.1f} s")
    assert info.id == before
    assert cached_s < 30
    assert images.image_is_current(
        docker_client, cpu_image, "cpu", {**images.default_build_args("cpu"), "BASE_IMAGE": base_image}
    )


@pytest.mark.docker
@pytest.mark.parametrize(("kind", "base"), [("gpu", "cpu"), ("ipu", "base")])
def test_gpu_and_ipu_dockerfiles_build_on_a_local_base(docker_client, cpu_image, base_image, kind, base):
    # No CUDA or Graphcore base here: build their Dockerfiles' own steps on what we have (with JAX
    # already inside for gpu, so nothing is installed) to check the shell logic, user and labels.
    tag = f"xlarun-{kind}:smoke"
    info = images.build_image(
        kind,
        base=cpu_image if base == "cpu" else base_image,
        tag=tag,
        client=docker_client,
        build_args={"JAX_VERSION": "", "TF_VERSION": ""},
    )
    try:
        out = docker_client.containers.run(
            tag,
            ["sh", "-c", "id -un; echo $HOME; wc -l < /opt/xlarun/runners.txt"],
            remove=True,
            labels={"xlarun.owner-pid": str(os.getpid())},
        )
        assert out.decode().split() == ["xlarun", "/home/xlarun", "0"]
        assert info.labels["xlarun.kind"] == kind
        assert info.labels["xlarun.build-arg.jax_version"] == ""  # set, so a base's label is not inherited
        assert images.find_runner_in_image(tag, "hlo_runner_main", client=docker_client) is None
    finally:
        docker_client.images.remove(tag, force=True)


@pytest.mark.docker
def test_missing_base_image_is_a_clear_error(docker_client):
    with pytest.raises(EnvironmentProblem) as caught:
        images.build_image("cpu", base="xlarun-no-such-base:1", tag="xlarun-cpu:never", client=docker_client)
    assert caught.value.message == "base image xlarun-no-such-base:1 is not on this Docker host and cannot be pulled"
    assert "scripts/make-base-image.sh" in caught.value.hint


@pytest.mark.docker
def test_failing_build_reports_the_step_and_log(docker_client, base_image):
    lines: list[str] = []
    with pytest.raises(EnvironmentProblem) as caught:
        images.build_image(
            "cpu",
            base=base_image,
            tag="xlarun-cpu:broken",
            client=docker_client,
            build_args={"JAX_VERSION": "0.0.0.dev404"},
            progress=lines.append,
        )
    assert caught.value.message.startswith("building xlarun-cpu:broken from containers/cpu failed: The command")
    assert "jax==0.0.0.dev404" in caught.value.message
    assert any("Step" in line for line in lines)


@pytest.mark.docker
def test_image_info_of_a_missing_image(docker_client):
    with pytest.raises(EnvironmentProblem, match="image xlarun-cpu:absent is not on this Docker host"):
        images.image_info("xlarun-cpu:absent", client=docker_client)


@pytest.fixture(scope="module")
def runner_image(docker_engine, base_image):
    dockerfile = (
        f"FROM {base_image}\n"
        "RUN printf '#!/bin/sh\\necho runner\\n' > /usr/local/bin/hlo_runner_main && chmod +x /usr/local/bin/hlo_runner_main"
        " && mkdir -p /opt/xla/tools /opt/xlarun && cp /usr/local/bin/hlo_runner_main /opt/xla/tools/run_hlo_module"
        " && echo /opt/xla/tools/run_hlo_module > /opt/xlarun/runners.txt\n"
    )
    image, _ = docker_engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="xlarun-test-runners:latest", rm=True)
    yield "xlarun-test-runners:latest"
    docker_engine.images.remove(image.id, force=True)


@pytest.mark.docker
def test_find_runner_in_image(docker_client, runner_image, cpu_image):
    assert images.find_runner_in_image(runner_image, "hlo_runner_main", client=docker_client) == "/usr/local/bin/hlo_runner_main"
    # found through the image's runner list although it is not on PATH
    assert images.find_runner_in_image(runner_image, "run_hlo_module", client=docker_client) == "/opt/xla/tools/run_hlo_module"
    assert images.find_runner_in_image(cpu_image, "hlo_runner_main", client=docker_client) is None


@pytest.mark.docker
def test_make_base_image_is_idempotent(docker_client, base_image):
    done = subprocess.run(
        [str(REPO / "scripts" / "make-base-image.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XLARUN_BASE_IMAGE": base_image, "HOME": str(Path.home())},
    )
    assert done.returncode == 0 and done.stdout.strip() == f"{base_image} exists"
