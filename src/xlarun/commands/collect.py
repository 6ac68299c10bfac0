"""``collect``: bring in the runs that stopped Ray batches left on the cluster's nodes."""

from __future__ import annotations

from typing import Annotated

import typer

from . import JsonOption, StoreOption, open_store


def register(app: typer.Typer) -> None:
    app.command("collect")(collect)


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
    from ..console import print_json, say
    from ..errors import ExitCode, InputError
    from ..executors.ray_cluster import collect_left_runs, import_ray

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


def _print_rows(rows: list[dict], root) -> None:
    from ..console import print_table, say

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
