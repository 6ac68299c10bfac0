"""The Ray cluster's commands: ``worker`` joins a cluster offering the backends this machine proves it can run;
``collect`` brings in the runs that stopped Ray batches left on the cluster's nodes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from xlarun.commands import JsonOption, StoreOption, open_store


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
    app.command("collect")(collect)


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
    from xlarun.console import print_json, say
    from xlarun.errors import InputError
    from xlarun.executors.join_cluster import start_worker

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


def collect(
    address: Annotated[
        str | None,
        typer.Option(
            "--address", envvar="RAY_ADDRESS", help="The Ray cluster (HOST:6379, ray://HOST:10001).", show_default=False
        ),
    ] = None,
    prune: Annotated[
        bool, typer.Option("--prune", help="Also remove the staging folders of captures that ended without a run.")
    ] = False,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ship into the store the runs that stopped Ray batches left on the nodes.

    A Ray batch stopped by Ctrl-C waits for each node to archive its running cell as an interrupted run and
    ships it back. A node that did not confirm in time, or a second Ctrl-C, leaves that run in the node's
    staging store. This command finds such runs on every node of the cluster, ships them here (only the files
    this store lacks, verified by digest), commits them under their own run ids and removes them from the
    nodes. Cells that a batch still runs or fetches, and runs still being archived, are left alone and listed.

    Example: xlarun collect --address 10.0.0.1:6379
    """
    from xlarun.console import print_json, say
    from xlarun.errors import ExitCode, InputError
    from xlarun.executors.left_runs import collect_left_runs
    from xlarun.executors.ray_connect import import_ray

    ray = import_ray()  # without Ray, one line naming the extra (exit 3)
    if not address and not ray.is_initialized():
        raise InputError("give the cluster with --address HOST:6379 (or RAY_ADDRESS)", "the address `ray start --head` printed")
    the_store = open_store(store, create=True)
    rows = collect_left_runs(the_store, address, prune=prune)
    failed = [r for r in rows if r["action"] == "failed"]
    if as_json:
        print_json({"store": str(the_store.root), "found": rows})
    elif not rows:
        say("no Ray batch left anything on the nodes")
    else:
        _print_rows(rows, the_store.root)
    if failed:  # each stays on its node: running collect again retries it
        raise typer.Exit(int(ExitCode.ENVIRONMENT))


def _print_rows(rows: list[dict], root: Any) -> None:
    from xlarun.console import print_table, say

    print_table(
        ("node", "state", "run", "status", "action", "staging folder"),
        [(r["node"], r["state"], r["run_id"] or "", r["status"] or "", r["action"], r["scratch"]) for r in rows],
    )
    for row in rows:
        if row["action"] == "failed":
            say(
                f"[red]{row['scratch']}[/red] on {row['node']}: not collected: {row['error']} (it stays there; run collect again)"
            )
    collected = sum(r["action"] == "collected" for r in rows)
    say(f"{collected} run(s) collected into {root}")
