"""What a containerised job is, for the engine: :func:`translate_job` turns a :class:`Job` and
:class:`DockerOptions` into a :class:`ContainerSpec` (image, command, environment, mounts, devices,
limits, labels). Pure, given :class:`HostFacts`, so tests and ``--dry-run`` can inspect it exactly;
:mod:`xlarun.capture.backends.docker` sends it to the engine.

Inside the container the script's folder is ``/xlarun/script`` (read-only), the run folder is
``/xlarun/run`` (read-write) and a working directory outside both is ``/xlarun/cwd`` (read-only).
Host paths in the job's command line and environment are rewritten to those mount points.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xlarun import __version__
from xlarun.capture.backends.base import Job, JobPaths
from xlarun.capture.backends.docker_options import DEFAULT_IMAGES, DockerOptions, GpuRequest
from xlarun.errors import SpecError

SCRIPT_MOUNT = "/xlarun/script"
RUN_MOUNT = "/xlarun/run"
CWD_MOUNT = "/xlarun/cwd"
IPUOF_FILE_MOUNT = "/etc/xlarun/ipuof.conf"
IPUOF_DIR_MOUNT = "/etc/ipuof.conf.d"  # where Graphcore's runtime looks when IPUOF_CONFIG_PATH is unset
#: Every container xlarun starts carries this label; its value is the run id.
LABEL_RUN = "xlarun.run"
#: ... and this one, the pid of the xlarun process that owns it: orphans (dead owner) are safe to remove.
LABEL_OWNER = "xlarun.owner-pid"
#: Host-specific variables that would break the container when a job's environment was copied from the
#: host; set them through ``options.env`` when the image needs them.
DROPPED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "OLDPWD",
        "HOSTNAME",
        "TERM",
        "TMPDIR",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "DISPLAY",
        "SSH_AUTH_SOCK",
        "DOCKER_HOST",
        "DOCKER_CONFIG",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",  # GPUs are renumbered from 0 in the container
    }
)
_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class HostFacts:
    """What :func:`translate_job` needs to know about the calling host (explicit, so tests can fix it)."""

    uid: int
    gid: int
    env: Mapping[str, str]  # the caller's environment (IPUOF_CONFIG_PATH)
    ipu_count: int  # /dev/ipuN devices present
    pid: int = 0  # this process, recorded on its containers (LABEL_OWNER)

    @classmethod
    def detect(cls) -> HostFacts:
        ipus = [p for p in Path("/dev").glob("ipu*") if re.fullmatch(r"ipu[0-9]+", p.name)]
        return cls(uid=os.getuid(), gid=os.getgid(), env=dict(os.environ), ipu_count=len(ipus), pid=os.getpid())


@dataclass(frozen=True)
class Mount:
    source: str  # host path
    target: str  # container path
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    """Everything sent to the engine for one job."""

    image: str
    command: list[str]
    working_dir: str
    environment: dict[str, str]
    user: str | None  # None: the image's USER
    mounts: list[Mount]
    labels: dict[str, str]
    device_requests: list[GpuRequest] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # "HOST:CONTAINER:PERMISSIONS"
    cap_add: list[str] = field(default_factory=list)
    ulimits: list[tuple[str, int, int]] = field(default_factory=list)  # (name, soft, hard)
    network_mode: str | None = None
    ipc_mode: str | None = None
    shm_size: str | None = None
    mem_limit: str | None = None
    memswap_limit: str | None = None
    init: bool = True  # docker-init as PID 1 forwards signals to the job and reaps its children

    def create_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``DockerClient.containers.create`` (docker SDK >= 7)."""
        from docker.types import DeviceRequest, Ulimit
        from docker.types import Mount as SdkMount

        kwargs: dict[str, object] = {
            "image": self.image,
            "command": self.command,
            "working_dir": self.working_dir,
            "environment": dict(self.environment),
            "mounts": [SdkMount(m.target, m.source, type="bind", read_only=m.read_only) for m in self.mounts],
            "labels": dict(self.labels),
            "init": self.init,
            "detach": True,
            "stdin_open": False,
            "tty": False,
        }
        optional = {
            "user": self.user,
            "devices": list(self.devices) or None,
            "cap_add": list(self.cap_add) or None,
            "network_mode": self.network_mode,
            "ipc_mode": self.ipc_mode,
            "shm_size": self.shm_size,
            "mem_limit": self.mem_limit,
            "memswap_limit": self.memswap_limit,
        }
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        if self.device_requests:
            kwargs["device_requests"] = [
                DeviceRequest(
                    count=r.count,
                    device_ids=list(r.device_ids) or None,
                    capabilities=[list(c) for c in r.capabilities],
                )
                for r in self.device_requests
            ]
        if self.ulimits:
            kwargs["ulimits"] = [Ulimit(name=n, soft=s, hard=h) for n, s, h in self.ulimits]
        return kwargs


# ---------------------------------------------------------------------------------------------- paths
def _mount_table(job: Job, options: DockerOptions, host: HostFacts) -> list[Mount]:
    """The bind mounts of a job: script folder, run folder, working directory, IPUoF config, volumes."""
    script_dir = Path(job.script_dir or job.cwd).absolute()
    mounts = [Mount(str(script_dir), SCRIPT_MOUNT, True), Mount(str(Path(job.run_dir).absolute()), RUN_MOUNT, False)]
    cwd = Path(job.cwd).absolute()
    if not any(_under(str(cwd), m.source) for m in mounts):
        mounts.append(Mount(str(cwd), CWD_MOUNT, True))
    if options.ipu_over_fabric:
        config = options.ipuof_config_path or job.env.get("IPUOF_CONFIG_PATH") or host.env.get("IPUOF_CONFIG_PATH")
        if config:
            config = Path(config).expanduser().absolute()
            target = IPUOF_DIR_MOUNT if config.is_dir() else IPUOF_FILE_MOUNT
            mounts.append(Mount(str(config), target, True))
    for volume in options.volumes:
        source, target, *mode = volume.split(":")
        mounts.append(Mount(str(Path(source).expanduser().absolute()), target, mode == ["ro"]))
    return mounts


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def container_path(host_path: str | os.PathLike, job: Job, options: DockerOptions | None = None) -> str | None:
    """Where the job sees ``host_path`` inside its container, or None when no mount covers it."""
    table = _mount_table(job, options or DockerOptions(), HostFacts(0, 0, {}, 0))
    for candidate in dict.fromkeys((os.path.abspath(host_path), os.path.realpath(host_path))):
        for mount in sorted(table, key=lambda m: len(m.source), reverse=True):
            for source in dict.fromkeys((mount.source, os.path.realpath(mount.source))):
                if _under(candidate, source):
                    return mount.target + candidate[len(source.rstrip("/")) :]
    return None


def _rewrite_host_paths(text: str, mounts: list[Mount]) -> str:
    """``text`` with every host path under a mount replaced by its container path."""
    for mount in sorted(mounts, key=lambda m: len(m.source), reverse=True):
        if mount.source == "/":
            continue  # would rewrite every absolute path
        pattern = r"(?<![\w./-])" + re.escape(mount.source.rstrip("/")) + r"(?=/|$|[\s:,;\"'=\]}])"
        text = re.sub(pattern, mount.target.replace("\\", r"\\"), text)
    return text


# ---------------------------------------------------------------------------------------- environment
def _resolve_user(user: str, host: HostFacts) -> str | None:
    return {"host": f"{host.uid}:{host.gid}", "image": None, "root": "0:0"}.get(user, user)


def _job_environment(job: Job, options: DockerOptions, kind: str, host: HostFacts, mounts: list[Mount]) -> dict[str, str]:
    env = {name: _rewrite_host_paths(value, mounts) for name, value in job.env.items() if name not in DROPPED_NAMES}
    env.setdefault("PYTHONUNBUFFERED", "1")  # without a terminal Python would hold output back until exit
    user = _resolve_user(options.user, host)
    if user and re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", user):
        env["HOME"] = "/tmp"  # an arbitrary uid has no home in the image; caches need a writable one
    if kind == "docker-ipu":
        _point_poplar_reports(env, JobPaths.under(RUN_MOUNT).poplar_report_dir)
    if options.ipu_over_fabric:
        ipuof = [m for m in mounts if m.target == IPUOF_FILE_MOUNT]
        if ipuof:
            env["IPUOF_CONFIG_PATH"] = IPUOF_FILE_MOUNT
        else:
            env.pop("IPUOF_CONFIG_PATH", None)  # a folder is found at /etc/ipuof.conf.d without it
    env.update(options.env)
    return env


def _point_poplar_reports(env: dict[str, str], report_dir: str) -> None:
    """Send Poplar's auto-reports into the run folder when the job asks for reports but names no folder."""
    try:
        engine_options = json.loads(env.get("POPLAR_ENGINE_OPTIONS", ""))
    except ValueError:
        return
    if isinstance(engine_options, dict) and any(k.startswith("autoReport.") for k in engine_options):
        engine_options.setdefault("autoReport.directory", report_dir)
        env["POPLAR_ENGINE_OPTIONS"] = json.dumps(engine_options)


def _command(job: Job, mounts: list[Mount]) -> list[str]:
    argv = [_rewrite_host_paths(arg, mounts) for arg in job.argv]
    if argv and os.path.isabs(argv[0]) and _PYTHON.match(os.path.basename(argv[0])) and not argv[0].startswith("/xlarun/"):
        argv[0] = "python3"  # a host interpreter (a virtualenv's python) does not exist in the image
    return argv


def run_id_of(job: Job) -> str:
    """The run id a job belongs to: ``XLARUN_RUN_ID`` in its environment, else its run folder's name."""
    return job.env.get("XLARUN_RUN_ID") or Path(job.run_dir).name


def translate_job(job: Job, options: DockerOptions, kind: str = "docker", host: HostFacts | None = None) -> ContainerSpec:
    """Everything the engine gets for ``job``: pure, given ``host`` (default: this machine's facts)."""
    try:
        options = options.for_kind(kind)
    except ValueError as exc:
        raise SpecError(f"backend: {exc}") from None
    host = host or HostFacts.detect()
    mounts = _mount_table(job, options, host)
    fabric = options.ipu_over_fabric
    wants_ipus = kind == "docker-ipu" or options.ipu_device_id is not None or fabric
    devices, caps, ulimits = options.ipu_settings(host.ipu_count) if wants_ipus else ([], [], [])
    labels = {
        **options.labels,
        LABEL_RUN: run_id_of(job),
        LABEL_OWNER: str(host.pid),
        "xlarun.kind": kind,
        "xlarun.version": __version__,
    }
    return ContainerSpec(
        image=options.image or DEFAULT_IMAGES[kind],
        command=_command(job, mounts),
        working_dir=container_path(job.cwd, job, options) or SCRIPT_MOUNT,
        environment=_job_environment(job, options, kind, host, mounts),
        user=_resolve_user(options.user, host),
        mounts=mounts,
        labels=labels,
        device_requests=options.gpu_requests(),
        devices=[*devices, *(d if d.count(":") == 2 else _device_triplet(d) for d in options.devices)],
        cap_add=list(dict.fromkeys([*caps, *options.cap_add])),
        ulimits=ulimits,
        network_mode="host" if fabric else options.network,
        ipc_mode="host" if fabric else options.ipc,
        shm_size=options.shm_size,
        mem_limit=options.mem_limit,
        memswap_limit=options.mem_limit,  # no swap beyond the limit, so passing it is an OOM, not a crawl
    )


def _device_triplet(device: str) -> str:
    host_path, *rest = device.split(":")
    return f"{host_path}:{rest[0] if rest else host_path}:rwm"
