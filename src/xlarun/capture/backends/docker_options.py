"""The ``backend.options`` of a run spec for the container kinds (``docker``, ``docker-cpu|gpu|ipu``).

:class:`DockerOptions` is what the user wrote, validated. :meth:`DockerOptions.for_kind` fills the
per-kind defaults (image, GPUs, shared memory) so the backend and ``xlarun spec show`` agree on what
will run; :meth:`~DockerOptions.gpu_requests` and :meth:`~DockerOptions.ipu_settings` say which
accelerators the options select. Turning options plus a job into everything sent to the engine is
:func:`xlarun.capture.backends.docker.translate_job`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from xlarun.errors import InputError

#: The container kinds and the image each uses unless ``image`` is given (built by ``xlarun images build``).
DEFAULT_IMAGES: dict[str, str] = {
    "docker-cpu": "xlarun-cpu:latest",
    "docker-gpu": "xlarun-gpu:latest",
    "docker-ipu": "xlarun-ipu:latest",
}
#: ``docker`` is the generic kind: every option explicit, no default image.
CONTAINER_KINDS = ("docker", *DEFAULT_IMAGES)

#: XLA's GPU runtime, NCCL and JAX's prefetching use /dev/shm; Docker's 64 MB default is too small.
DEFAULT_GPU_SHM_SIZE = "8g"

_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$")
_USER = re.compile(r"^(host|image|root|[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?)$")


@dataclass(frozen=True)
class GpuRequest:
    """One NVIDIA device request: all GPUs (count -1), N GPUs, or the listed ids."""

    count: int | None
    device_ids: tuple[str, ...] = ()
    capabilities: tuple[tuple[str, ...], ...] = (("gpu",),)


def ipus_of_device_id(device_id: int, ipu_count: int) -> list[int]:
    """The IPUs behind a Graphcore device id: single IPUs first, then aligned groups of 2, 4, 8, ...

    On a 4-IPU host ids 0-3 are single IPUs, 4 is {0,1}, 5 is {2,3} and 6 is {0,1,2,3} (`gc-info -l`).
    """
    if device_id < max(ipu_count, 1):
        return [device_id]
    first, size = ipu_count, 2
    while size <= ipu_count:
        groups = ipu_count // size
        if device_id < first + groups:
            start = (device_id - first) * size
            return list(range(start, start + size))
        first, size = first + groups, size * 2
    raise InputError(
        f"IPU device id {device_id} does not exist on a host with {ipu_count} IPUs (ids 0..{first - 1})",
        hint="list the device ids with `gc-info -l`, or set backend.options.ipu_count",
    )


def ipu_device_files(ipu: int) -> list[str]:
    """The character devices of one PCIe IPU, as `gc-docker --device-id` passes them."""
    return [f"/dev/ipu{ipu}", f"/dev/ipu{ipu}_ex", f"/dev/ipu{ipu}_mailbox", f"/dev/ipu{ipu}_mem"]


class DockerOptions(BaseModel, extra="forbid"):
    """How a job runs in a container: image, user, devices, limits and extra mounts."""

    image: str | None = Field(
        None,
        description="Image to run, e.g. 'xlarun-cpu:latest' or 'nvcr.io/nvidia/jax:25.04-py3'. "
        "Default per kind: docker-cpu -> xlarun-cpu:latest, docker-gpu -> xlarun-gpu:latest, "
        "docker-ipu -> xlarun-ipu:latest (build them with `xlarun images build cpu|gpu|ipu`); "
        "required for kind 'docker'.",
    )
    user: str = Field(
        "host",
        description="Who the job runs as. 'host' (default): your own uid:gid, so everything in the run "
        "folder belongs to you; 'image': the image's USER (xlarun's images: the non-root user 'xlarun'); "
        "'root'; or 'UID[:GID]' / 'NAME[:GROUP]'. When the job runs as someone else, xlarun gives the "
        "run folder back to you after the run.",
    )
    gpus: Literal["all"] | int | list[int | str] | None = Field(
        None,
        description="GPUs to hand to the job through the NVIDIA container toolkit: 'all', a count, or a "
        "list of device indexes/UUIDs. Default: 'all' for docker-gpu, none otherwise.",
    )
    shm_size: str | None = Field(
        None,
        description="Size of /dev/shm, e.g. '8g'. Default: '8g' for docker-gpu, Docker's 64m otherwise.",
    )
    ipu_device_id: int | None = Field(
        None,
        ge=0,
        description="Graphcore device id, as `gc-docker --device-id N` takes it: a single IPU "
        "(0..count-1) or a multi-IPU device (ids after the single ones, in groups of 2, 4, 8...; "
        "see `gc-info -l`). Each IPU adds /dev/ipuN, /dev/ipuN_ex, /dev/ipuN_mailbox and "
        "/dev/ipuN_mem. Default: every IPU on the host (none: IPU Model only). Not used with "
        "ipu_over_fabric, where the application picks its device.",
    )
    ipu_count: int | None = Field(
        None,
        ge=1,
        description="Number of IPUs attached to the host, used to expand a multi-IPU device id. "
        "Default: counted from the /dev/ipuN devices.",
    )
    ipu_over_fabric: bool = Field(
        False,
        description="Reach IPUs over the fabric (IPU-POD, V-IPU): adds /dev/infiniband, the IPC_LOCK "
        "capability, an unlimited memlock ulimit, host network and host IPC, and mounts the IPUoF "
        "configuration read-only.",
    )
    ipuof_config_path: Path | None = Field(
        None,
        description="Host path of the IPUoF configuration file (or a folder of them) for "
        "ipu_over_fabric; mounted read-only and named by IPUOF_CONFIG_PATH in the container. Default: "
        "IPUOF_CONFIG_PATH of the job's environment, else of xlarun's.",
    )
    devices: list[str] = Field(
        default_factory=list,
        description="Extra devices, 'HOST[:CONTAINER[:PERMISSIONS]]', e.g. '/dev/fuse:/dev/fuse:rwm'.",
    )
    cap_add: list[str] = Field(default_factory=list, description="Extra Linux capabilities, e.g. ['SYS_PTRACE'].")
    volumes: list[str] = Field(
        default_factory=list,
        description="Extra bind mounts, 'HOST:CONTAINER[:ro|rw]' (read-write unless ':ro'). The script's "
        "folder (read-only) and the run folder (read-write) are always mounted.",
    )
    network: str | None = Field(
        None,
        description="Network mode: 'bridge', 'host', 'none' or a network's name. Default: Docker's "
        "(bridge); 'host' with ipu_over_fabric.",
    )
    ipc: str | None = Field(
        None,
        description="IPC namespace: 'private', 'shareable', 'host' or 'container:NAME'. Default: "
        "Docker's; 'host' with ipu_over_fabric.",
    )
    mem_limit: str | None = Field(
        None,
        description="Memory limit, e.g. '16g' (no swap beyond it). A job that passes it is killed by "
        "the kernel and the run is reported as out of memory.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables for the job; they win over the ones capture composed. "
        "Host-specific variables (PATH, HOME, PYTHONPATH, VIRTUAL_ENV, CUDA_VISIBLE_DEVICES...) never "
        "reach the container unless set here.",
    )
    pull: Literal["never", "missing"] = Field(
        "never",
        description="'never' (default): the image must exist locally; 'missing': pull it when absent.",
    )
    remove: Literal[True] = Field(
        True,
        description="Containers are always removed after the run, also after Ctrl-C and errors; "
        "what the job wrote is in the run folder.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra container labels; xlarun adds xlarun.run, xlarun.kind and xlarun.version.",
    )

    @field_validator("shm_size", "mem_limit")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None and not _SIZE.match(value):
            raise ValueError(f"{value!r} is not a size like '512m' or '8g'")
        return value

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _USER.match(value):
            raise ValueError(f"{value!r} is not 'host', 'image', 'root', 'UID[:GID]' or 'NAME[:GROUP]'")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError("a GPU count must be at least 1 (leave gpus out for none)")
        if isinstance(value, list) and not value:
            raise ValueError("an empty GPU list selects nothing (leave gpus out for none)")
        return value

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: list[str]) -> list[str]:
        for device in value:
            if not device.startswith("/") or len(device.split(":")) > 3:
                raise ValueError(f"{device!r} is not 'HOST[:CONTAINER[:PERMISSIONS]]' with absolute paths")
        return value

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, value: list[str]) -> list[str]:
        for volume in value:
            parts = volume.split(":")
            if len(parts) not in (2, 3) or not parts[1].startswith("/") or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise ValueError(f"{volume!r} is not 'HOST:CONTAINER[:ro|rw]' with an absolute CONTAINER path")
        return value

    @model_validator(mode="after")
    def _fabric_namespaces(self) -> DockerOptions:
        if self.ipu_over_fabric:
            for name, value in (("network", self.network), ("ipc", self.ipc)):
                if value not in (None, "host"):
                    raise ValueError(f"ipu_over_fabric needs the host's {name} namespace; {name}={value!r} conflicts")
        return self

    def for_kind(self, kind: str) -> DockerOptions:
        """These options with the defaults of ``kind`` filled in; ValueError when they do not fit it."""
        if kind not in CONTAINER_KINDS:
            raise ValueError(f"unknown container kind {kind!r}; expected one of {', '.join(CONTAINER_KINDS)}")
        if kind == "docker" and not self.image:
            raise ValueError("backend kind 'docker' needs options.image (or use docker-cpu, docker-gpu, docker-ipu)")
        filled: dict[str, object] = {}
        if not self.image:
            filled["image"] = DEFAULT_IMAGES[kind]
        if kind == "docker-gpu":
            if self.gpus is None:
                filled["gpus"] = "all"
            if self.shm_size is None:
                filled["shm_size"] = DEFAULT_GPU_SHM_SIZE
        if kind != "docker-ipu" and (self.ipu_device_id is not None or self.ipu_over_fabric) and kind != "docker":
            raise ValueError(f"IPU options need kind docker-ipu (or docker), not {kind}")
        return self.model_copy(update=filled)

    def gpu_requests(self) -> list[GpuRequest]:
        """The NVIDIA device requests ``gpus`` asks for (none when unset)."""
        if self.gpus is None:
            return []
        if self.gpus == "all":
            return [GpuRequest(count=-1)]
        if isinstance(self.gpus, int):
            return [GpuRequest(count=self.gpus)]
        return [GpuRequest(count=None, device_ids=tuple(str(g) for g in self.gpus))]

    def ipu_settings(self, host_ipu_count: int) -> tuple[list[str], list[str], list[tuple[str, int, int]]]:
        """(devices 'HOST:CONTAINER:rwm', capabilities, ulimits (name, soft, hard)) for the IPUs selected."""
        if self.ipu_over_fabric:
            return ["/dev/infiniband:/dev/infiniband:rwm"], ["IPC_LOCK"], [("memlock", -1, -1)]
        count = self.ipu_count or host_ipu_count
        ipus = list(range(count)) if self.ipu_device_id is None else ipus_of_device_id(self.ipu_device_id, count)
        return [f"{d}:{d}:rwm" for ipu in ipus for d in ipu_device_files(ipu)], [], []
