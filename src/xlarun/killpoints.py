"""A test hook: ``XLARUN_KILL_AT`` makes xlarun SIGKILL itself at a named point of capture and archive.

The torture tests use it to prove that a ``kill -9`` between any two steps leaves no half-written run.
``XLARUN_KILL_AT=pack-written:3`` kills at the third time a pack is written; ``XLARUN_KILL_AT=7`` at the
seventh kill point reached, whatever its name. Unset (always, outside the tests), a kill point costs one
dictionary lookup.

``XLARUN_HOLD_AT=STEP`` with ``XLARUN_HOLD_FILE=PATH`` pauses instead: at the step's first hit xlarun creates
PATH and waits while it exists (at most two minutes), so a test can send signals into a step for certain
rather than by timing.
"""

from __future__ import annotations

import os
import signal
import threading
import time

_lock = threading.Lock()
_hits: dict[str, int] = {}


def kill_point(step: str) -> None:
    """SIGKILL this process if ``XLARUN_KILL_AT`` names this step (and this is its Nth hit)."""
    if os.environ.get("XLARUN_HOLD_AT") == step:
        _hold(step)
    wanted = os.environ.get("XLARUN_KILL_AT")
    if not wanted:
        return
    if ":" in wanted:
        name, _, nth = wanted.rpartition(":")
    else:  # "7": the seventh point reached; "committed": its first hit
        name, nth = ("*", wanted) if wanted.isdigit() else (wanted, "1")
    if name not in ("*", step):
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        hit = _hits[name]
    if hit == int(nth or 1):
        if trace := os.environ.get("XLARUN_KILL_TRACE"):  # says where the kill landed, for the test's figures
            with open(trace, "a") as out:
                out.write(f"{step}\n")
        os.kill(os.getpid(), signal.SIGKILL)


def _hold(step: str) -> None:
    """Wait while ``XLARUN_HOLD_FILE`` exists, having created it at this step's first hit."""
    path = os.environ.get("XLARUN_HOLD_FILE")
    with _lock:
        first = f"hold:{step}" not in _hits
        _hits[f"hold:{step}"] = 1
    if not path or not first:
        return
    with open(path, "w") as out:
        out.write(f"{os.getpid()} {step}\n")
    deadline = time.monotonic() + 120
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
