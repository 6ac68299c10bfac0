"""Stop signals: routed to a StopRequest while inside, ignored ones left ignored, handlers given back."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from xlarun.errors import ExitCode
from xlarun.interrupts import StopRequest, exit_code_for, stop_on_signals


def test_exit_codes_are_128_plus_the_signal():
    assert [exit_code_for(name) for name in ("SIGINT", "SIGTERM", "SIGHUP", None)] == [
        ExitCode.INTERRUPTED,
        ExitCode.TERMINATED,
        ExitCode.HANGUP,
        ExitCode.INTERRUPTED,
    ]


def test_a_signal_sets_cancel_and_is_named():
    before = signal.getsignal(signal.SIGTERM)
    request = StopRequest()
    with stop_on_signals(request):
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.cancel.wait(10) and request.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        request = StopRequest()
        with stop_on_signals(request):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert not request.cancel.is_set() and request.signal_name is None
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_signal_while_archiving_is_held_and_said(tmp_path, capsys):
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even when the suite runs under nohup
    try:
        request = StopRequest()
        with (
            stop_on_signals(request),
            request.archiving("20261123-000000-abcd", tmp_path / "store" / "staging" / "20261123-000000-abcd"),
        ):
            os.kill(os.getpid(), signal.SIGINT)  # the first: wait for the commit
            assert request.cancel.wait(10)  # acted on by the watcher thread, after the line is said
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert err.strip() == (
        "xlarun: SIGINT while archiving run 20261123-000000-abcd: finishing the commit first (send it again to stop now; "
        "what is not committed then stays in staging/ for `xlarun recover`)"
    )


def test_a_burst_while_archiving_is_one_request_and_a_later_signal_stops_at_once(tmp_path, monkeypatch, capsys):
    """Ctrl-C mashed while a run is committed: the first signal holds the commit and says so, the rest of the burst
    is the same request (a burst once left runs uncommitted in staging/); a signal sent after the note stops at once."""
    from xlarun import interrupts

    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    request = StopRequest()
    with request.archiving("20261128-000000-abcd", tmp_path / "s" / "staging" / "20261128-000000-abcd"):
        for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            request.on_signal(sig)
        assert exits == [] and request.cancel.is_set() and request.signal_name == "SIGINT"
        time.sleep(interrupts.SAME_REQUEST_S + 0.05)
        request.on_signal(signal.SIGTERM)
    assert exits == [143]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "finishing the commit first" in lines[0]
    assert "SIGTERM: stopped while archiving; run 20261128-000000-abcd is not committed" in lines[1]


def test_a_burst_of_signals_never_deadlocks_the_handler():
    """Ctrl-C mashed, SIGINT and SIGTERM microseconds apart: the handler only writes to the wakeup pipe and
    one thread acts, so nothing re-enters ``Event.set`` or a lock, and it all ends."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request = StopRequest()
    sent = 0

    def burst() -> None:
        nonlocal sent
        for i in range(2000):
            os.kill(os.getpid(), signal.SIGINT if i % 2 else signal.SIGTERM)
            sent += 1

    try:
        with stop_on_signals(request):
            sender = threading.Thread(target=burst)
            started = time.monotonic()
            sender.start()
            while sender.is_alive():
                request.cancel.is_set()  # the main thread busy while the signals land
                _ = request.signal_name
            sender.join()
            assert request.cancel.wait(10)
            took = time.monotonic() - started
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent == 2000 and took < 30
    assert 1 <= len(request.received) <= sent  # pending signals of one kind coalesce
    assert set(request.received) <= {signal.SIGINT, signal.SIGTERM}


def test_the_processes_of_a_many_process_job_are_found_by_their_run_and_each_apart(tmp_path):
    import subprocess
    import sys

    from xlarun.interrupts import JOB_MARK, job_processes

    run = tmp_path / "staging" / "r1"
    mark = run / "processes" / "process-0"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env={JOB_MARK: str(mark)})
    try:
        assert child.pid in job_processes(run)  # recover and a stop of the whole run see every process
        assert child.pid in job_processes(mark)  # its own leftovers are its own
        assert child.pid not in job_processes(run / "processes" / "process-1")  # and not another process's
        assert child.pid not in job_processes(tmp_path / "staging" / "r")  # nor another run's whose id is a prefix
    finally:
        child.kill()
        child.wait()


def test_a_ctrl_c_swallowed_before_the_capture_still_stops_it():
    """A Ctrl-C while xlarun starts raises KeyboardInterrupt wherever Python is, and a library may catch it
    (coverage's start-up hook does, pydantic may while it builds a model): the capture must not then run as if
    nothing was sent. The CLI remembers it, and the capture's signal routing acts on it at once."""
    from xlarun.interrupts import _EARLY, remember_early_interrupts

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        remember_early_interrupts()
        with pytest.raises(KeyboardInterrupt):  # still Python's behaviour for whoever does not swallow it
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # a library swallowing it
        request = StopRequest()
        with stop_on_signals(request):
            assert request.cancel.is_set() and request.signal_name == "SIGINT"
        assert _EARLY == []  # acted on once
        fresh = StopRequest()
        with stop_on_signals(fresh):  # the next capture of this process starts clean
            assert not fresh.cancel.is_set()
    finally:
        signal.signal(signal.SIGINT, previous)
        _EARLY.clear()


def test_remembering_leaves_an_ignored_ctrl_c_ignored():
    from xlarun.interrupts import remember_early_interrupts

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # nohup, a background job
    try:
        remember_early_interrupts()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
