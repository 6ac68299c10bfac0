"""Run a job in a container through the Docker SDK (kinds ``docker``, ``docker-cpu|gpu|ipu``).

Two halves: :func:`translate_job` is pure and computes everything sent to the engine (a
:class:`ContainerSpec`: image, command, environment, mounts, devices, limits, labels), so tests and
``--dry-run`` can inspect it exactly; :class:`DockerBackend` sends it, streams the output, enforces the
deadline, and always removes the container.

Inside the container the script's folder is ``/xlarun/script`` (read-only), the run folder is
``/xlarun/run`` (read-write) and a working directory outside both is ``/xlarun/cwd`` (read-only).
Host paths in the job's command line and environment are rewritten to those mount points.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .. import __version__
from .base import OUTPUT_DIRS, Job, JobPaths, LaunchResult, OutputSink, RunStatus
from .docker_options import (  # noqa: F401  (ipu helpers re-exported for callers)
    DEFAULT_IMAGES, DockerOptions, GpuRequest, ipu_device_files, ipus_of_device_id,
)
from ..errors import EnvironmentProblem, InputError, SpecError, XlarunError

if TYPE_CHECKING:  # the SDK is imported when a container is launched, not when xlarun is
    import docker

SCRIPT_MOUNT = "/xlarun/script"
RUN_MOUNT = "/xlarun/run"
CWD_MOUNT = "/xlarun/cwd"
IPUOF_FILE_MOUNT = "/etc/xlarun/ipuof.conf"
IPUOF_DIR_MOUNT = "/etc/ipuof.conf.d"  # where Graphcore's runtime looks when IPUOF_CONFIG_PATH is unset
#: Every container xlarun starts carries this label; its value is the run id.
LABEL_RUN = "xlarun.run"
#: Host-specific variables that would break the container when a job's environment was copied from the
#: host; set them through ``options.env`` when the image needs them.
DROPPED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "HOSTNAME", "TERM", "TMPDIR",
    "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "DISPLAY", "SSH_AUTH_SOCK", "DOCKER_HOST", "DOCKER_CONFIG",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",  # GPUs are renumbered from 0 in the container
})
#: Image build arguments (labels ``xlarun.build-arg.*``) that name framework versions, for the manifest.
_VERSION_LABELS = {"jax_version": "jax", "jaxlib_version": "jaxlib", "tf_version": "tensorflow"}
_PYTHON = re.compile(r"^python[0-9.]*$")
_STOP_GRACE_S = 2  # SIGTERM -> SIGKILL at the deadline
_INTERRUPT_GRACE_S = 5  # SIGINT -> SIGKILL after Ctrl-C, so the job can flush what it has


@dataclass(frozen=True)
class HostFacts:
    """What :func:`translate_job` needs to know about the calling host (explicit, so tests can fix it)."""

    uid: int
    gid: int
    env: Mapping[str, str]  # the caller's environment (IPUOF_CONFIG_PATH)
    ipu_count: int  # /dev/ipuN devices present

    @classmethod
    def detect(cls) -> "HostFacts":
        ipus = [p for p in Path("/dev").glob("ipu*") if re.fullmatch(r"ipu[0-9]+", p.name)]
        return cls(uid=os.getuid(), gid=os.getgid(), env=dict(os.environ), ipu_count=len(ipus))


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
        from docker.types import DeviceRequest, Mount as SdkMount, Ulimit

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
                    count=r.count, device_ids=list(r.device_ids) or None,
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
                    return mount.target + candidate[len(source.rstrip("/")):]
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
    labels = {**options.labels, LABEL_RUN: run_id_of(job), "xlarun.kind": kind, "xlarun.version": __version__}
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


# ------------------------------------------------------------------------------------------- running
def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _OutputPump(threading.Thread):
    """Moves the container's demultiplexed output to the sink while the main thread keeps the deadline."""

    def __init__(self, frames, sink: OutputSink):
        super().__init__(name="xlarun-docker-output", daemon=True)
        self._frames = frames
        self._sink = sink
        self._closed = False
        self._decoders = {n: codecs.getincrementaldecoder("utf-8")(errors="replace") for n in ("stdout", "stderr")}

    def finish(self, timeout_s: float) -> None:
        """Wait for the rest of the output; after that the sink (closed by the caller) gets nothing more."""
        self.join(timeout=timeout_s)
        self._closed = True

    def run(self) -> None:
        try:
            for stdout, stderr in self._frames:
                for name, chunk in (("stdout", stdout), ("stderr", stderr)):
                    if chunk:
                        self._emit(name, self._decoders[name].decode(chunk))
        except Exception:  # the stream ends with an error when the container is removed under it
            pass
        for name, decoder in self._decoders.items():
            self._emit(name, decoder.decode(b"", final=True))

    def _emit(self, name: str, text: str) -> None:
        if text and not self._closed:
            self._sink(name, text)


class DockerBackend:
    """Runs jobs in containers of one kind (``docker``, ``docker-cpu``, ``docker-gpu``, ``docker-ipu``)."""

    def __init__(self, kind: str = "docker-cpu", options: DockerOptions | None = None, host: HostFacts | None = None):
        try:
            self.options = (options or DockerOptions()).for_kind(kind)
        except ValueError as exc:
            raise SpecError(f"backend: {exc}") from None
        self.kind = kind
        self._host = host

    @classmethod
    def from_spec(cls, spec) -> "DockerBackend":
        """The backend for a run spec's ``backend`` section: its ``kind`` and ``options``."""
        options = getattr(spec, "options", None)
        if isinstance(options, dict):
            try:
                options = DockerOptions(**options)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise SpecError(f"backend.options: {exc}") from None
        return cls(spec.kind, options)

    def job_paths(self, run_dir: Path) -> JobPaths:
        """The run folder is always ``/xlarun/run`` inside the container."""
        return JobPaths.under(RUN_MOUNT)

    def container_path(self, host_path: str | os.PathLike, job: Job) -> str | None:
        """Where the job sees ``host_path``; None when no mount covers it."""
        return container_path(host_path, job, self.options)

    def translate(self, job: Job) -> ContainerSpec:
        """What :meth:`launch` would send to the engine for ``job``."""
        return translate_job(job, self.options, self.kind, self._host)

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        """Run ``job`` in a fresh container and remove it afterwards, whatever happens.

        Raises :class:`EnvironmentProblem` when the container cannot be started (daemon down, image
        missing, no NVIDIA runtime, a device missing); returns FAILED for a job that exits non-zero or
        is killed for memory, TIMED_OUT at the deadline and INTERRUPTED after Ctrl-C or ``job.cancel``.
        """
        from .. import images

        host = self._host or HostFacts.detect()
        spec = translate_job(job, self.options, self.kind, host)
        started = _utc_now()
        if getattr(job, "cancel", None) is not None and job.cancel.is_set():
            return LaunchResult(RunStatus.INTERRUPTED, None, started, started, error="cancelled before the job started")
        try:
            client = images.connect_docker()
            image = images.require_image(client, spec.image, pull=self.options.pull, kind=self.kind)
        except KeyboardInterrupt:
            return LaunchResult(RunStatus.INTERRUPTED, None, started, _utc_now(), error="interrupted before the job started")
        run_dir = Path(job.run_dir)
        _open_run_dir(run_dir, spec.user, host)
        try:
            result = _ContainerRun(client, spec, job, sink).execute()
        finally:
            handed_back = _give_run_dir_back(client, image.id, run_dir, host, spec.labels[LABEL_RUN])
        info = images.image_info(image, spec.image)
        versions = {name: info.labels[f"xlarun.build-arg.{arg}"] for arg, name in _VERSION_LABELS.items()
                    if info.labels.get(f"xlarun.build-arg.{arg}")}
        result.details.update(info.as_details(), engine=_engine_version(client), versions=versions)
        if handed_back:
            result.details["run_dir_chowned"] = handed_back
        return result


class _Cancelled(Exception):
    """The caller set ``job.cancel`` (a batch stopping its cells from another thread)."""


class _ContainerRun:
    """One container from creation to removal."""

    def __init__(self, client: "docker.DockerClient", spec: ContainerSpec, job: Job, sink: OutputSink):
        self.client, self.spec, self.job, self.sink = client, spec, job, sink
        self.container = None
        self.stream_client = None
        self.pump: _OutputPump | None = None
        self.name = "xlarun-" + re.sub(r"[^A-Za-z0-9_.-]", "-", spec.labels[LABEL_RUN])[:40] + "-" + secrets.token_hex(3)

    def execute(self) -> LaunchResult:
        import docker.errors

        from ..images import connect_docker

        started = _utc_now()
        try:
            try:
                self.container = self.client.containers.create(name=self.name, **self.spec.create_kwargs())
                # Attach before start so no output is missed, on a connection without read timeout:
                # a job may stay silent for longer than any HTTP timeout.
                self.stream_client = connect_docker(timeout=None)
                frames = self.stream_client.api.attach(
                    self.container.id, stdout=True, stderr=True, stream=True, logs=True, demux=True
                )
                self.pump = _OutputPump(frames, self.sink)
                self.pump.start()
                self.container.start()
            except docker.errors.APIError as exc:
                raise _start_problem(exc, self.spec) from None
            started = _utc_now()
            outcome = self._wait(self.job.timeout_s)
            self.pump.finish(timeout_s=10)
            return self._result(outcome, self._state(), started)
        except (KeyboardInterrupt, _Cancelled) as stop:
            self._stop("SIGINT", _INTERRUPT_GRACE_S)
            why = "cancelled" if isinstance(stop, _Cancelled) else "interrupted (Ctrl-C)"
            return LaunchResult(RunStatus.INTERRUPTED, None, started, _utc_now(), error=why, details=self._details())
        finally:
            if self.pump is not None:
                self.pump.finish(timeout_s=5)  # the job's last words (a traceback after SIGINT) belong to the run
            self._remove()
            if self.stream_client is not None:
                self.stream_client.close()

    def _wait(self, timeout_s: float | None) -> str:
        """'exited' or 'timed_out'; polls so Ctrl-C and the deadline are honoured within a second."""
        import requests

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        cancel = getattr(self.job, "cancel", None)
        while True:
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                self._stop("SIGTERM", _STOP_GRACE_S)
                return "timed_out"
            try:
                self.container.wait(timeout=max(0.05, min(1.0, remaining if remaining is not None else 1.0)))
                return "exited"
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
                if isinstance(exc, requests.exceptions.ConnectionError) and "timed out" not in str(exc).lower():
                    raise EnvironmentProblem(f"lost the Docker daemon while the job ran: {exc}") from None

    def _stop(self, signal: str, grace_s: float) -> None:
        """Signal the job, give it ``grace_s`` to end, then kill it; a second Ctrl-C goes straight to kill."""
        import docker.errors

        try:
            self.container.kill(signal=signal)
            end = time.monotonic() + grace_s
            while time.monotonic() < end:
                self.container.reload()
                if self.container.status != "running":
                    return
                time.sleep(0.1)
            self.container.kill()
        except (docker.errors.APIError, KeyboardInterrupt, AttributeError):
            pass  # already gone, or no container yet; removal below forces the rest

    def _state(self) -> dict:
        self.container.reload()
        return self.container.attrs.get("State", {})

    def _result(self, outcome: str, state: dict, started: str) -> LaunchResult:
        ended = _utc_now()
        details = self._details(oom_killed=bool(state.get("OOMKilled")), container_exit_code=state.get("ExitCode"))
        if outcome == "timed_out":
            return LaunchResult(RunStatus.TIMED_OUT, None, started, ended, details=details,
                                error=f"killed at the {self.job.timeout_s:g} s deadline")
        code = state.get("ExitCode")
        if state.get("OOMKilled"):
            limit = self.spec.mem_limit
            why = f"the {limit} memory limit (backend.options.mem_limit)" if limit else "the host's memory"
            return LaunchResult(RunStatus.FAILED, code, started, ended, details=details,
                                error=f"out of memory: the kernel killed the job when it passed {why}")
        status = RunStatus.SUCCEEDED if code == 0 else RunStatus.FAILED
        return LaunchResult(status, code, started, ended, details=details)

    def _details(self, **extra) -> dict[str, object]:
        spec = self.spec
        return {
            "backend": "docker", "container_name": self.name,
            "container_id": self.container.id[:12] if self.container else None,
            "user": spec.user, "mem_limit": spec.mem_limit, "shm_size": spec.shm_size,
            "devices": list(spec.devices), "gpus": [asdict(r) for r in spec.device_requests] or None,
            **extra,
        }

    def _remove(self) -> None:
        """Remove the container; retried once if a second Ctrl-C lands in the middle."""
        import docker.errors

        if self.container is None:  # interrupted between create and its answer: find it by name
            try:
                self.container = self.client.containers.get(self.name)
            except docker.errors.DockerException:
                return
        for _ in range(3):
            try:
                self.container.remove(force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if "already in progress" in str(exc):
                    return
                time.sleep(0.2)
            except KeyboardInterrupt:
                continue


def _start_problem(exc: Exception, spec: ContainerSpec) -> XlarunError:
    """A clear message for an engine that refused to create or start the container."""
    text = getattr(exc, "explanation", None) or str(exc)
    missing = re.search(r"bind source path does not exist: (\S+)", text)
    if missing:
        return InputError(f"cannot mount {missing.group(1)} into the container: it does not exist",
                          hint="fix backend.options.volumes or the spec's paths")
    if spec.device_requests and ("could not select device driver" in text or "nvidia" in text.lower()):
        return EnvironmentProblem(
            "no NVIDIA container runtime on this Docker host: the job asks for GPUs "
            f"({_describe_gpus(spec)}) but Docker cannot hand them over",
            hint="install nvidia-container-toolkit and restart Docker (`sudo nvidia-ctk runtime configure "
            "--runtime=docker && sudo systemctl restart docker`), or run on docker-cpu",
        )
    device = re.search(r'custom device "([^"]+)"', text)
    if device:
        return EnvironmentProblem(
            f"device {device.group(1)} does not exist on the Docker host",
            hint="check the IPU driver and device ids with `gc-info -l`, or fix backend.options.devices / ipu_device_id",
        )
    return EnvironmentProblem(f"Docker could not start the container: {text}")


def _describe_gpus(spec: ContainerSpec) -> str:
    request = spec.device_requests[0]
    if request.device_ids:
        return "devices " + ",".join(request.device_ids)
    return "all GPUs" if request.count == -1 else f"{request.count} GPU(s)"


# ------------------------------------------------------------------------------- run folder ownership
def _open_run_dir(run_dir: Path, user: str | None, host: HostFacts) -> None:
    """Create the output folders; when the job runs as another non-root uid, let it write there."""
    for name in OUTPUT_DIRS:
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    if user is None or (user != "0:0" and user.split(":")[0] != str(host.uid)):
        for folder in (run_dir, *(run_dir / n for n in OUTPUT_DIRS)):
            folder.chmod(0o777)


def _give_run_dir_back(client: "docker.DockerClient", image_id: str, run_dir: Path, host: HostFacts, run_id: str) -> bool:
    """Make the caller the owner of everything the job wrote (it may have run as another uid).

    Returns True when files had to be handed back, by a short root container running ``chown -R``.
    """
    import docker.errors
    from docker.types import Mount as SdkMount

    foreign = any(
        os.lstat(os.path.join(root, name)).st_uid != host.uid
        for root, dirs, files in os.walk(run_dir) for name in (*dirs, *files)
    )
    if foreign:
        try:
            client.containers.run(
                image_id, entrypoint=["chown", "-R", f"{host.uid}:{host.gid}", RUN_MOUNT], user="0:0",
                mounts=[SdkMount(RUN_MOUNT, str(run_dir.absolute()), type="bind")], network_mode="none",
                labels={LABEL_RUN: run_id, "xlarun.kind": "chown"}, remove=True,
            )
        except docker.errors.DockerException:
            pass  # the files stay readable (the job's umask); only deleting them needs the owner
    for folder in (run_dir, *(run_dir / n for n in OUTPUT_DIRS)):
        if folder.exists() and folder.stat().st_uid == host.uid:
            folder.chmod(0o755)
    return foreign


def _engine_version(client: "docker.DockerClient") -> str | None:
    try:
        return client.version().get("Version")
    except Exception:  # only for the manifest; never fail a finished run over it
        return None
