"""The local backend's waiting: the job's exit noticed the moment it happens (its keeper says so), the
caller's ``while_running`` called once while the job runs, and the keepers that hold each job reaped rather
than waited for."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from xlarun.capture.backends import local
from xlarun.capture.backends.base import Job
from xlarun.store.rows import RunStatus


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


def test_the_exit_watch_tells_running_from_exited(tmp_path):
    release = tmp_path / "go"
    job = _job(tmp_path, f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.01)\nraise SystemExit(7)")
    kept = local.KeptJob.start(job)
    try:
        assert kept.subreaper == sys.platform.startswith("linux") and kept.pid != kept.keeper.pid
        assert not kept.exited(0.05) and kept.returncode is None
        release.touch()
        assert kept.exited(30) and kept.returncode == 7  # with its exit code, from its keeper
    finally:
        kept.end()


def test_a_job_that_cannot_start_says_why(tmp_path):
    job = Job(argv=[str(tmp_path / "missing")], env=dict(os.environ), cwd=tmp_path, run_dir=tmp_path)
    result = local.LocalBackend().launch(job, lambda stream, text: None)
    assert result.status == RunStatus.ERROR and result.exit_code is None
    assert result.error == f"cannot start {tmp_path / 'missing'}: No such file or directory"


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


def test_many_launches_leave_no_keeper_unreaped(tmp_path, monkeypatch):
    """Each launch starts a keeper and, at the end, only tells it to go: the next launch reaps the ones
    that went, so a process capturing many runs keeps neither zombies nor descriptors."""
    started = []
    real = local.KeptJob.start

    def start(job):
        kept = real(job)
        started.append(kept.keeper)
        return kept

    monkeypatch.setattr(local.KeptJob, "start", start)
    for i in range(6):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        result = local.LocalBackend().launch(_job(folder, "print('hi')\n"), lambda stream, text: None)
        assert result.status == RunStatus.SUCCEEDED
    assert len(started) == 6 and all(w.stdin.closed for w in started)
    for keeper in started:
        keeper.wait(timeout=30)
    local._reap_keepers()
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
    from xlarun.store.facade import LocalStore

    from .conftest import write_spec

    spec = write_spec(tmp_path, "name: early\nscript: job.py\n", f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    stop = StopRequest()
    stop.received.append(15)  # SIGTERM, as the signal watcher records it
    stop.cancel.set()
    store = LocalStore.open(tmp_path / "s")
    result = capture(spec, store, stop=stop)
    assert result.status == RunStatus.INTERRUPTED and not (tmp_path / "ran").exists()
    assert "stopped by SIGTERM before the job started: nothing ran" in result.warnings
    assert store.run_ids() == [result.run_id] and store.manifest(result.run_id)["signal"] == "SIGTERM"


LEAVES_AN_ESCAPEE = """
import os, sys
child = os.fork()
if child == 0:
    os.setsid()  # a session of its own, and no environment: neither the job's group nor its mark holds it
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)"], {})
print(child, flush=True)
"""


def _wait_gone(pid: int, seconds: float) -> bool:
    import time

    from xlarun.interrupts import process_alive

    deadline = time.monotonic() + seconds
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the keeper is a subreaper on Linux only")
def test_what_the_job_left_in_a_session_of_its_own_is_stopped_at_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "LEFTOVER_GRACE_S", 0.2)
    out: list[str] = []
    result = local.LocalBackend().launch(_job(tmp_path, LEAVES_AN_ESCAPEE), lambda stream, text: out.append(text))
    escapee = int("".join(out).split()[0])
    assert result.status == RunStatus.SUCCEEDED and "stopped_leftovers" in result.details
    assert _wait_gone(escapee, 60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the keeper is a subreaper on Linux only")
def test_the_keeper_stops_what_is_left_below_it_when_its_stdin_closes(tmp_path):
    """What it does when xlarun is killed: xlarun's end closes the keeper's stdin."""
    kept = local.KeptJob.start(_job(tmp_path, LEAVES_AN_ESCAPEE + "import time; time.sleep(300)\n"))
    assert kept.keeper.stdout is not None
    escapee = int(kept.keeper.stdout.readline())
    assert escapee in kept.processes() and kept.pid in kept.processes()
    kept.keeper.stdin.close()  # as xlarun's end would, without any stop of xlarun's
    assert _wait_gone(escapee, 60) and _wait_gone(kept.pid, 60)
    kept.end()
    kept.keeper.wait(timeout=60)
    kept.keeper.stdout.close()
    kept.keeper.stderr.close()


def test_the_request_the_keeper_reads_is_what_xlarun_wrote():
    from xlarun.capture.backends import job_keeper

    read, write = os.pipe()
    request = job_keeper.job_request(["prog", "a b", "é"], {"A": "1=2", "EMPTY": ""}, "/some where")
    os.write(write, request)
    os.close(write)
    try:
        assert job_keeper._read_request(read) == (["prog", "a b", "é"], {"A": "1=2", "EMPTY": ""}, "/some where")
    finally:
        os.close(read)
