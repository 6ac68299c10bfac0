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

import json
import os
import socket
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
