"""A captured run pushed to the remote its spec names (``remote: team``), once the run is committed here.

The run is kept here whatever the push does: a push that fails (the server down, read-only credentials, boto3
missing) is recorded in the capture's result and made an error (exit 3) that says how to push the run later. The
remote code, and boto3 with it, is imported only for a spec that names a remote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xlarun.errors import EnvironmentProblem, XlarunError
from xlarun.store.facade import LocalStore


@dataclass
class RemotePush:
    """What the push after a capture did: sent (with its bytes), found the run there already, or failed (why)."""

    remote: str
    pushed: bool
    bytes: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "pushed": self.pushed, "bytes": self.bytes, "error": self.error}


def check_remote(name: str) -> None:
    """InputError (exit 2) before anything runs when ``name`` is no remote (reads the remotes file; no boto3)."""
    from xlarun.store.remote import find_remote

    find_remote(name)


def push_captured(store: LocalStore, run_id: str, remote: str) -> RemotePush:
    """Push a committed run to ``remote``; a failure is returned, never raised (the run stays here)."""
    try:
        from xlarun.store.remote import ObjectStore, find_remote
        from xlarun.store.remote_sync import RemoteSync

        transfer = RemoteSync(store, ObjectStore(find_remote(remote))).push([run_id])
    except XlarunError as exc:
        return RemotePush(remote, False, error=exc.one_line())
    return RemotePush(remote, True, transfer.bytes)


def push_failure(run_id: str, push: RemotePush | None) -> XlarunError | None:
    """The error a capture ends with when its push failed (exit 3: the remote is a component); None otherwise."""
    if push is None or push.pushed:
        return None
    return EnvironmentProblem(
        f"run {run_id} is captured and kept here, but its push to remote {push.remote!r} failed: {push.error}",
        f"`xlarun push {run_id} --remote {push.remote}` sends it",
    )
