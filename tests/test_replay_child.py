"""The one child-process server the replay worker and the compile probe share (replay/child.py), with a child of
our own: what it prints cannot reach the answers, an error travels back, a death is told with its status and
stderr, and a stopped child exits as a program does (its atexit work done)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from xlarun.replay.child import Child

ECHO_CHILD = r"""
import atexit, os, sys
from pathlib import Path
from xlarun.errors import InputError
from xlarun.replay.child import serve

atexit.register(lambda: Path(os.environ["ECHO_ATEXIT"]).write_text("done"))


def handle(request, send):
    print("noise on stdout")  # must not reach the parent's answers
    if request.get("die"):
        sys.stderr.write("Check failed: something\n")
        sys.stderr.flush()
        os._exit(request["die"])
    if request.get("refuse"):
        raise InputError("not this one", "try another")
    if request.get("bug"):
        raise KeyError("oops")
    if request.get("sleep"):
        import time
        time.sleep(request["sleep"])
    send({"log": "working"})
    return {"echo": request["value"]}


sys.exit(serve(handle, parent=int(sys.argv[-1])))
"""


@pytest.fixture
def child(tmp_path, monkeypatch):
    (tmp_path / "echo_child.py").write_text(ECHO_CHILD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    monkeypatch.setenv("ECHO_ATEXIT", str(tmp_path / "atexit"))
    made = Child("echo_child", str(tmp_path))
    yield made
    made.stop()


def test_messages_come_in_order_and_stdout_noise_never_reaches_them(child):
    child.start([])
    assert child.send({"value": 7})
    deadline = time.monotonic() + 120
    assert child.receive(deadline) == {"log": "working"}
    assert child.receive(deadline) == {"echo": 7}
    assert child.send({"value": [1, 2]}) and child.receive(deadline) == {"log": "working"}
    assert child.receive(deadline) == {"echo": [1, 2]} and child.starts == 1


def test_an_error_and_a_bug_travel_back_and_the_child_goes_on(child):
    child.start([])
    deadline = time.monotonic() + 120
    child.send({"refuse": True})
    error = child.receive(deadline)["error"]
    assert (error["class"], error["message"], error["hint"], error["exit_code"]) == (
        "InputError",
        "not this one",
        "try another",
        2,
    )
    child.send({"bug": True})
    assert "KeyError: 'oops'" in child.receive(deadline)["bug"]
    child.send({"value": 1})
    assert child.receive(deadline) == {"log": "working"} and child.running


def test_a_death_is_told_with_its_status_and_stderr_and_a_hang_is_killed(child):
    child.start([])
    child.send({"die": 5})
    assert child.receive(time.monotonic() + 120) is None
    status, stderr = child.ended(kill=False)
    assert status == 5 and "Check failed: something" in stderr and not child.running
    child.start([])
    child.send({"sleep": 600, "value": 0})
    assert child.receive(time.monotonic() + 1) is None  # the deadline passed
    status, _ = child.ended(kill=True)
    assert status == -9 and child.starts == 2


def test_a_stopped_child_exits_as_a_program_does(child, tmp_path):
    child.start([])
    child.send({"value": 1})
    child.receive(time.monotonic() + 120)
    proc = child.proc
    child.stop(grace_s=60)
    assert proc.returncode == 0 and (tmp_path / "atexit").read_text() == "done"
