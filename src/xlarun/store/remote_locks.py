"""Locks on a remote that keep ``gc --remote`` and pushes apart.

A push relies on objects it found on the remote (a pack it did not send again, a delta's base) until it publishes the
run that names them; a gc deletes objects no published run names. Were they to overlap, a push could publish a run
naming a pack the gc just deleted. So each writes a lock object first (``locks/push-<id>.json``,
``locks/gc-<id>.json``), then lists the locks, and stops (deleting its own) when the other kind holds one: whichever
listed second sees the other's lock, so they never both go on (S3 lists what was written before; AWS S3 and
SeaweedFS both promise that). A lock older than :data:`LEASE` on the server's clock, left by a killed process, is
ignored; a lock is deleted when its holder ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from xlarun.errors import EnvironmentProblem
from xlarun.store.remote import ObjectStore, RemoteEntry

#: How long a lock holds: a push or gc killed without deleting its lock stops the other kind for at most this long.
LEASE = timedelta(hours=1)
_OTHER = {"push": "gc", "gc": "push"}


def live_locks(remote: ObjectStore, kind: str, since: RemoteEntry | None = None) -> list[RemoteEntry]:
    """The locks of ``kind`` ("push" or "gc") younger than :data:`LEASE` (measured against ``since``, a lock just
    written, or against the newest lock listed)."""
    listed = remote.entries("locks/")
    if not listed:
        return []
    now = since.modified if since is not None else max(e.modified for e in listed)
    return [e for e in listed if e.name.startswith(f"locks/{kind}-") and now - e.modified < LEASE]


@contextmanager
def remote_lock(remote: ObjectStore, kind: str) -> Iterator[str]:
    """Hold a ``kind`` lock ("push" or "gc") on the remote while the block runs; EnvironmentProblem (exit 3), nothing
    done, while the other kind holds a live one."""
    name = f"locks/{kind}-{uuid.uuid4().hex}.json"
    remote.entries("locks/")  # a missing bucket is said here: a put first could make it (SeaweedFS makes one for an admin)
    remote.put(name, json.dumps({"kind": kind, "host": socket.gethostname(), "pid": os.getpid()}).encode())
    try:
        mine = next((e for e in remote.entries("locks/") if e.name == name), None)
        others = live_locks(remote, _OTHER[kind], since=mine)
        if others:
            raise _conflict(remote, kind, others)
        yield name
    finally:
        remote.delete([name])


def _conflict(remote: ObjectStore, kind: str, others: list[RemoteEntry]) -> EnvironmentProblem:
    first = min(e.modified for e in others).strftime("%Y-%m-%d %H:%M:%S UTC")
    if kind == "push":
        return EnvironmentProblem(
            f"a gc --remote is deleting on {remote.spec.url} (since {first}); nothing was pushed",
            f"push again once it ends (a gc's lock older than {LEASE} is ignored)",
        )
    return EnvironmentProblem(
        f"{len(others)} push(es) to {remote.spec.url} are under way (since {first}); nothing was deleted",
        f"run gc again once they end (a lock older than {LEASE}, a killed push's, is ignored)",
    )


#: How long a push waits for the push of a run of the same name holding the turn before it takes the turn over.
NAME_WAIT_S = 60.0
_POLL_S = 0.2


@contextmanager
def same_name_turn(remote: ObjectStore, name: str) -> Iterator[None]:
    """Hold the turn of the pushes of runs named ``name`` while the block runs: hosts pushing the same program at
    once then send its new files once (the first sends them, the next finds them on the remote). The turn is one
    object, ``locks/turn-<hash of name>.json``, written with a conditional put (one writer wins); the others poll
    until it is gone. One left by a killed push (or held longer than :data:`NAME_WAIT_S`) is taken over, at once
    when its holder was a process of this host that has ended: the turn is an economy, never a need for
    correctness (a push finds on the remote only what is published or listed)."""
    key = f"locks/turn-{hashlib.sha256(name.encode()).hexdigest()[:16]}.json"
    body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "id": uuid.uuid4().hex}).encode()
    seen, since = None, time.monotonic()
    while not remote.put_once(key, body):
        holder = next((e for e in remote.entries(key) if e.name == key), None)
        stamp = holder.modified if holder is not None else None
        if stamp != seen:
            seen, since = stamp, time.monotonic()
        elif stamp is not None and time.monotonic() - since >= NAME_WAIT_S:
            remote.delete([key])  # held past the wait: a killed push's, taken over
        if stamp is not None and _holder_gone(remote.get(key)):
            remote.delete([key])  # a push of this host, killed: no wait
            continue
        time.sleep(_POLL_S)
    taken = time.monotonic()
    try:
        yield
    finally:  # held past the wait, it may have been taken over: deleted only if still ours
        if time.monotonic() - taken < NAME_WAIT_S or remote.get(key) == body:
            remote.delete([key])


def _holder_gone(body: bytes | None) -> bool:
    """Whether a turn's holder was a process of this host that no longer runs."""
    try:
        holder = json.loads(body or b"{}")
        if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
            return False
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except (ValueError, AttributeError, OSError):
        return False
    return False
