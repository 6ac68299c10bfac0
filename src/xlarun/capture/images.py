"""The Docker engine and xlarun's images: connect, build ``containers/<kind>``, inspect, find runners.

``xlarun images build cpu|gpu|ipu [--base IMAGE]`` is :func:`build_image`; the container backend uses
:func:`connect_docker` and :func:`require_image`; the replay drivers use :func:`runner_in_image`
to run ``hlo_runner_main`` / ``run_hlo_module`` from an image (NVIDIA's JAX images carry the first).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun import __version__
from xlarun.errors import EnvironmentProblem, InputError

if TYPE_CHECKING:
    import docker

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
IMAGE_KINDS = ("cpu", "gpu", "ipu")
#: Label holding a hash of the Dockerfile and the build arguments: equal hash, same image.
LABEL_BUILD_HASH = "xlarun.build-hash"
#: Where the images put a list of the replay runners they carry (one absolute path per line).
RUNNERS_FILE = "/opt/xlarun/runners.txt"
#: Optional file in the build context: a CA bundle pip uses during the build (see containers/README.md).
BUILD_CA_NAME = "pip-ca.crt"

#: Called with each line of the build log.
BuildProgress = Callable[[str], None]


# ------------------------------------------------------------------------------------------- engine
def docker_host() -> str:
    """The daemon address the SDK will use."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def connect_docker(timeout: float | None = 60) -> docker.DockerClient:
    """A client for the daemon at ``DOCKER_HOST``; EnvironmentProblem when it does not answer."""
    try:
        import docker
        import docker.errors
        import requests
    except ImportError:
        raise EnvironmentProblem("the Docker SDK for Python is not installed", hint="pip install 'docker>=7'") from None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise _daemon_problem(str(exc)) from None


def _daemon_problem(text: str) -> EnvironmentProblem:
    address = docker_host()
    if "Permission denied" in text or "PermissionError" in text:
        return EnvironmentProblem(
            f"no permission to use the Docker daemon at {address}",
            hint="add yourself to the docker group (`sudo usermod -aG docker $USER`, then log in again) or use sudo",
        )
    why: str | None
    if "FileNotFoundError" in text or "No such file" in text:
        why = "no socket there"
    elif "refused" in text:
        why = "nothing listens there"
    else:
        why = text.splitlines()[0][:160] if text else None
    return EnvironmentProblem(
        f"cannot reach the Docker daemon at {address}: start it (`sudo systemctl start docker` or "
        "`dockerd &`) or set DOCKER_HOST",
        hint=why,
    )


def build_hint(ref: str, kind: str | None = None) -> str:
    """What to do about a missing image ``ref``."""
    for image_kind in IMAGE_KINDS:
        if ref.split(":")[0] == f"xlarun-{image_kind}" or (kind == f"docker-{image_kind}" and ref.startswith("xlarun-")):
            return f"build it with `xlarun images build {image_kind}`"
    return f"pull it (`docker pull {ref}`) or set backend.options.pull: missing; xlarun's own images: `xlarun images build cpu`"


def require_image(client: docker.DockerClient, ref: str, pull: str = "never", kind: str | None = None) -> Any:
    """The local image ``ref`` (pulled first when ``pull='missing'``); EnvironmentProblem when absent."""
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise EnvironmentProblem(f"cannot inspect image {ref}: {exc.explanation or exc}") from None
    if pull == "missing":
        try:
            return client.images.pull(ref)
        except docker.errors.APIError as exc:
            raise EnvironmentProblem(
                f"image {ref} is not on this Docker host and pulling it failed: {exc.explanation or exc}",
                hint=build_hint(ref, kind),
            ) from None
    raise EnvironmentProblem(f"image {ref} is not on this Docker host", hint=build_hint(ref, kind))


@dataclass(frozen=True)
class ImageInfo:
    """What a run's manifest records about its image."""

    ref: str
    id: str
    repo_digests: list[str]
    labels: dict[str, str]
    created: str | None
    size: int | None

    @property
    def digest(self) -> str | None:
        """The first repo digest (``name@sha256:...``); None for an image that was built here."""
        return self.repo_digests[0] if self.repo_digests else None

    def as_details(self) -> dict[str, object]:
        return {
            "image": self.ref,
            "image_id": self.id,
            "image_digest": self.digest,
            "image_repo_digests": self.repo_digests,
            "image_labels": {k: v for k, v in self.labels.items() if k.startswith("xlarun.")},
        }


def image_info(image_or_tag: Any, ref: str | None = None, client: docker.DockerClient | None = None) -> ImageInfo:
    """Facts about an image, given as an SDK ``Image`` or a tag (looked up; EnvironmentProblem if absent)."""
    if isinstance(image_or_tag, str):
        ref = ref or image_or_tag
        image_or_tag = require_image(client or connect_docker(), image_or_tag)
    attrs = image_or_tag.attrs
    return ImageInfo(
        ref=ref or (image_or_tag.tags[0] if image_or_tag.tags else image_or_tag.id),
        id=image_or_tag.id,
        repo_digests=list(attrs.get("RepoDigests") or []),
        labels=dict(image_or_tag.labels or {}),
        created=attrs.get("Created"),
        size=attrs.get("Size"),
    )


@dataclass(frozen=True)
class EngineFacts:
    """What ``xlarun doctor`` reports about the container side of this machine."""

    address: str
    problem: str | None  # why the daemon cannot be used, with the fix; None when it answers
    server_version: str | None = None
    runtimes: tuple[str, ...] = ()
    nvidia_toolkit: bool = False  # GPUs can be handed to containers (runtime registered or toolkit installed)
    images: dict[str, str | None] = field(default_factory=dict)  # xlarun-<kind>:latest -> image id, None if absent


def engine_facts() -> EngineFacts:
    """The daemon, its runtimes, and which of xlarun's images exist; never raises for a missing engine."""
    import docker.errors

    try:
        client = connect_docker(timeout=10)
    except EnvironmentProblem as problem:
        return EngineFacts(docker_host(), problem.one_line())
    try:
        info = client.info()
        runtimes = tuple(sorted(info.get("Runtimes") or {}))
        found: dict[str, str | None] = {}
        for kind in IMAGE_KINDS:
            try:
                found[f"xlarun-{kind}:latest"] = client.images.get(f"xlarun-{kind}:latest").id
            except docker.errors.ImageNotFound:
                found[f"xlarun-{kind}:latest"] = None
    finally:
        client.close()
    toolkit = "nvidia" in runtimes or bool(shutil.which("nvidia-container-cli") or shutil.which("nvidia-ctk"))
    return EngineFacts(docker_host(), None, info.get("ServerVersion"), runtimes, toolkit, found)


# ------------------------------------------------------------------------------------------- building
def containers_dir() -> Path:
    """The folder holding ``cpu/``, ``gpu/``, ``ipu/`` Dockerfiles: XLARUN_CONTAINERS_DIR, else the checkout's."""
    candidates = [
        os.environ.get("XLARUN_CONTAINERS_DIR"),
        Path(__file__).resolve().parents[3] / "containers",  # a checkout: src/xlarun/capture/images.py
        Path(__file__).resolve().parents[1] / "_containers",  # an installed wheel
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "cpu" / "Dockerfile").is_file():
            return Path(candidate)
    raise EnvironmentProblem(
        "cannot find xlarun's Dockerfiles (containers/cpu/Dockerfile)",
        hint="set XLARUN_CONTAINERS_DIR to the containers/ folder of an xlarun checkout",
    )


def host_versions() -> dict[str, str]:
    """Build arguments that pin the image's frameworks to the versions installed here (when installed)."""
    versions = {}
    for arg, dists in (
        ("JAX_VERSION", ("jax",)),
        ("JAXLIB_VERSION", ("jaxlib",)),
        ("TF_VERSION", ("tensorflow-cpu", "tensorflow", "tensorflow-gpu")),
    ):
        for dist in dists:
            try:
                versions[arg] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def default_build_args(kind: str) -> dict[str, str]:
    """The build arguments ``xlarun images build KIND`` uses unless told otherwise."""
    if kind == "ipu":
        return {}  # Graphcore's image brings its own TensorFlow build
    args = host_versions()
    if kind == "gpu":
        args.pop("JAXLIB_VERSION", None)  # jax[cudaXX] picks the matching jaxlib and CUDA plugin
    return args


def build_hash(dockerfile: Path, build_args: dict[str, str]) -> str:
    """Hash of a Dockerfile and its build arguments: an image carrying it needs no rebuild."""
    digest = hashlib.sha256(dockerfile.read_bytes())
    for key in sorted(build_args):
        digest.update(f"\0{key}={build_args[key]}".encode())
    return digest.hexdigest()[:16]


def _pip_ca_bundle() -> Path | None:
    """The CA bundle pip trusts here, when one is configured (a proxy or mirror with its own CA)."""
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    return None


def _build_context(kind: str, pip_ca: Path | None) -> Path:
    source = containers_dir() / kind
    if not (source / "Dockerfile").is_file():
        raise InputError(f"no Dockerfile for image kind {kind!r} in {source.parent}")
    context = Path(tempfile.mkdtemp(prefix=f"xlarun-build-{kind}-"))
    shutil.copytree(source, context, dirs_exist_ok=True)
    if pip_ca is not None:
        shutil.copyfile(pip_ca, context / BUILD_CA_NAME)
    return context


def build_image(
    kind: str,
    base: str | None = None,
    tag: str | None = None,
    progress: BuildProgress | None = None,
    pip_network: str | None = "host",
    build_args: dict[str, str] | None = None,
    pip_ca: Path | str | bool | None = True,
    no_cache: bool = False,
    client: docker.DockerClient | None = None,
) -> ImageInfo:
    """Build ``containers/<kind>/Dockerfile`` as ``tag`` (default ``xlarun-<kind>:latest``).

    ``base`` overrides the Dockerfile's BASE_IMAGE (e.g. the local ``xlarun-base:bookworm``);
    framework versions default to the host's (:func:`default_build_args`), so dumps made in the
    container and here fingerprint alike. ``pip_network`` is the network of the build's RUN steps;
    ``pip_ca`` (True: the bundle pip uses here, if any) is handed to pip during the build;
    ``no_cache`` rebuilds every layer.
    """
    import docker.errors

    if kind not in IMAGE_KINDS:
        raise InputError(f"unknown image kind {kind!r}; expected one of {', '.join(IMAGE_KINDS)}")
    client = client or connect_docker()
    tag = tag or f"xlarun-{kind}:latest"
    args = {**default_build_args(kind), **(build_args or {})}
    if base:
        args["BASE_IMAGE"] = base
    dockerfile = containers_dir() / kind / "Dockerfile"
    ca = _pip_ca_bundle() if pip_ca is True else (Path(pip_ca) if pip_ca else None)
    labels = {
        "xlarun.kind": kind,
        "xlarun.version": __version__,
        LABEL_BUILD_HASH: build_hash(dockerfile, args),
        **{f"xlarun.build-arg.{k.lower()}": v for k, v in args.items()},
    }  # "" too: labels are inherited
    if base:
        _require_base(client, base)
    context = _build_context(kind, ca)
    log: list[str] = []
    try:
        image_id = None
        for event in client.api.build(
            path=str(context),
            tag=tag,
            buildargs=args,
            labels=labels,
            network_mode=pip_network,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            nocache=no_cache,
        ):
            if "stream" in event:
                for line in event["stream"].splitlines():
                    log.append(line)
                    if progress and line.strip():
                        progress(line)
            if "error" in event:
                raise _build_problem(kind, tag, event["error"], log)
            image_id = event.get("aux", {}).get("ID", image_id)
    except docker.errors.APIError as exc:
        raise _build_problem(kind, tag, exc.explanation or str(exc), log) from None
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return image_info(client.images.get(image_id or tag), ref=tag)


def _require_base(client: docker.DockerClient, base: str) -> None:
    """Fail early, with a way out, when the base image is neither here nor pullable."""
    try:
        require_image(client, base, pull="missing")
    except EnvironmentProblem as problem:
        raise EnvironmentProblem(
            f"base image {base} is not on this Docker host and cannot be pulled",
            hint="pull it where a registry is reachable, or build a local base with "
            "scripts/make-base-image.sh and pass --base xlarun-base:bookworm",
        ) from problem


def _build_problem(kind: str, tag: str, error: str, log: list[str]) -> EnvironmentProblem:
    tail = " | ".join(line.strip() for line in log[-8:] if line.strip())
    hint = "see the build log above"
    if "pull access denied" in error or "no such host" in error or "manifest unknown" in error:
        hint = "the base image cannot be pulled here: pass --base with a local image (scripts/make-base-image.sh)"
    elif "CERTIFICATE_VERIFY_FAILED" in tail or "certificate verify failed" in tail:
        hint = "pip does not trust this network's TLS proxy: set PIP_CERT to its CA bundle"
    return EnvironmentProblem(f"building {tag} from containers/{kind} failed: {error.strip()} (last output: {tail})", hint=hint)


def image_is_current(client: docker.DockerClient, tag: str, kind: str, build_args: dict[str, str]) -> bool:
    """True when ``tag`` exists and was built from the current Dockerfile with ``build_args``."""
    import docker.errors

    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return False
    return labels.get(LABEL_BUILD_HASH) == build_hash(containers_dir() / kind / "Dockerfile", build_args)


# -------------------------------------------------------------------------------------------- runners
def find_runner_in_image(image: str, name: str, client: docker.DockerClient | None = None) -> str | None:
    """Absolute path of the replay runner ``name`` (e.g. ``hlo_runner_main``) in ``image``, or None.

    Reads the image's runner list (``/opt/xlarun/runners.txt``, written by xlarun's Dockerfiles) and
    otherwise asks a throw-away container's shell (``command -v``) and a few usual folders.
    """
    client = client or connect_docker()
    return _find_runner(client, require_image(client, image).id, image, name)


def runner_in_image(
    image: str, name: str, path: str | None = None, *, usage: bool = False, client: docker.DockerClient | None = None
) -> tuple[str | None, str | None]:
    """The replay runner ``name`` in ``image``, for the replay drivers: its path (``path`` when given, else
    :func:`find_runner_in_image`'s; None when the image has none) and, with ``usage``, what its ``--help`` prints.

    Raises EnvironmentProblem when the image is not on the Docker host; each answer is asked once per image in a process.
    """
    client = client or connect_docker()
    image_id = require_image(client, image).id
    binary = path or _find_runner(client, image_id, image, name)
    if not binary or not usage:
        return binary, None
    key = (image_id, "--help " + binary)
    if key not in _runners_cache:
        _runners_cache[key] = _throwaway(
            client, image_id, image, f"{shlex.quote(binary)} --help 2>&1; true", f"run {binary} --help in"
        )
    return binary, _runners_cache[key]


def _find_runner(client: docker.DockerClient, image_id: str, image: str, name: str) -> str | None:
    found = _runners_cache.get((image_id, name))
    if found is not None:
        return found or None
    probe = (
        f"if [ -f {RUNNERS_FILE} ]; then grep -E '/{name}$' {RUNNERS_FILE} | head -n 1; fi; "
        f"command -v {name} 2>/dev/null; "
        f"for d in /usr/local/bin /opt/xla/bin /opt/xla/bazel-bin/xla/tools /usr/bin; do "
        f"[ -x $d/{name} ] && echo $d/{name}; done; true"
    )
    output = _throwaway(client, image_id, image, probe, f"look for {name} in")
    paths = [line.strip() for line in output.splitlines() if line.strip().startswith("/")]
    _runners_cache[(image_id, name)] = paths[0] if paths else ""
    return paths[0] if paths else None


def _throwaway(client: docker.DockerClient, image_id: str, image: str, script: str, doing: str) -> str:
    """What ``script`` prints in a throw-away container of the image (no network, removed after)."""
    import docker.errors

    try:
        output = client.containers.run(
            image_id,
            entrypoint=["/bin/sh", "-c", script],
            remove=True,
            network_mode="none",
            labels={"xlarun.run": "probe", "xlarun.owner-pid": str(os.getpid()), "xlarun.kind": "probe"},
            user="0:0",
        )
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"cannot {doing} image {image}: {exc}") from None
    return output.decode(errors="replace")


_runners_cache: dict[tuple[str, str], str] = {}
