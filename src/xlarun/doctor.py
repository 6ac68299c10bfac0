"""``doctor``: what this machine can do for xlarun, and how to fix what is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata


@dataclass
class Check:
    """One capability: whether it works, what was found, and how to get it when it doesn't."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None
    essential: bool = False  # without it, no local capture works


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_python_packages() -> list[Check]:
    out = []
    for name, dist, fix in (
        ("jax", "jax", "pip install 'xlarun[jax]' (or pip install jax jaxlib)"),
        ("jaxlib (replay engine)", "jaxlib", "pip install 'xlarun[jax]': the built-in replay engine runs on its jaxlib"),
        ("tensorflow", None, "pip install 'xlarun[tf]' (tensorflow-cpu) to capture TensorFlow programs"),
        ("torch_xla", "torch_xla", "pip install torch_xla to capture PyTorch/XLA programs (pulls CUDA wheels)"),
    ):
        version = _version(dist) if dist else (_version("tensorflow") or _version("tensorflow-cpu"))
        out.append(Check(name, version is not None, f"{version}" if version else "not installed", None if version else fix))
    frameworks_ok = any(c.ok for c in out if c.name in ("jax", "tensorflow", "torch_xla"))
    out.insert(
        0,
        Check(
            "a framework to capture",
            frameworks_ok,
            "jax, tensorflow or torch_xla importable" if frameworks_ok else "none installed",
            None if frameworks_ok else "pip install 'xlarun[jax]'",
            essential=True,
        ),
    )
    return out


def check_graphviz() -> Check:
    dot = shutil.which("dot")
    if dot is None:
        return Check("graphviz dot (render, report)", False, "not on PATH", "apt-get install graphviz (or brew install graphviz)")
    try:
        version = subprocess.run([dot, "-V"], capture_output=True, text=True, timeout=10).stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("graphviz dot (render, report)", False, f"{dot} does not run: {exc}", "reinstall graphviz")
    return Check("graphviz dot (render, report)", True, version or dot)


def check_docker() -> list[Check]:
    try:
        import docker
    except ImportError:
        return [Check("docker SDK", False, "not installed", "pip install docker")]
    try:
        client = docker.from_env(timeout=5)
        client.ping()
        info = client.info()
    except Exception as exc:  # the SDK raises several kinds; all mean "no daemon here"
        reason = str(exc).splitlines()[0][:160]
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return [
            Check(
                "Docker daemon (container backends)",
                False,
                f"cannot reach {host}: {reason}",
                "start it (`sudo systemctl start docker`, or `sudo dockerd &`), or set DOCKER_HOST",
            )
        ]
    checks = [
        Check("Docker daemon (container backends)", True, f"{info.get('ServerVersion', '?')}, {info.get('Driver', '?')} storage")
    ]
    runtimes = info.get("Runtimes") or {}
    nvidia = "nvidia" in runtimes
    checks.append(
        Check(
            "NVIDIA container runtime (docker-gpu)",
            nvidia,
            "registered" if nvidia else f"runtimes: {', '.join(runtimes) or 'none'}",
            None if nvidia else "install nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`",
        )
    )
    images = []
    for kind in ("cpu", "gpu", "ipu"):
        try:
            client.images.get(f"xlarun-{kind}:latest")
            images.append(kind)
        except Exception:
            pass
    checks.append(
        Check(
            "xlarun images",
            bool(images),
            ", ".join(f"xlarun-{k}:latest" for k in images) or "none built",
            None if images else "xlarun images build cpu",
        )
    )
    return checks


def check_gpu_and_ipu() -> list[Check]:
    smi = shutil.which("nvidia-smi")
    gpus = []
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
            gpus = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    ipus = sorted(p for p in os.listdir("/dev") if p.startswith("ipu") and p[3:].isdigit()) if os.path.isdir("/dev") else []
    return [
        Check(
            "NVIDIA GPU",
            bool(gpus),
            ", ".join(gpus) or "none found",
            None if gpus else "only needed for --platform cuda and docker-gpu",
        ),
        Check(
            "Graphcore IPU",
            bool(ipus),
            ", ".join(ipus) or "no /dev/ipu*",
            None if ipus else "only needed for docker-ipu (or use IPU-over-fabric)",
        ),
    ]


def check_runners() -> list[Check]:
    from xlarun.replay.runner_site import RUNNERS, find_runner

    out = []
    for runner, variable in RUNNERS.items():
        try:
            path = find_runner(runner)
            out.append(Check(f"{runner} (replay --engine {runner})", True, path))
        except Exception:
            out.append(
                Check(
                    f"{runner} (replay --engine {runner})",
                    False,
                    f"not on PATH, {variable} not set",
                    f"build it from XLA (bazel build //xla/tools:{runner}), or replay with the built-in engine",
                )
            )
    return out


def check_replay_engine() -> Check:
    """Prove the built-in engine by replaying a tiny module, so "ok" means a replay would work."""
    name = "built-in replay engine (PJRT)"
    if importlib.util.find_spec("jaxlib") is None:
        return Check(name, False, "jaxlib missing", "pip install 'xlarun[jax]'")
    try:
        from xlarun.replay.engine import prove_engine
        from xlarun.replay.pjrt import SUPPORTED_RANGE, available_platforms, jaxlib_version

        proof = prove_engine("cpu")
        if not proof.ok:
            return Check(
                name,
                False,
                proof.detail[:300],
                f"xlarun's engine runs on {SUPPORTED_RANGE} (here {jaxlib_version()}); or use --engine run_hlo_module",
            )
        return Check(name, True, f"{proof.detail}; platforms: {', '.join(available_platforms())}")
    except Exception as exc:  # jax itself fails to import or initialise
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        return Check(name, False, message.splitlines()[0][:300], "pip install 'jax[cpu]'")


def run_checks(docker: bool = True) -> list[Check]:
    """Every check, essentials first."""
    checks = [Check("python", True, f"{sys.version.split()[0]} at {sys.executable}", essential=True)]
    checks += check_python_packages()
    checks.append(check_replay_engine())
    checks += check_runners()
    checks.append(check_graphviz())
    if docker:
        checks += check_docker()
    checks += check_gpu_and_ipu()
    return checks
