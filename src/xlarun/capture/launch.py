"""``capture``: spec -> launch -> archive -> index, the pipeline behind ``xlarun capture``."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.bounded_read import read_regular
from xlarun.capture.backends import make_backend
from xlarun.capture.backends.base import Job, LaunchResult
from xlarun.capture.backends.process_failure import raised_line
from xlarun.capture.flags import (
    compose_env,
    donation_abort_cause,
    donation_noise_note,
    redact_env,
    snapshot_donation_warning,
    where_flag_comes_from,
)
from xlarun.capture.known_flags import FlagNameCache, FlagRejection, KnownXlaFlags, find_flag_rejection, probe_known_xla_flags
from xlarun.capture.log_sink import LogSink
from xlarun.capture.oom import oom_cause, oom_kills
from xlarun.capture.profile_job import PROFILED, profiled_argv
from xlarun.capture.publish import RemotePush, check_remote, push_captured
from xlarun.capture.spec_yaml import LoadedSpec, detect_framework, load_spec
from xlarun.capture.versions import VersionCache
from xlarun.console import warn
from xlarun.errors import EnvironmentProblem, StoreError, XlarunError, write_trouble_words
from xlarun.interrupts import StopRequest, exit_code_for, stop_on_signals
from xlarun.killpoints import kill_point
from xlarun.store.facade import LocalStore
from xlarun.store.manifest import Manifest, git_facts, host_facts
from xlarun.store.rows import FileNote, ModuleInfo, RunStatus, StoredFile, utc_now

if TYPE_CHECKING:
    from xlarun.store.archive import OutputArchiver

#: Called while archiving: (files done, files total).
ArchiveProgress = Callable[[int, int], None]

NO_DUMP_WARNING = (
    "the run produced no XLA dump: nothing was compiled with XLA, or every compile hit a cache "
    "(JAX: jit something; TF: use jit_compile=True or tensorflow.auto_jit)"
)


@dataclass
class CaptureResult:
    """What a capture produced. ``modules`` lists the main program first."""

    run_id: str
    status: RunStatus
    exit_code: int | None
    run_dir: Path
    manifest: Manifest
    modules: list[ModuleInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    flag_rejection: FlagRejection | None = None  # the job's XLA refused flags and aborted
    signal: str | None = None  # the signal that stopped xlarun (SIGINT, SIGTERM, SIGHUP), if one did
    stderr_tail: str = ""  # the last lines of a job's stderr that failed before XLA compiled anything
    push: RemotePush | None = None  # the push to the spec's `remote:`, when it names one

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.SUCCEEDED and self.manifest.files > 0


def _ready_for_after_the_job() -> None:
    """Import, while the job runs, what only archiving and indexing its output need (~20 ms that a short
    job's capture would otherwise add after it)."""
    import importlib

    for module in ("xlarun.hlo.text", "xlarun.hlo.scan", "xlarun.store.ingest"):
        importlib.import_module(module)


def _in_background(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """Start ``fn(*args)`` in a thread; the returned function waits for its result (None if it raised)."""
    box: dict[str, Any] = {}

    def run() -> None:
        box["value"] = fn(*args)

    thread = threading.Thread(target=run, name=f"xlarun-{fn.__name__}", daemon=True)
    thread.start()

    def result() -> Any:
        thread.join()
        return box.get("value")

    return result


def job_argv(loaded: LoadedSpec, backend_kind: str) -> list[str]:
    """The command line of the job: interpreter, script, arguments."""
    python = loaded.spec.python or (loaded.python if backend_kind == "local" else "python3")
    return [python, str(loaded.script), *loaded.spec.args]


def job_framework(loaded: LoadedSpec) -> str:
    """The spec's framework, or the one its script imports for ``auto`` ("unknown" when none)."""
    if loaded.spec.framework != "auto":
        return loaded.spec.framework
    return detect_framework(loaded.script) or "unknown"


def _run_under_profiler(job: Job, loaded: LoadedSpec, framework: str, dump_dir: str) -> str | None:
    """Run the job under its framework's profiler when the spec asks (``profile:``); the warning when it cannot be."""
    if not loaded.spec.profile.enabled:
        return None
    if framework not in PROFILED:
        return f"profile: only JAX and TensorFlow jobs are profiled, and this one is {framework}: no profile recorded"
    job.argv = profiled_argv(job.argv, dump_dir, loaded.spec.profile, framework)
    return None


def probe_job_xla_flags(loaded: LoadedSpec, base_env: dict[str, str], cache: FlagNameCache | None = None) -> KnownXlaFlags | None:
    """The XLA flags the job's framework knows, read from its library as the job's interpreter finds it;
    None when that cannot be told, and then every flag is kept."""
    if loaded.spec.backend.kind != "local":
        # the framework lives in the image: reading its library would start a container (seconds) on
        # every capture, so container jobs keep every flag and an abort is explained afterwards instead
        return None
    env = {**base_env, **loaded.spec.env}
    python = job_argv(loaded, "local")[0]
    return probe_known_xla_flags(
        job_framework(loaded), python, env, script_dir=str(loaded.script.parent), cwd=str(loaded.workdir), cache=cache
    )


def _flag_rejection(
    staging: Path, loaded: LoadedSpec, base_env: dict[str, str], known: KnownXlaFlags | None
) -> FlagRejection | None:
    """The flags the job's log says its XLA refused, each with where it came from; a flag the job's
    probed registry holds is not blamed (``known``: that registry, None when it could not be read)."""
    for name in ("stderr.log", "stdout.log"):
        rejection = find_flag_rejection(_log_tail(staging / name))
        if rejection is not None:
            rejection = rejection.checked(known)
            advice = "; ".join(f"--{flag}: {where_flag_comes_from(loaded.spec, base_env, flag)}" for flag in rejection.names)
            return replace(rejection, advice=advice)
    return None


def _log_tail(path: Path, limit: int = 256 * 1024) -> str:
    """The end of a log: XLA's fatal flag error is the last thing a job aborting on it writes."""
    try:  # the job could have put a FIFO or a link there: never waited on, never followed
        return read_regular(path, limit, tail=True).decode("utf-8", errors="replace")
    except OSError:
        return ""


def capture(
    spec: LoadedSpec | str | Path,
    store: LocalStore | None = None,
    *,
    echo: bool = False,
    echo_prefix: str = "",
    on_archive: ArchiveProgress | None = None,
    batch_id: str | None = None,
    matrix: dict[str, Any] | None = None,
    base_env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
    stop: StopRequest | None = None,
) -> CaptureResult:
    """Run a spec's job with its dump environment, archive everything it wrote, and index it.

    A job that fails, times out or is interrupted is archived all the same; look at
    ``result.status``. Called from the main thread, SIGINT, SIGTERM and SIGHUP stop the job's process
    group and the run is archived as ``interrupted`` (``result.signal`` names the signal); ``stop`` is
    shared by the captures of one batch. Raises :class:`XlarunError` only when nothing could be run or kept.
    A spec naming a ``remote:`` has the committed run pushed there; ``result.push`` says how that went.
    """
    stop = stop or StopRequest(cancel)
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    store = store or LocalStore.open()
    if loaded.spec.remote:  # a remote that is not named stops the capture before anything runs
        check_remote(loaded.spec.remote)
    with stop_on_signals(stop):
        result = _capture(
            loaded,
            store,
            echo=echo,
            echo_prefix=echo_prefix,
            on_archive=on_archive,
            batch_id=batch_id,
            matrix=matrix,
            base_env=base_env,
            stop=stop,
        )
    if loaded.spec.remote and result.signal is None:  # committed: pushed unless a signal stopped the capture
        result.push = push_captured(store, result.run_id, loaded.spec.remote)
    return result


def _capture(
    spec: LoadedSpec | str | Path,
    store: LocalStore | None,
    *,
    echo: bool,
    echo_prefix: str,
    on_archive: ArchiveProgress | None,
    batch_id: str | None,
    matrix: dict[str, Any] | None,
    base_env: dict[str, str] | None,
    stop: StopRequest,
) -> CaptureResult:
    loaded = spec if isinstance(spec, LoadedSpec) else load_spec(spec)
    store = store or LocalStore.open()
    backend = make_backend(loaded.spec.backend, loaded.spec.processes)
    framework = job_framework(loaded)

    if base_env is None:
        base_env = dict(os.environ) if backend.kind == "local" else {}
    known_xla_flags = probe_job_xla_flags(loaded, base_env)  # ~1 ms once cached
    donation = snapshot_donation_warning(loaded.spec, known_xla_flags)
    if donation and echo:
        warn(donation)  # before the job: an abort would end it before any line of ours

    run_id, staging = store.begin_run()
    paths = backend.job_paths(staging)
    composed = compose_env(loaded.spec, paths, base_env, known_xla_flags)
    job = Job(
        argv=job_argv(loaded, backend.kind),
        env=composed.env,
        cwd=loaded.workdir,
        run_dir=staging,
        timeout_s=loaded.spec.timeout,
        script_dir=loaded.script.parent,
    )
    job.cancel = stop.cancel
    user_command = list(job.argv)  # the manifest's: what the spec runs, not the profiler's bootstrap around it
    profile_warning = _run_under_profiler(job, loaded, framework, paths.dump_dir)
    (staging / "spec.yaml").write_text(loaded.text or "", encoding="utf-8")
    resolved = {
        "spec": loaded.spec.model_dump(mode="json"),
        "spec_path": str(loaded.path),
        "script": str(loaded.script),
        "workdir": str(loaded.workdir),
        "framework": framework,
    }
    (staging / "spec.resolved.json").write_text(json.dumps(resolved, indent=2), encoding="utf-8")

    # package versions (a probe of the job's interpreter, kept per install) and git facts take a few
    # subprocesses: gather them while the job runs
    versions_later = (
        _in_background(VersionCache.default().versions, job.argv[0], {**base_env, **loaded.spec.env})
        if backend.kind == "local"
        else lambda: {}
    )
    git_later = _in_background(git_facts, loaded.script.parent)
    host_later = _in_background(host_facts)  # the processor's name is a `uname -p` process
    job.env.setdefault("XLARUN_RUN_ID", run_id)
    sink = LogSink(staging, echo, echo_prefix)
    # dump files are archived as they settle, on a core the job leaves free, and the module texts the
    # index needs are parsed then too. A local job's archiver starts once the job runs (the backend calls
    # get_ready), so that its imports overlap the job's start; a container's, which has no such call, before.
    archivers: list[OutputArchiver] = []

    def start_archiving() -> None:
        if not archivers:
            archiver = store.archiver(staging, progress=on_archive)
            archiver.start()
            archivers.append(archiver)

    def get_ready() -> None:
        start_archiving()
        _ready_for_after_the_job()

    if backend.kind != "local":
        start_archiving()
    job.while_running = get_ready
    kills_before = oom_kills() if backend.kind == "local" else None
    t0 = time.monotonic()
    started = utc_now()
    try:
        result: LaunchResult = backend.launch(job, sink)
    except EnvironmentProblem as exc:  # daemon down, image missing...: still a run, recorded as an error
        result = LaunchResult(
            RunStatus.ERROR, None, started, utc_now(), error=exc.one_line(), details={"environment_problem": True}
        )
    except BaseException:
        for archiver in archivers:
            archiver.abandon()
        raise
    finally:
        sink.close()
    duration = time.monotonic() - t0
    if not archivers:  # the job never ran (or getting ready failed): what it may have written is archived now
        archivers.append(store.archiver(staging, progress=on_archive))
    (archiver,) = archivers

    kill_point("job-ended")
    warnings = list(composed.warnings) + ([profile_warning] if profile_warning else [])
    if result.status == RunStatus.FAILED:  # read before the archive takes the dump's raw files away
        kills = (kills_before, oom_kills() if kills_before is not None else None)
        oom = oom_cause(result.exit_code, _log_tail(staging / "stderr.log"), staging / "dump", kills, run_id)
        warnings += [oom] if oom else []
    # the shared lock from here to the commit: gc cannot take this run's blobs between archive and rename
    with stop.archiving(run_id, staging), store.lock():
        try:
            files: list[StoredFile] = archiver.finish()
        except (OSError, sqlite3.Error, StoreError) as exc:  # a full disk, most likely
            raise _not_committed(run_id, staging, exc) from None
        failed = result.status == RunStatus.FAILED
        rejection = _flag_rejection(staging, loaded, base_env, known_xla_flags) if failed else None
        stderr_tail = (
            (raised_line(result.details) or last_lines(_log_tail(staging / "stderr.log"))) if failed and not files else ""
        )
        aborted = donation_abort_cause(result.exit_code, _log_tail(staging / "stderr.log")) if failed else None
        if aborted or (donation and not echo):
            warnings.append(aborted or donation or "")
        if rejection is not None:
            warnings.append(rejection.explain())
        elif not files and failed:
            warnings.append(f"the job failed before XLA compiled anything{_ending(stderr_tail)}")
        elif not files and result.status == RunStatus.SUCCEEDED:
            warnings.append(NO_DUMP_WARNING)
        if result.error:
            warnings.append(result.error)
        if sink.error:
            warnings.append(sink.error)
        if sink.hidden:
            warnings.append(donation_noise_note(sink.hidden))
        for said in ("stopped_leftovers", "stopped"):  # what was stopped: leftovers, the other processes of a job
            if result.details.get(said):
                warnings.append(str(result.details[said]))
        signal_name = stop.signal_name
        if result.status == RunStatus.INTERRUPTED and result.details.get("started") is False:
            warnings.append(f"stopped{f' by {signal_name}' if signal_name else ''} before the job started: nothing ran")
        elif signal_name and result.status == RunStatus.INTERRUPTED:
            warnings.append(
                f"stopped by {signal_name}: the job's process group was stopped, and what it wrote until then is archived"
            )
        warnings += file_note_warnings(archiver.notes, run_id)
        reported = result.details.get("versions")  # the image's framework versions (docker backend)
        backend_versions = reported if isinstance(reported, dict) else {}
        manifest = Manifest(
            run_id=run_id,
            name=loaded.spec.name,
            status=result.status.value,
            exit_code=result.exit_code,
            error=result.error,
            started=result.started,
            ended=result.ended,
            duration_s=round(duration, 3),
            spec_path=str(loaded.path),
            command=user_command,
            xlarun_command=list(sys.argv),
            cwd=str(job.cwd),
            backend=backend.kind,
            backend_details=result.details,
            framework=framework,
            env_delta=redact_env(composed.delta),
            xla_flags=composed.xla_flags,
            tf_xla_flags=composed.tf_xla_flags,
            versions={**(versions_later() or {}), **{k: str(v) for k, v in backend_versions.items()}},
            host=host_later() or host_facts(),
            git=git_later(),
            warnings=warnings,
            batch_id=batch_id,
            matrix=matrix,
            tags=loaded.spec.tags,
            files=len(files),
            dump_bytes=sum(f.size for f in files),
            signal=signal_name,
            file_notes=[note.to_json() for note in archiver.notes],
        )
        try:
            run_dir, unindexed = store.commit_indexed(run_id, staging, files, {"manifest.json": manifest.to_json()})
        except OSError as exc:
            raise _not_committed(run_id, staging, exc) from None
        if unindexed is not None:
            warnings.append(f"run {run_id} is committed but not yet indexed ({unindexed}); {store.NOT_YET_INDEXED_ADVICE}")
            return CaptureResult(
                run_id, result.status, result.exit_code, run_dir, manifest, [], warnings, rejection, stop.signal_name, stderr_tail
            )
        kill_point("indexed")
    modules = store.index.modules(run_id)
    return CaptureResult(
        run_id, result.status, result.exit_code, run_dir, manifest, modules, warnings, rejection, stop.signal_name, stderr_tail
    )


def _not_committed(run_id: str, staging: Path, exc: Exception) -> StoreError:
    why = exc.message if isinstance(exc, StoreError) else (getattr(exc, "strerror", None) or str(exc))
    if (words := write_trouble_words(exc)) and words not in why:
        why = f"{words} ({why})"  # "the disk is full (No space left on device)"
    return StoreError(
        f"archiving run {run_id} failed: {why}; the job's output is kept in {staging}",
        "free disk space, then `xlarun recover` makes it a run marked incomplete (`xlarun gc --discard-recoverable` deletes it)",
    )


def file_note_warnings(notes: list[FileNote], run_id: str) -> list[str]:
    """One warning for the dump folder's paths that were not archived, one for those archived with a caveat."""
    out = []
    skipped = [n for n in notes if not n.archived]
    caveats = [n for n in notes if n.archived]
    for group, what in ((skipped, "not archived"), (caveats, "archived with a caveat")):
        if group:
            shown = "; ".join(f"{n.path}: {n.why}" for n in group[:3])
            more = f"; and {len(group) - 3} more" if len(group) > 3 else ""
            out.append(f"{len(group)} file(s) of the dump folder {what}: {shown}{more} (`xlarun files {run_id}` lists them)")
    return out


def job_ending(exit_code: int | None, backend: str) -> str:
    """How a failed job ended, as a user reads it: a signal by its name ("the job was killed by SIGABRT
    (signal 6)"), from a negative exit code (a local process) or Docker's 128+N, else the exit code."""
    number = -exit_code if exit_code is not None and exit_code < 0 else None
    if backend.startswith("docker") and exit_code is not None and 128 < exit_code <= 128 + 64:
        number = exit_code - 128
    if number is None:
        return f"the job exited with code {exit_code}"
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"the job was killed by signal {number}"
    return f"the job was killed by {name} (signal {number})"


def last_lines(text: str, count: int = 3, width: int = 300) -> str:
    """The last ``count`` non-blank lines of a log, joined with " | " (a Python traceback's error line
    is its last), each cut to ``width`` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()][-count:]
    return " | ".join(line if len(line) <= width else line[: width - 3] + "..." for line in lines)


def _ending(stderr_tail: str) -> str:
    return f"; its stderr ends: {stderr_tail}" if stderr_tail else ""


def exit_status_error(result: CaptureResult) -> XlarunError | None:
    """The error a CLI should exit with for this capture, or None when it succeeded with a dump."""
    from xlarun.errors import ExitCode, JobFailed

    where = f"run {result.run_id} is archived"
    if result.status == RunStatus.TIMED_OUT:
        return JobFailed(
            f"the job ran past its timeout and was killed; {where}", "raise `timeout:` in the spec", exit_code=ExitCode.TIMEOUT
        )
    if result.status == RunStatus.INTERRUPTED:
        how = f"stopped by {result.signal}" if result.signal else "interrupted"
        return JobFailed(f"{how}; {where} with what it wrote so far", None, exit_code=ExitCode(exit_code_for(result.signal)))
    if result.signal:  # the job had ended: the run is whole, but xlarun was asked to stop
        return JobFailed(
            f"{result.signal} received while archiving; {where} ({result.status.value})",
            None,
            exit_code=ExitCode(exit_code_for(result.signal)),
        )
    if result.status == RunStatus.ERROR:
        if result.manifest.backend_details.get("environment_problem"):
            return EnvironmentProblem(f"the job could not start: {result.manifest.error}; {where}")
        return JobFailed(
            f"the job could not start: {result.manifest.error}; {where}",
            "check `python:` and `script:` in the spec",
            exit_code=ExitCode.FAILED,
        )
    logs = f"`xlarun logs {result.run_id}` shows its output"
    if result.status == RunStatus.FAILED and result.flag_rejection is not None:
        return JobFailed(f"{result.flag_rejection.explain()}; {where}", result.flag_rejection.advice or logs)
    if result.status == RunStatus.FAILED:
        ended = job_ending(result.exit_code, result.manifest.backend)
        if result.manifest.files == 0:
            return JobFailed(f"{ended} before XLA compiled anything{_ending(result.stderr_tail)}; {where}", logs)
        return JobFailed(f"{ended}; {where}", logs)
    if result.manifest.files == 0:
        return JobFailed(f"{NO_DUMP_WARNING}; {where}", None)
    return None
