"""The local backend: the job is a subprocess of xlarun, in its own process group."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from xlarun.capture.backends.base import Job, JobPaths, LaunchResult, OutputSink
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


def _stop_leftovers(proc: subprocess.Popen) -> bool:
    """The job's main process has exited: give what it left running in its process group (a writer, a
    server) a moment to end, then stop it, so that nothing writes into the run while it is archived and
    the output pipes close. Returns whether anything had to be stopped."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while _group_alive(proc):
        if time.monotonic() >= deadline:
            _signal_group(proc, signal.SIGTERM)
            end = time.monotonic() + GRACE_S
            while _group_alive(proc) and time.monotonic() < end:
                time.sleep(0.05)
            _signal_group(proc, signal.SIGKILL)
            return True
        time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group, then SIGKILL it if it lingers."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # children may outlive the leader
    proc.wait()


class LocalBackend:
    """Run the job as a local process group; the run folder is seen at its host path."""

    kind = "local"

    def job_paths(self, run_dir: Path) -> JobPaths:
        return JobPaths.under(str(run_dir), sep=os.sep)

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        started = utc_now()
        try:
            proc = subprocess.Popen(
                job.argv,
                cwd=job.cwd,
                env=job.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group: a timeout or Ctrl-C kills the job's children too
            )
        except OSError as exc:
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
        try:
            while True:
                try:
                    proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if job.cancel.is_set():
                        status = RunStatus.INTERRUPTED
                        _stop(proc)
                        break
                    if deadline is not None and time.monotonic() >= deadline:
                        status = RunStatus.TIMED_OUT
                        _stop(proc)
                        break
        except KeyboardInterrupt:
            status = RunStatus.INTERRUPTED
            _stop(proc)
        details: dict[str, object] = {"pid": proc.pid}
        if status is None and _stop_leftovers(proc):
            details["stopped_leftovers"] = (
                f"processes the job left running in its process group were stopped {LEFTOVER_GRACE_S:g} s after it exited"
            )
        for pump in pumps:
            pump.join(timeout=10)
        exit_code = proc.returncode
        if status is None:
            status = RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        return LaunchResult(status, exit_code, started, utc_now(), details=details)
