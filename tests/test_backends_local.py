"""The local backend's waiting: the job's exit noticed the moment it happens (a pidfd, where Linux has
them), the caller's ``while_running`` called once while the job runs, and the watchdogs that guard each job
reaped rather than waited for."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from xlarun.capture.backends import local
from xlarun.capture.backends.base import Job
from xlarun.store.records import RunStatus


def _job(tmp_path: Path, code: str, **kwargs) -> Job:
    (tmp_path / "job.py").write_text(code)
    return Job(argv=[sys.executable, str(tmp_path / "job.py")], env=dict(os.environ), cwd=tmp_path, run_dir=tmp_path, **kwargs)


def _zombie_children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == me:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_exit_watch_tells_running_from_exited(tmp_path, monkeypatch, pidfd):
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)  # an older kernel or Python: plain waiting
    release = tmp_path / "go"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.01)\nraise SystemExit(7)",
        ]
    )
    watch = local._ExitWatch(proc)
    assert (watch._poll is not None) == (pidfd and hasattr(os, "pidfd_open"))
    assert not watch.exited(0.05) and proc.returncode is None
    release.touch()
    assert watch.exited(30) and proc.returncode == 7  # reaped, with its exit code
    watch.close()


def test_while_running_is_called_once_while_the_job_runs_and_its_failure_is_not_the_jobs(tmp_path):
    calls = []
    ready = tmp_path / "called"

    def getting_ready():
        calls.append(threading.current_thread().name)
        ready.touch()  # the job waits for this: it still runs when we are called
        raise RuntimeError("an import failed")  # noticed later, where it matters; not the job's failure

    job = _job(
        tmp_path,
        f"import os, time\nwhile not os.path.exists({str(ready)!r}): time.sleep(0.01)\nprint('done')\n",
        while_running=getting_ready,
    )
    out: list[str] = []
    result = local.LocalBackend().launch(job, lambda stream, text: out.append(text))
    assert result.status == RunStatus.SUCCEEDED and result.exit_code == 0
    assert calls == [threading.current_thread().name] and "done" in "".join(out)


def test_many_launches_leave_no_watchdog_unreaped(tmp_path, monkeypatch):
    """Each launch starts a watchdog and, at the end, only tells it to go: the next launch reaps the ones
    that went, so a process capturing many runs keeps neither zombies nor descriptors."""
    started = []
    real = local._start_watchdog
    monkeypatch.setattr(local, "_start_watchdog", lambda run_dir: started.append(real(run_dir)) or started[-1])
    for i in range(6):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        result = local.LocalBackend().launch(_job(folder, "print('hi')\n"), lambda stream, text: None)
        assert result.status == RunStatus.SUCCEEDED
    assert len(started) == 6 and all(w.stdin.closed for w in started)
    for watchdog in started:
        watchdog.wait(timeout=30)
    local._reap_watchdogs()
    assert local._ENDING == [] and not {w.pid for w in started} & set(_zombie_children())


def test_a_job_stopped_before_it_starts_is_never_run(tmp_path):
    """A Ctrl-C or SIGTERM that lands while xlarun is still getting ready (a batch cell about to launch): the
    job is not started at all, and the result says it never started (the capture then says "nothing ran")."""
    marker = tmp_path / "ran"
    job = _job(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    job.cancel.set()
    result = local.LocalBackend().launch(job, lambda stream, text: None)
    assert result.status == RunStatus.INTERRUPTED and result.exit_code is None
    assert result.details == {"started": False} and not marker.exists()


def test_a_capture_stopped_before_its_job_starts_is_archived_saying_nothing_ran(tmp_path):
    from xlarun.capture.launch import capture
    from xlarun.interrupts import StopRequest
    from xlarun.store.facade import Store

    from .conftest import write_spec

    spec = write_spec(tmp_path, "name: early\nscript: job.py\n", f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    stop = StopRequest()
    stop.received.append(15)  # SIGTERM, as the signal watcher records it
    stop.cancel.set()
    store = Store.open(tmp_path / "s")
    result = capture(spec, store, stop=stop)
    assert result.status == RunStatus.INTERRUPTED and not (tmp_path / "ran").exists()
    assert "stopped by SIGTERM before the job started: nothing ran" in result.warnings
    assert store.run_ids() == [result.run_id] and store.manifest(result.run_id)["signal"] == "SIGTERM"
