"""Run a job in a container through the Docker SDK (kinds ``docker``, ``docker-cpu|gpu|ipu``).

:func:`~xlarun.capture.backends.docker_spec.translate_job` computes everything sent to the engine;
:class:`DockerBackend` sends it, streams the output live, enforces the deadline (docker's own
``wait(timeout=)`` is only an HTTP timeout), reports OOM kills, hands the run folder back to the
caller's uid, and always removes the container, also after Ctrl-C and errors.
"""

from __future__ import annotations

import codecs
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.capture.backends.base import Job, JobPaths, LaunchResult, OutputSink
from xlarun.capture.backends.docker_options import DockerOptions, GpuRequest, ipu_device_files, ipus_of_device_id
from xlarun.capture.backends.docker_spec import (
    CWD_MOUNT,
    DROPPED_NAMES,
    IPUOF_DIR_MOUNT,
    IPUOF_FILE_MOUNT,
    LABEL_OWNER,
    LABEL_RUN,
    RUN_MOUNT,
    SCRIPT_MOUNT,
    ContainerSpec,
    HostFacts,
    Mount,
    container_path,
    run_id_of,
    translate_job,
)
from xlarun.errors import EnvironmentProblem, InputError, SpecError, XlarunError
from xlarun.store.rows import OUTPUT_DIRS, RunStatus

if TYPE_CHECKING:  # the SDK is imported when a container is launched, not when xlarun is
    import docker

__all__ = [
    "CWD_MOUNT",
    "DROPPED_NAMES",
    "IPUOF_DIR_MOUNT",
    "IPUOF_FILE_MOUNT",
    "LABEL_OWNER",
    "LABEL_RUN",
    "RUN_MOUNT",
    "SCRIPT_MOUNT",
    "ContainerSpec",
    "DockerBackend",
    "DockerOptions",
    "GpuRequest",
    "HostFacts",
    "Mount",
    "container_path",
    "ipu_device_files",
    "ipus_of_device_id",
    "run_id_of",
    "run_in_image",
    "translate_job",
]

#: Image build arguments (labels ``xlarun.build-arg.*``) that name framework versions, for the manifest.
_VERSION_LABELS = {"jax_version": "jax", "jaxlib_version": "jaxlib", "tf_version": "tensorflow"}
_STOP_GRACE_S = 2  # SIGTERM -> SIGKILL at the deadline
_INTERRUPT_GRACE_S = 5  # SIGINT -> SIGKILL after Ctrl-C, so the job can flush what it has


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _OutputPump(threading.Thread):
    """Moves the container's demultiplexed output to the sink while the main thread keeps the deadline."""

    def __init__(self, frames: Any, sink: OutputSink) -> None:
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
    def from_spec(cls, spec: Any) -> DockerBackend:
        """The backend for a run spec's ``backend`` section: its ``kind`` and ``options``."""
        options = getattr(spec, "options", None)
        if options is None:  # the options may also sit in the section itself
            options = {
                name: getattr(spec, name) for name in DockerOptions.model_fields if getattr(spec, name, None) is not None
            } or None
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

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        """Run ``job`` in a fresh container and remove it afterwards, whatever happens.

        Raises :class:`EnvironmentProblem` when the container cannot be started (daemon down, image
        missing, no NVIDIA runtime, a device missing); returns FAILED for a job that exits non-zero or
        is killed for memory, TIMED_OUT at the deadline and INTERRUPTED after Ctrl-C or ``job.cancel``.
        """
        from xlarun.capture import images

        host = self._host or HostFacts.detect()
        spec = translate_job(job, self.options, self.kind, host)
        started = _utc_now()
        if getattr(job, "cancel", None) is not None and job.cancel.is_set():
            return LaunchResult(RunStatus.INTERRUPTED, None, started, started, details={"started": False})
        try:
            client = images.connect_docker()
            image = images.require_image(client, spec.image, pull=self.options.pull, kind=self.kind)
        except KeyboardInterrupt:
            return LaunchResult(RunStatus.INTERRUPTED, None, started, _utc_now(), details={"started": False})
        run_dir = Path(job.run_dir)
        _open_run_dir(run_dir, spec.user, host)
        try:
            result = _ContainerRun(client, spec, job, sink).execute()
        finally:
            handed_back = _give_run_dir_back(client, image.id, run_dir, host, spec.labels)
        info = images.image_info(image, spec.image)
        versions = {
            name: info.labels[f"xlarun.build-arg.{arg}"]
            for arg, name in _VERSION_LABELS.items()
            if info.labels.get(f"xlarun.build-arg.{arg}")
        }
        result.details.update(info.as_details(), engine=_engine_version(client), versions=versions)
        if handed_back:
            result.details["run_dir_chowned"] = handed_back
        return result


class _Cancelled(Exception):
    """The caller set ``job.cancel`` (a batch stopping its cells from another thread)."""


class _ContainerRun:
    """One container from creation to removal."""

    def __init__(self, client: docker.DockerClient, spec: ContainerSpec, job: Job, sink: OutputSink):
        self.client, self.spec, self.job, self.sink = client, spec, job, sink
        self.container: Any = None  # docker.models.containers.Container once created (docker-py has no type hints)
        self.stream_client: Any = None
        self.pump: _OutputPump | None = None
        self.name = "xlarun-" + re.sub(r"[^A-Za-z0-9_.-]", "-", spec.labels[LABEL_RUN])[:40] + "-" + secrets.token_hex(3)

    def execute(self) -> LaunchResult:
        import docker.errors

        from xlarun.capture.images import connect_docker

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
            return LaunchResult(
                RunStatus.TIMED_OUT,
                None,
                started,
                ended,
                details=details,
                error=f"killed at the {self.job.timeout_s:g} s deadline",
            )
        code = state.get("ExitCode")
        if state.get("OOMKilled"):
            limit = self.spec.mem_limit
            why = f"the {limit} memory limit (backend.options.mem_limit)" if limit else "the host's memory"
            return LaunchResult(
                RunStatus.FAILED,
                code,
                started,
                ended,
                details=details,
                error=f"out of memory: the kernel killed the job when it passed {why}",
            )
        status = RunStatus.SUCCEEDED if code == 0 else RunStatus.FAILED
        return LaunchResult(status, code, started, ended, details=details)

    def _details(self, **extra: Any) -> dict[str, object]:
        spec = self.spec
        return {
            "backend": "docker",
            "container_name": self.name,
            "container_id": self.container.id[:12] if self.container else None,
            "user": spec.user,
            "mem_limit": spec.mem_limit,
            "shm_size": spec.shm_size,
            "devices": list(spec.devices),
            "gpus": [asdict(r) for r in spec.device_requests] or None,
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


def run_in_image(
    image: str,
    argv: list[str],
    *,
    read_only: Iterable[str | os.PathLike] = (),
    writable: Iterable[str | os.PathLike] = (),
    timeout_s: float | None = None,
    gpus: object = None,
    sink: OutputSink | None = None,
) -> LaunchResult:
    """Run a tool (a replay runner found by :func:`xlarun.capture.images.runner_in_image`) inside ``image``.

    The image must be on the Docker host already (:func:`xlarun.capture.images.runner_in_image` checks it, with a
    hint to build or pull it); one that is not is an EnvironmentProblem.
    The given host folders are mounted at their own paths, so ``argv`` needs no rewriting; the tool
    runs as the caller's uid:gid without network, the container is always removed, and the result
    is the same :class:`LaunchResult` a job gets (``exit_code``, TIMED_OUT at ``timeout_s``).
    """
    from xlarun.capture import images

    host = HostFacts.detect()
    folders = [(str(Path(p).absolute()), True) for p in read_only] + [(str(Path(p).absolute()), False) for p in writable]
    spec = ContainerSpec(
        image=image,
        command=list(argv),
        working_dir=folders[-1][0] if folders else "/",
        environment={"PYTHONUNBUFFERED": "1"},
        user=f"{host.uid}:{host.gid}",
        mounts=[Mount(path, path, ro) for path, ro in folders],
        labels={LABEL_RUN: "tool", LABEL_OWNER: str(host.pid), "xlarun.kind": "tool"},
        device_requests=DockerOptions(gpus=gpus).gpu_requests(),
        network_mode="none",
    )
    client = images.connect_docker()
    job = Job(argv=list(argv), env={}, cwd=Path(spec.working_dir), run_dir=Path(spec.working_dir), timeout_s=timeout_s)
    return _ContainerRun(client, spec, job, sink or (lambda stream, text: None)).execute()


def _start_problem(exc: Exception, spec: ContainerSpec) -> XlarunError:
    """A clear message for an engine that refused to create or start the container."""
    import docker.errors

    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(exc, docker.errors.ImageNotFound):
        return EnvironmentProblem(f"image {spec.image} is not on this Docker host: {text}", hint="build or pull it first")
    missing = re.search(r"bind source path does not exist: (\S+)", text)
    if missing:
        return InputError(
            f"cannot mount {missing.group(1)} into the container: it does not exist",
            hint="fix backend.options.volumes or the spec's paths",
        )
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


def _give_run_dir_back(client: docker.DockerClient, image_id: str, run_dir: Path, host: HostFacts, labels: dict) -> bool:
    """Make the caller the owner of everything the job wrote (it may have run as another uid).

    Returns True when files had to be handed back, by a short root container running ``chown -R``.
    """
    import docker.errors
    from docker.types import Mount as SdkMount

    foreign = any(
        os.lstat(os.path.join(root, name)).st_uid != host.uid
        for root, dirs, files in os.walk(run_dir)
        for name in (*dirs, *files)
    )
    if foreign:
        try:
            client.containers.run(
                image_id,
                entrypoint=["chown", "-R", f"{host.uid}:{host.gid}", RUN_MOUNT],
                user="0:0",
                mounts=[SdkMount(RUN_MOUNT, str(run_dir.absolute()), type="bind")],
                network_mode="none",
                labels={**labels, "xlarun.kind": "chown"},
                remove=True,
            )
        except docker.errors.DockerException:
            pass  # the files stay readable (the job's umask); only deleting them needs the owner
    for folder in (run_dir, *(run_dir / n for n in OUTPUT_DIRS)):
        if folder.exists() and folder.stat().st_uid == host.uid:
            folder.chmod(0o755)
    return foreign


def _engine_version(client: docker.DockerClient) -> str | None:
    try:
        return client.version().get("Version")
    except Exception:  # only for the manifest; never fail a finished run over it
        return None
