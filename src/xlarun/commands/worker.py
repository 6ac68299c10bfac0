"""``worker``: join a Ray cluster offering the backends this machine proves it can run."""

from __future__ import annotations

from typing import Annotated

import typer

from . import JsonOption


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    address: Annotated[
        str | None, typer.Option("--address", envvar="RAY_ADDRESS", help="The cluster's head (HOST:6379).", show_default=False)
    ] = None,
    head: Annotated[bool, typer.Option("--head", help="Start the cluster's head here instead of joining one.")] = False,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            min=1,
            help="CPU cells (local, docker-cpu) this node runs at once (default: half its cores).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what this node would offer and the `ray start` command, start nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Start Ray on this machine offering what it can run: xlarun_local, xlarun_docker_cpu, xlarun_docker_gpu, xlarun_ipu.

    Each resource is offered only when `xlarun doctor`'s checks prove it: a framework for local cells, the
    Docker daemon and the xlarun-cpu image for docker-cpu, the NVIDIA runtime and a GPU for docker-gpu, an IPU
    for docker-ipu. Cells of `xlarun batch --executor ray` ask for their backend's resource, so Ray runs each
    where it can. `ray stop` on this machine stops the node.

    Example: xlarun worker --address 10.0.0.1:6379
    """
    from ..console import print_json, say
    from ..errors import InputError
    from ..executors.worker import start_worker

    if not head and not address:
        raise InputError(
            "give the cluster to join with --address HOST:6379, or --head to start one here",
            "`ray start --head` prints the address",
        )
    plan = start_worker(address, head=head, slots=slots, dry_run=dry_run)
    if as_json:
        print_json({"offers": plan.offers, "not_offered": plan.not_offered, "command": plan.command, "started": plan.started})
        return
    for resource, units in plan.offers.items():
        say(f"[green]offers[/green] {resource} {units}")
    for resource, why in plan.not_offered.items():
        say(f"[dim]no     {resource}: {why}[/dim]")
    say(("would run: " if dry_run else "ran: ") + " ".join(plan.command))
