"""Placement by backend: the Ray resource each backend needs, and the ones this machine proves it can serve.

A node declares what it serves as custom Ray resources (``xlarun worker`` starts Ray with them); every cell
asks for one unit of its backend's resource, so Ray runs it only where the backend works.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

#: backend kind -> the resource a node must offer to run a cell of that kind
RESOURCE_OF_BACKEND = {
    "local": "xlarun_local",
    "docker-cpu": "xlarun_docker_cpu",
    "docker-gpu": "xlarun_docker_gpu",
    "docker-ipu": "xlarun_ipu",
}
XLARUN_RESOURCES = ("xlarun_local", "xlarun_docker_cpu", "xlarun_docker_gpu", "xlarun_ipu")


def resource_for(backend: Any) -> str:
    """The resource a cell of this backend (a spec's ``BackendSpec``) asks for; ``docker`` with GPUs counts as docker-gpu."""
    kind = backend.kind
    if kind == "docker":
        kind = "docker-gpu" if getattr(backend, "gpus", None) else "docker-cpu"
    return RESOURCE_OF_BACKEND.get(kind, f"xlarun_{kind.replace('-', '_')}")


def describe_offer(resources: dict[str, float]) -> str:
    """``xlarun_local 2, xlarun_docker_cpu 1``: the xlarun resources a cluster (or node) offers, in words."""
    offered = [f"{name} {resources[name]:g}" for name in XLARUN_RESOURCES if resources.get(name)]
    return ", ".join(offered) or "no xlarun resources (start workers with `xlarun worker --address ADDR`)"


@dataclass(frozen=True)
class Capability:
    """One resource this node could offer: how many units, or 0 and why not."""

    resource: str
    units: int
    why: str


def probe_node_resources(slots: int | None = None) -> list[Capability]:
    """What this machine proves it can serve, from ``xlarun doctor``'s checks: a framework for ``local``, the Docker
    daemon and the xlarun-cpu image for ``docker-cpu``, the NVIDIA runtime and a GPU for ``docker-gpu``, an IPU device
    and Docker for ``docker-ipu``. ``slots`` is how many CPU cells may run at once (default: half the cores)."""
    from xlarun.doctor import check_docker, check_gpu_and_ipu, check_python_packages

    slots = slots or max(1, (os.cpu_count() or 2) // 2)
    found: list[Capability] = []
    framework = check_python_packages()[0]
    found.append(Capability("xlarun_local", slots if framework.ok else 0, framework.detail))
    docker = {c.name: c for c in check_docker()}
    daemon = docker.get("Docker daemon (container backends)") or next(iter(docker.values()))
    images = docker.get("xlarun images")
    nvidia = docker.get("NVIDIA container runtime (docker-gpu)")
    gpu, ipu = check_gpu_and_ipu()
    image_detail = images.detail if images and images.ok else ""
    cpu_ok = daemon.ok and "xlarun-cpu:latest" in image_detail
    found.append(
        Capability(
            "xlarun_docker_cpu",
            slots if cpu_ok else 0,
            image_detail
            if cpu_ok
            else (daemon.detail if not daemon.ok else "no xlarun-cpu:latest image (xlarun images build cpu)"),
        )
    )
    gpus = len(gpu.detail.split(", ")) if gpu.ok else 0
    gpu_ok = daemon.ok and bool(nvidia and nvidia.ok) and gpus > 0
    found.append(
        Capability(
            "xlarun_docker_gpu",
            gpus if gpu_ok else 0,
            gpu.detail
            if gpu_ok
            else (
                "no NVIDIA GPU" if not gpus else "no NVIDIA container runtime" if not (nvidia and nvidia.ok) else daemon.detail
            ),
        )
    )
    ipus = len(ipu.detail.split(", ")) if ipu.ok else 0
    found.append(
        Capability(
            "xlarun_ipu",
            ipus if ipus and daemon.ok else 0,
            ipu.detail if ipus and daemon.ok else ("no /dev/ipu*" if not ipus else daemon.detail),
        )
    )
    return found
