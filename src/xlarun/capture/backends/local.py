"""The local backend: the job is a process of this machine, in a session of its own, started by its keeper.

Every process the job starts stays below its keeper (:mod:`~xlarun.capture.backends.job_keeper`, a child
subreaper: the docstring there says why that and not a cgroup), also one in a new session with a cleared
environment: xlarun stops them all when the job ends, times out or xlarun is signalled, and the keeper stops
them when xlarun ends without doing so (kill -9). Where the keeper cannot be a subreaper (not Linux), the job's
processes are also found by the mark in their environment (:data:`xlarun.interrupts.JOB_MARK`)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from xlarun.capture.backends import job_keeper
from xlarun.capture.backends.base import Job, JobPaths, LaunchResult, OutputSink
from xlarun.capture.backends.job_keeper import job_request
from xlarun.interrupts import JOB_MARK, job_processes, process_alive, stop_processes
from xlarun.store.rows import RunStatus, utc_now

#: After SIGTERM, how long the job gets to exit before SIGKILL.
GRACE_S = 5.0
#: After the job's main process exits, how long the processes it left in its group get to end on their own.
LEFTOVER_GRACE_S = 2.0


def _pump(stream: Any, name: str, sink: OutputSink) -> None:
    # read1 hands over whatever is available, so output appears as the job writes it
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        sink(name, chunk.decode("utf-8", errors="replace"))
    stream.close()


class JobNotStarted(Exception):
    """The job could not be started (its program is missing, its folder is gone...): the words say why."""


class KeptJob:
    """A job started by its keeper (:mod:`~xlarun.capture.backends.job_keeper`): its pid, its end, every process
    it started, and stopping them."""

    def __init__(self, keeper: subprocess.Popen, status_fd: int, run_dir: Path):
        self.keeper = keeper
        self.run_dir = run_dir
        self.pid: int | None = None  # the job's main process, leader of its own session and process group
        self.subreaper = False  # whether every process the job starts stays below the keeper
        self.returncode: int | None = None
        self.ended = False  # the job's main process has ended
        self._status = status_fd
        self._said = b""
        self._silent = False  # the keeper has closed its end: it is gone
        self._error: str | None = None

    @classmethod
    def start(cls, job: Job) -> KeptJob:
        """Start the job's keeper, and through it the job, marked with :data:`JOB_MARK`; JobNotStarted if it cannot run."""
        status_r, status_w = os.pipe()
        try:
            keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", job_keeper.__file__, JOB_MARK, str(job.run_dir), str(status_w)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                start_new_session=True,  # a Ctrl-C to the terminal's group reaches neither the keeper nor the job
            )
        except OSError as exc:
            os.close(status_r)
            raise JobNotStarted(f"its keeper did not start: {exc.strerror or exc}") from None
        finally:
            os.close(status_w)
        kept = cls(keeper, status_r, job.run_dir)
        try:
            assert keeper.stdin is not None
            keeper.stdin.write(job_request(job.argv, {**job.env, JOB_MARK: str(job.run_dir)}, str(job.cwd)))
            keeper.stdin.flush()
        except OSError:  # the keeper is gone: it says nothing, below
            pass
        try:
            while kept.pid is None and kept._error is None and not kept._silent:
                kept._listen(None)
        except BaseException:  # a KeyboardInterrupt (a notebook's): the keeper stops whatever it started, and goes
            kept.end()
            raise
        if kept.pid is None:
            kept.end()
            for pipe in (keeper.stdout, keeper.stderr):
                if pipe is not None:
                    pipe.close()
            raise JobNotStarted(kept._error or "its keeper ended before starting it")
        return kept

    def _listen(self, timeout_s: float | None) -> None:
        """Take what the keeper said within ``timeout_s`` (None: until it says something or goes)."""
        poll = select.poll()
        poll.register(self._status, select.POLLIN)
        if not poll.poll(None if timeout_s is None else max(0, int(timeout_s * 1000))):
            return
        chunk = os.read(self._status, 4096)
        if not chunk:
            self._silent = True
            return
        self._said += chunk
        while b"\n" in self._said:
            line, self._said = self._said.split(b"\n", 1)
            word, _, rest = line.decode(errors="replace").partition(" ")
            if word == "pid":
                pid, subreaper = rest.split()
                self.pid, self.subreaper = int(pid), subreaper == "1"
            elif word == "error":
                self._error = rest
            elif word == "exit":
                self.returncode, self.ended = int(rest), True

    def exited(self, timeout_s: float | None) -> bool:
        """Whether the job's main process ended within ``timeout_s`` (None: wait for it); the keeper says so the
        moment it does. Should the keeper be gone, the job's pid is watched instead (and its exit code is unknown)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if not self._silent:
                self._listen(left)
            elif not process_alive(self.pid):
                self.ended = True
            else:
                time.sleep(0.05 if left is None else min(0.05, left))
        return True

    def processes(self) -> list[int]:
        """Every live process of the job: those below its keeper; where the keeper is no subreaper, or is gone,
        also those carrying the job's mark."""
        below = job_keeper.live_processes_below(self.keeper.pid) if self.keeper.returncode is None else []
        if self.subreaper and not self._silent:
            return below
        return sorted(set(below) | set(job_processes(self.run_dir)))

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the job's process group (the job and what it started without a new session)."""
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def stop(self) -> None:
        """SIGTERM the job's process group, SIGKILL it if it lingers; then the same for every other process of
        the job (a new session, a new group: see :meth:`processes`)."""
        self.signal_group(signal.SIGTERM)
        self.exited(GRACE_S)
        self.signal_group(signal.SIGKILL)  # children may outlive the leader
        stop_processes(self.processes, GRACE_S)
        self.exited(GRACE_S)

    def stop_leftovers(self) -> bool:
        """The job's main process has exited: give what it left running (a writer, a server, a process in a session
        of its own) a moment to end, then stop it, so that nothing writes into the run while it is archived and the
        output pipes close. Returns whether anything had to be stopped."""
        deadline = time.monotonic() + LEFTOVER_GRACE_S
        while self.group_alive() or self.processes():
            if time.monotonic() >= deadline:
                self.signal_group(signal.SIGTERM)
                end = time.monotonic() + GRACE_S
                while self.group_alive() and time.monotonic() < end:
                    time.sleep(0.05)
                self.signal_group(signal.SIGKILL)
                stop_processes(self.processes, GRACE_S)
                return True
            time.sleep(0.05)
        return False

    def end(self) -> None:
        """Tell the keeper the job is over (close its stdin: it SIGKILLs whatever is left below it, then goes).
        It is not waited for (that cost a capture ~10 ms): the next launch reaps the keepers that went."""
        _reap_keepers()
        if self.keeper.stdin is not None:
            try:
                self.keeper.stdin.close()
            except OSError:
                pass
        if self._status >= 0:
            os.close(self._status)
            self._status = -1
        with _ENDING_LOCK:
            _ENDING.append(self.keeper)


#: Keepers told to go (their stdin closed) and not yet reaped: the next launch reaps those that went, so a
#: process capturing many runs keeps none.
_ENDING: list[subprocess.Popen] = []
_ENDING_LOCK = threading.Lock()  # a batch's cells launch and end their jobs in threads of one process


def _reap_keepers() -> None:
    with _ENDING_LOCK:
        _ENDING[:] = [k for k in _ENDING if k.poll() is None]


class LocalBackend:
    """Run the job as a local process group below its keeper; the run folder is seen at its host path."""

    kind = "local"

    def job_paths(self, run_dir: Path) -> JobPaths:
        return JobPaths.under(str(run_dir), sep=os.sep)

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        started = utc_now()
        if job.cancel.is_set():  # stopped before it began (a Ctrl-C while xlarun started): nothing is run
            return LaunchResult(RunStatus.INTERRUPTED, None, started, started, details={"started": False})
        try:
            kept = KeptJob.start(job)
        except JobNotStarted as exc:
            return LaunchResult(RunStatus.ERROR, None, started, utc_now(), error=f"cannot start {job.argv[0]}: {exc}")

        try:
            status, details = self._wait(job, kept, sink)
        finally:
            kept.end()  # the keeper SIGKILLs whatever is still below it, and goes
        exit_code = kept.returncode
        if status is None:
            status = RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        return LaunchResult(status, exit_code, started, utc_now(), details=details)

    @staticmethod
    def _wait(job: Job, kept: KeptJob, sink: OutputSink) -> tuple[RunStatus | None, dict[str, object]]:
        """Stream the job's output until it ends (None) or is stopped (INTERRUPTED, TIMED_OUT), then stop what it
        left running; returns that status and the details for the manifest."""
        pumps = [
            threading.Thread(target=_pump, args=(kept.keeper.stdout, "stdout", sink), daemon=True),
            threading.Thread(target=_pump, args=(kept.keeper.stderr, "stderr", sink), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        deadline = time.monotonic() + job.timeout_s if job.timeout_s else None
        status = None
        try:
            job.get_ready()
            while not kept.exited(0.2):
                if job.cancel.is_set():
                    status = RunStatus.INTERRUPTED
                    kept.stop()
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    status = RunStatus.TIMED_OUT
                    kept.stop()
                    break
        except KeyboardInterrupt:
            status = RunStatus.INTERRUPTED
            kept.stop()
        details: dict[str, object] = {"pid": kept.pid}
        if status is None and kept.stop_leftovers():
            details["stopped_leftovers"] = f"processes the job left running were stopped {LEFTOVER_GRACE_S:g} s after it exited"
        for pump in pumps:
            pump.join(timeout=10)
        return status, details
