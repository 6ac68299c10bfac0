"""Reaching Ray: the module itself (or one line naming the extra that installs it), and a connection to a cluster,
or a one-machine cluster offering what this machine serves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xlarun.errors import EnvironmentProblem
from xlarun.executors.placement import probe_node_resources

RAY_EXTRA_HINT = "pip install 'xlarun[ray]'"


def import_ray() -> Any:
    """The ``ray`` module, or EnvironmentProblem (exit 3) naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise EnvironmentProblem("--executor ray needs Ray, which is not installed", RAY_EXTRA_HINT) from None
    return ray


def token_auth_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with ``RAY_AUTH_MODE=token`` when a Ray token is at hand and no mode is set: what joining a head
    started by ``ray start --head`` (token authentication, Ray 2.5x and later) needs. Not a default: a client in
    token mode connects to a cluster without tokens, but its task cancellations then go unheard."""
    has_token = (
        environ.get("RAY_AUTH_TOKEN") or Path(environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").is_file()
    )
    return {**environ, "RAY_AUTH_MODE": "token"} if has_token and not environ.get("RAY_AUTH_MODE") else dict(environ)


def connect(address: str | None) -> tuple[Any, bool]:
    """Connect this process to the cluster at ``address`` (or ``$RAY_ADDRESS``); with neither, start a one-machine
    cluster offering what this machine serves. Returns (ray, whether this call connected, and so must disconnect)."""
    ray = import_ray()
    if ray.is_initialized():  # a notebook or a test already connected: use that cluster, leave it connected
        return ray, False
    address = address or os.environ.get("RAY_ADDRESS")
    try:
        if address:
            ray.init(address=address, namespace="xlarun", log_to_driver=False, logging_level="ERROR", configure_logging=False)
        else:
            offer = {c.resource: c.units for c in probe_node_resources() if c.units}
            ray.init(
                address="local",
                resources=offer,
                namespace="xlarun",
                log_to_driver=False,
                logging_level="ERROR",
                include_dashboard=False,
                configure_logging=False,
            )
    except Exception as exc:  # ConnectionError, RuntimeError...: Ray's message says what it tried
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise EnvironmentProblem(
            f"cannot reach the Ray cluster at {address or 'a new local cluster'}: {first}",
            "start the head with `ray start --head`, workers with `xlarun worker --address HEAD:6379`; a head that "
            "uses token authentication (`ray start --head` does) needs RAY_AUTH_MODE=token and its ~/.ray/auth_token here",
        ) from None
    return ray, True
