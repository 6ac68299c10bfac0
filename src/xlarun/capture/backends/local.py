"""The local backend: the job is a subprocess of xlarun, in its own process group.

What the job starts is tracked beyond its group: every process carries the job's mark in its environment
(:data:`xlarun.interrupts.JOB_MARK`), so a child in a new session is stopped with the rest, and a watchdog
process beside the job SIGKILLs the whole set when xlarun ends without doing so (kill -9)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from xlarun.capture.backends.base import Job, JobPaths, LaunchResult, OutputSink
from xlarun.interrupts import JOB_MARK, WATCHDOG, job_processes, kill_job_processes
from xlarun.store.records import RunStatus, utc_now

#: After SIGTERM, how long the job gets to exit before SIGKILL.
GRACE_S = 5.0
#: After the job's main process exits, how long the processes it left in its group get to end on their own.
LEFTOVER_GRACE_S = 2.0


def _pump(stream, name: str, sink: OutputSink) -> None:
    # read1 hands over whatever is available, so output appears as the job writes it
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        sink(name, chunk.decode("utf-8", errors="replace"))
    stream.close()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(proc: subprocess.Popen) -> bool:
    try:
        os.killpg(proc.pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _stop_leftovers(proc: subprocess.Popen, run_dir: Path) -> bool:
    """The job's main process has exited: give what it left running in its process group (a writer, a
    server) a moment to end, then stop it, so that nothing writes into the run while it is archived and
    the output pipes close. Returns whether anything had to be stopped."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while _group_alive(proc) or job_processes(run_dir):
        if time.monotonic() >= deadline:
            _signal_group(proc, signal.SIGTERM)
            end = time.monotonic() + GRACE_S
            while _group_alive(proc) and time.monotonic() < end:
                time.sleep(0.05)
            _signal_group(proc, signal.SIGKILL)
            kill_job_processes(run_dir, GRACE_S)
            return True
        time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGTERM the whole process group, then SIGKILL it if it lingers; the same for the processes the job
    started outside its group (a new session)."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # children may outlive the leader
    proc.wait()
    kill_job_processes(run_dir, GRACE_S)


def _start_watchdog(run_dir: Path) -> subprocess.Popen | None:
    """The process that stops the job's set if xlarun dies first: it ends when its stdin (our pipe) closes."""
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-c", WATCHDOG, JOB_MARK, str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's group does not reach it
        )
    except OSError:
        return None  # the job still runs; only the kill -9 guard is missing


#: Watchdogs told to end (their stdin closed) and not yet reaped: each ends on its own after one look at
#: /proc; the next launch reaps those that have, so a process capturing many runs keeps none.
_ENDING: list[subprocess.Popen] = []
_ENDING_LOCK = threading.Lock()  # a batch's cells launch and end their jobs in threads of one process


def _end_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Tell the watchdog the job is over (close its stdin); it is not waited for (that cost a capture ~10 ms)."""
    _reap_watchdogs()
    if watchdog is None:
        return
    if watchdog.stdin is not None:
        watchdog.stdin.close()
    with _ENDING_LOCK:
        _ENDING.append(watchdog)


def _reap_watchdogs() -> None:
    with _ENDING_LOCK:
        _ENDING[:] = [w for w in _ENDING if w.poll() is None]


class _ExitWatch:
    """Waits for the job's main process to exit, waking the moment it does: a pidfd polled where Linux has
    them (``subprocess.wait(timeout)`` polls with sleeps of up to 50 ms, which a short job paid in full)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._poll = None
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or not allowed: plain waiting
            return
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def exited(self, timeout_s: float) -> bool:
        """Whether the job exited (and was reaped) within ``timeout_s``."""
        if self._poll is not None and not self._poll.poll(timeout_s * 1000):
            return False
        try:
            self.proc.wait(timeout=None if self._poll is not None else timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        if self._poll is not None:
            os.close(self._fd)
            self._poll = None


class LocalBackend:
    """Run the job as a local process group; the run folder is seen at its host path."""

    kind = "local"

    def job_paths(self, run_dir: Path) -> JobPaths:
        return JobPaths.under(str(run_dir), sep=os.sep)

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        started = utc_now()
        if job.cancel.is_set():  # stopped before it began (a Ctrl-C while xlarun started): nothing is run
            return LaunchResult(RunStatus.INTERRUPTED, None, started, started, details={"started": False})
        watchdog = _start_watchdog(job.run_dir)
        try:
            proc = subprocess.Popen(
                job.argv,
                cwd=job.cwd,
                env={**job.env, JOB_MARK: str(job.run_dir)},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group: a timeout or Ctrl-C kills the job's children too
            )
        except OSError as exc:
            _end_watchdog(watchdog)
            return LaunchResult(
                RunStatus.ERROR, None, started, utc_now(), error=f"cannot start {job.argv[0]}: {exc.strerror or exc}"
            )

        pumps = [
            threading.Thread(target=_pump, args=(proc.stdout, "stdout", sink), daemon=True),
            threading.Thread(target=_pump, args=(proc.stderr, "stderr", sink), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        deadline = time.monotonic() + job.timeout_s if job.timeout_s else None
        status = None
        watch = _ExitWatch(proc)
        try:
            job.get_ready()
            while not watch.exited(0.2):
                if job.cancel.is_set():
                    status = RunStatus.INTERRUPTED
                    _stop(proc, job.run_dir)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    status = RunStatus.TIMED_OUT
                    _stop(proc, job.run_dir)
                    break
        except KeyboardInterrupt:
            status = RunStatus.INTERRUPTED
            _stop(proc, job.run_dir)
        finally:
            watch.close()
        details: dict[str, object] = {"pid": proc.pid}
        if status is None and _stop_leftovers(proc, job.run_dir):
            details["stopped_leftovers"] = (
                f"processes the job left running in its process group were stopped {LEFTOVER_GRACE_S:g} s after it exited"
            )
        for pump in pumps:
            pump.join(timeout=10)
        _end_watchdog(watchdog)
        exit_code = proc.returncode
        if status is None:
            status = RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        return LaunchResult(status, exit_code, started, utc_now(), details=details)
