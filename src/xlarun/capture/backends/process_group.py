"""Many processes, one run: the job launched as N local processes of one distributed program.

Each process is a local job of its own (:class:`~xlarun.capture.backends.local.LocalBackend`: its own process
group, keeper and mark), with three variables that tell it its place, and its XLA dump in a folder of its own::

    XLARUN_PROCESS_ID     0 .. N-1
    XLARUN_NUM_PROCESSES  N
    XLARUN_COORDINATOR    127.0.0.1:PORT, a free loopback port for jax.distributed.initialize's coordinator

``JAX_CPU_COLLECTIVES_IMPLEMENTATION`` is set to ``gloo`` (unless the job sets it): without it, jax's CPU
client cannot run collectives across processes. Process K's XLA dump goes to ``dump/process-K/`` and its JAX IR to
``jax_ir/process-K/``; its output to ``processes/process-K/stdout.log`` and ``stderr.log`` in the run folder, and,
each line prefixed ``[process K]``, to the run's own logs. When one process fails or times out, the others are
stopped (they would wait for it forever in a collective); the run takes the first failure's status and exit code.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

from xlarun.capture.backends.base import Job, JobPaths, LaunchResult, OutputSink
from xlarun.capture.backends.local import LocalBackend
from xlarun.capture.backends.process_failure import RAISED_EXIT_CODE, RAISED_GRACE_S, RAISED_MARK, marking_argv, raised
from xlarun.hlo.process_dirs import process_dir
from xlarun.store.rows import RunStatus

#: Where each process's own logs go, below the run folder.
PROCESS_LOGS = "processes"


def process_log(run_dir: Path, process: int, stream: str) -> str:
    """Process ``process``'s ``stdout`` or ``stderr`` in a committed run folder; InputError when it has no such process."""
    from xlarun.bounded_read import read_store_log
    from xlarun.errors import InputError

    path = run_dir / PROCESS_LOGS / process_dir(process) / f"{stream}.log"
    if not path.parent.is_dir():
        kept = sorted(p.name for p in (run_dir / PROCESS_LOGS).glob("process-*")) if (run_dir / PROCESS_LOGS).is_dir() else []
        has = f"its processes are {', '.join(k.split('-')[1] for k in kept)}" if kept else "it ran as one process"
        raise InputError(f"run {run_dir.name} has no process {process}: {has}", "leave out --process for the run's own logs")
    return read_store_log(path)


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 free right now (the coordinator binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _own_dump_to(flags: str, dump_dir: str, own: str) -> str:
    """XLA_FLAGS with the run's ``--xla_dump_to`` (bare, or quoted for a path with spaces) pointed at ``own``."""
    for quote in ('"', "'", ""):
        ours = f"--xla_dump_to={quote}{dump_dir}{quote}"
        if ours in flags:
            return flags.replace(ours, f"--xla_dump_to={quote}{own}{quote}")
    return flags


def process_env(env: dict[str, str], paths: JobPaths, process: int, count: int, coordinator: str) -> dict[str, str]:
    """The environment of process ``process`` of ``count``: its place in the job, its own dump folders."""
    out = dict(env)
    out.update(XLARUN_PROCESS_ID=str(process), XLARUN_NUM_PROCESSES=str(count), XLARUN_COORDINATOR=coordinator)
    out.setdefault("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "gloo")
    own_dump = f"{paths.dump_dir}/{process_dir(process)}"
    if "XLA_FLAGS" in out:
        out["XLA_FLAGS"] = _own_dump_to(out["XLA_FLAGS"], paths.dump_dir, own_dump)
    if out.get("JAX_DUMP_IR_TO") == paths.jax_ir_dir:
        out["JAX_DUMP_IR_TO"] = f"{paths.jax_ir_dir}/{process_dir(process)}"
    return out


class _ProcessLogs:
    """One process's output: into its own log files, and line by line, prefixed, into the run's sink."""

    def __init__(self, folder: Path, process: int, sink: OutputSink):
        folder.mkdir(parents=True, exist_ok=True)
        self.files = {name: open(folder / f"{name}.log", "w", encoding="utf-8") for name in ("stdout", "stderr")}  # noqa: SIM115
        self.prefix = f"[process {process}] "
        self.sink = sink
        self.partial = {"stdout": "", "stderr": ""}
        self.lock = threading.Lock()

    def __call__(self, stream: str, text: str) -> None:
        with self.lock:
            try:
                self.files[stream].write(text)
                self.files[stream].flush()
            except OSError:  # a full disk: the run's own log still gets it, or says why not
                pass
            lines = (self.partial[stream] + text).split("\n")
            self.partial[stream] = lines.pop()
            if lines:
                self.sink(stream, "".join(f"{self.prefix}{line}\n" for line in lines))

    def close(self) -> None:
        for stream, handle in self.files.items():
            if self.partial[stream]:
                self.sink(stream, f"{self.prefix}{self.partial[stream]}\n")
            handle.close()


class ProcessGroupBackend:
    """Run the job as ``count`` local processes of one distributed program (see the module docstring)."""

    kind = "local"

    def __init__(self, count: int):
        self.count = count
        self.local = LocalBackend()

    def job_paths(self, run_dir: Path) -> JobPaths:
        return self.local.job_paths(run_dir)

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        paths = self.job_paths(job.run_dir)
        coordinator = f"127.0.0.1:{free_loopback_port()}"
        jobs, logs = [], []
        for process in range(self.count):
            # its own run_dir and keeper: stopping one process's leftovers spares the others
            own = job.run_dir / PROCESS_LOGS / process_dir(process)
            logs.append(_ProcessLogs(own, process, sink))
            env = process_env(job.env, paths, process, self.count, coordinator)
            argv = marking_argv(job.argv, own / RAISED_MARK)
            # called once, below
            jobs.append(replace(job, argv=argv, env=env, run_dir=own, cancel=threading.Event(), while_running=None))
        results: list[LaunchResult | None] = [None] * self.count
        first_failure: list[int] = []
        ended = threading.Condition()

        def run(process: int) -> None:
            try:
                result = _raised_is_failed(self.local.launch(jobs[process], logs[process]), jobs[process].run_dir)
            except BaseException as exc:  # reported as this process's error; the others are stopped
                result = LaunchResult(RunStatus.ERROR, None, "", "", error=f"process {process}: {exc}")
            with ended:
                results[process] = result
                # INTERRUPTED: stopped by us, after another's failure or a signal to xlarun; not a failure of its own
                if result.status not in (RunStatus.SUCCEEDED, RunStatus.INTERRUPTED) and not first_failure:
                    raised_first = _first_to_raise(jobs)  # it failed first, whoever ended first after it
                    first_failure.append(process if raised_first is None else raised_first)
                ended.notify_all()

        threads = [threading.Thread(target=run, args=(k,), name=f"xlarun-process-{k}", daemon=True) for k in range(self.count)]
        for thread in threads:
            thread.start()
        try:
            job.get_ready()  # once for all the processes
            with ended:
                while not all(results) and not first_failure and not job.cancel.is_set():
                    ended.wait(timeout=0.2)
                    hung = _hung_after_raising(jobs, results)
                    if hung is not None and not first_failure:
                        first_failure.append(hung)  # it raised and waits in its exit hooks for peers that wait for it
        except KeyboardInterrupt:
            job.cancel.set()
        if first_failure or job.cancel.is_set():
            for other in jobs:
                other.cancel.set()  # a process waiting for a failed one in a collective would wait forever
        for thread in threads:
            thread.join()
        for log in logs:
            log.close()
        return _one_result([r for r in results if r is not None], first_failure, job.cancel.is_set(), coordinator)


def _raised_at(job: Job) -> float | None:
    """When the process of ``job`` raised (its mark's time), None when it has not."""
    try:
        return (job.run_dir / RAISED_MARK).stat().st_mtime
    except OSError:
        return None


def _first_to_raise(jobs: list[Job]) -> int | None:
    """The process that raised first, None when none has."""
    times = [(t, k) for k, job in enumerate(jobs) if (t := _raised_at(job)) is not None]
    return min(times)[1] if times else None


def _hung_after_raising(jobs: list[Job], results: list[LaunchResult | None]) -> int | None:
    """A process that raised more than RAISED_GRACE_S ago and is still running, None when there is none."""
    now = time.time()
    for k, job in enumerate(jobs):
        at = _raised_at(job)
        if results[k] is None and at is not None and now - at > RAISED_GRACE_S:
            return k
    return None


def _raised_is_failed(result: LaunchResult, own_dir: Path) -> LaunchResult:
    """A process that raised is failed with Python's exit 1, though it hung in its exit hooks and was stopped."""
    exception = raised(own_dir / RAISED_MARK)
    if exception is None or result.status in (RunStatus.SUCCEEDED, RunStatus.ERROR):
        return result
    details = dict(result.details, raised=exception)
    if result.status == RunStatus.FAILED:
        return replace(result, error=f"raised {exception}", details=details)
    details["stopped"] = (
        f"it raised ({exception}) and was still running when the job was stopped (jax.distributed's exit hook waits "
        f"for its peers); its exit code {result.exit_code} is the stop's, Python's after an uncaught exception is 1"
    )
    return replace(result, status=RunStatus.FAILED, exit_code=RAISED_EXIT_CODE, error=f"raised {exception}", details=details)


def _one_result(results: list[LaunchResult], first_failure: list[int], cancelled: bool, coordinator: str) -> LaunchResult:
    """The run's result from its processes': the first failure's status and exit code, else success."""
    details: dict[str, object] = {
        "processes": [
            {"process": k, "status": r.status.value, "exit_code": r.exit_code, **r.details} for k, r in enumerate(results)
        ],
        "coordinator": coordinator,
    }
    started = min(r.started for r in results if r.started) if any(r.started for r in results) else ""
    ended = max(r.ended for r in results if r.ended) if any(r.ended for r in results) else ""
    if not first_failure:
        if cancelled or any(r.status == RunStatus.INTERRUPTED for r in results):
            return LaunchResult(RunStatus.INTERRUPTED, None, started, ended, details=details)
        return LaunchResult(RunStatus.SUCCEEDED, 0, started, ended, details=details)
    failed = results[first_failure[0]]
    stopped = [k for k, r in enumerate(results) if k != first_failure[0] and r.status == RunStatus.INTERRUPTED]
    if stopped:
        others = ", ".join(map(str, stopped))
        details["stopped"] = f"process {first_failure[0]} ended first ({failed.status.value}): process(es) {others} were stopped"
    error = failed.error and f"process {first_failure[0]}: {failed.error}"
    return LaunchResult(failed.status, failed.exit_code, started, ended, error=error, details=details)
