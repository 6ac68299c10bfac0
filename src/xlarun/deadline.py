"""A child process with a deadline: the one place xlarun starts a tool it may have to stop (graphviz's ``dot``, an
XLA runner, a replay on another jaxlib release, Model Explorer's server).

The child gets a session of its own, so stopping it stops everything it started (a runner's threads, a release
replay's worker, a server's helpers), and nothing else: ``stop_group`` signals the whole group. Past its deadline,
or when xlarun itself is interrupted (Ctrl-C, SIGTERM) while it waits, the group is killed before the caller hears
of it, so no child outlives the command that started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Finished:
    """How a child ended: its exit status (negative: killed by that signal), its output, and whether it was
    killed for running past its deadline."""

    returncode: int
    stdout: Any
    stderr: Any
    timed_out: bool


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """``argv`` started in a session of its own (``popen``: Popen's other arguments)."""
    return subprocess.Popen(list(argv), start_new_session=True, **popen)


def stop_group(proc: subprocess.Popen, grace_s: float = 0.0) -> None:
    """Stop ``proc`` and everything in its process group: SIGTERM first when ``grace_s`` > 0, then SIGKILL for
    whatever is left (the leader, or children that ignored SIGTERM); then reap it. A group already gone is fine."""
    if grace_s > 0:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def communicate_within(proc: subprocess.Popen, timeout_s: float | None, input: Any = None) -> Finished:
    """Feed ``input`` to ``proc`` and collect its output for at most ``timeout_s`` seconds (None: no deadline);
    past it, or on any interruption of xlarun, its group is killed first."""
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
        return Finished(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        return Finished(proc.returncode, out, err, True)
    except BaseException:
        stop_group(proc)
        raise


def wait_within(proc: subprocess.Popen, timeout_s: float | None) -> Finished:
    """Wait for ``proc`` (whose output someone else reads) at most ``timeout_s`` seconds, as
    :func:`communicate_within` does; its ``stdout`` and ``stderr`` are None."""
    try:
        return Finished(proc.wait(timeout=timeout_s), None, None, False)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return Finished(proc.wait(), None, None, True)
    except BaseException:
        stop_group(proc)
        raise


def run_within(argv: Sequence[str], timeout_s: float | None, input: Any = None, **popen: Any) -> Finished:
    """``argv`` run to its end or to its deadline, its output collected (``popen``: Popen's other arguments,
    e.g. ``text=True``, ``env``); stdout and stderr are piped unless ``popen`` says otherwise."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen.setdefault("stdin", subprocess.PIPE)
    return communicate_within(start(argv, **popen), timeout_s, input)
