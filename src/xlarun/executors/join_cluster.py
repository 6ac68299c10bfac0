"""``xlarun worker``: ``ray start`` with the resources this machine proves it has (see :mod:`placement`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from xlarun.errors import EnvironmentProblem
from xlarun.executors.placement import probe_node_resources
from xlarun.executors.ray_connect import RAY_EXTRA_HINT, import_ray, token_auth_env


@dataclass
class WorkerPlan:
    """What this node offers (resource -> units), what it does not and why, and the ``ray start`` command line."""

    offers: dict[str, int]
    not_offered: dict[str, str]
    command: list[str]
    started: bool = False
    output: str = field(default="", repr=False)


def ray_start_command(address: str | None, offers: dict[str, int], head: bool = False) -> list[str]:
    """The ``ray start`` command line that joins ``address`` (or starts a head) offering ``offers``."""
    beside = Path(sys.executable).with_name("ray")  # the venv's own, when xlarun runs from one
    ray_cli = str(beside) if beside.exists() else (shutil.which("ray") or "ray")
    where = ["--head"] if head else ["--address", address or ""]
    return [ray_cli, "start", *where, "--resources", json.dumps(offers, separators=(",", ":"))]


def start_worker(address: str | None, *, head: bool = False, slots: int | None = None, dry_run: bool = False) -> WorkerPlan:
    """Probe this machine and start (unless ``dry_run``) a Ray node offering what it can run."""
    import_ray()  # without Ray: exit 3 naming the extra
    found = probe_node_resources(slots)
    offers = {c.resource: c.units for c in found if c.units}
    plan = WorkerPlan(offers, {c.resource: c.why for c in found if not c.units}, ray_start_command(address, offers, head))
    if dry_run:
        return plan
    if not offers:
        raise EnvironmentProblem(
            "this machine can run no xlarun cell: " + "; ".join(f"{k}: {v}" for k, v in plan.not_offered.items()),
            f"`xlarun doctor` says how to fix each; Ray itself comes with {RAY_EXTRA_HINT}",
        )
    done = subprocess.run(plan.command, capture_output=True, text=True)
    if done.returncode != 0 and "InvalidAuthToken" in done.stdout + done.stderr and not os.environ.get("RAY_AUTH_MODE"):
        # the head uses token authentication (`ray start --head` does): join with the token this machine holds
        done = subprocess.run(plan.command, capture_output=True, text=True, env=token_auth_env(dict(os.environ)))
    plan.output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        last = plan.output.splitlines()[-1] if plan.output else f"exit {done.returncode}"
        raise EnvironmentProblem(
            f"`ray start` failed: {last}", "check the address, and that this machine's Ray version is the cluster's"
        )
    plan.started = True
    return plan
