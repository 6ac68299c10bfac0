"""``batch``: run every cell of a matrix spec and compare them side by side."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from xlarun.commands import JsonOption, StoreOption, open_store

if TYPE_CHECKING:
    from xlarun.batch import CellOutcome


def register(app: typer.Typer) -> None:
    app.command("batch")(batch)


def batch(
    spec: Annotated[Path, typer.Argument(help="A run spec, usually with a `matrix:` section.", show_default=False)],
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", min=1, help="Cells run at the same time (local: 1; ray: every cell, up to 32).", show_default=False
        ),
    ] = None,
    fail_fast: Annotated[
        bool | None,
        typer.Option(
            "--fail-fast/--no-fail-fast",
            help="Stop after the first failing cell (default: the spec's fail_fast).",
            show_default=False,
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            "-x",
            help="local (threads here) or ray (tasks on a Ray cluster); default: the spec's executor, else local.",
            show_default=False,
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            envvar="RAY_ADDRESS",
            help="The Ray cluster (HOST:6379, ray://HOST:10001, auto); without it --executor ray starts one on this machine.",
            show_default=False,
        ),
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="With ray: run a cell whose node was lost again, this many times.")
    ] = 0,
    ship: Annotated[
        str,
        typer.Option(
            "--ship",
            help="With ray: send the spec's folder to the nodes. auto: a node that has the same files at the same path "
            "runs them, others a copy; always: every node runs the copy (the folder as it was when the batch started); "
            "never: each node must have the files.",
        ),
    ] = "auto",
    remote: Annotated[
        str | None,
        typer.Option(
            "--remote",
            metavar="NAME",
            help="With ray: each node pushes its cells' runs straight to this remote (a name or s3:// URL), with the "
            "node's own AWS credentials; nothing is shipped back here (`modules --remote NAME` finds them).",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Capture every cell of SPEC's matrix (e.g. across backends or flag sets), then compare them.

    Each cell is an ordinary run in the store, tagged with the batch id and its matrix values
    (`xlarun runs --batch ID` lists them). The table at the end compares status, time, modules,
    the main module's instruction counts before and after optimization, files and dump size.

    With --executor ray each cell runs as a Ray task on a node that serves its backend (nodes say what they
    serve when started with `xlarun worker --address ADDR`); the finished runs are shipped back into this
    store, and the table says which node each cell ran on. With --remote NAME too, each node pushes its runs to
    that team store instead, and `collect` has nothing to take back for them.

    Example: xlarun batch configs/matrix-local-docker.yaml -j 2
    """
    from xlarun.capture.spec_yaml import load_batch

    cells = load_batch(spec)
    the_store = open_store(store, create=True)
    run_and_report(
        cells,
        the_store,
        jobs=jobs,
        fail_fast=fail_fast,
        as_json=as_json,
        executor=executor,
        address=address,
        retries=retries,
        ship=ship,
        remote=remote,
    )


def run_and_report(
    cells: Any,
    store: Any,
    *,
    jobs: int | None,
    fail_fast: bool | None,
    as_json: bool,
    executor: str | None = None,
    address: str | None = None,
    retries: int = 0,
    ship: str = "auto",
    remote: str | None = None,
) -> None:
    """Run a batch with a live progress view, print the comparison, exit non-zero unless every cell captured
    (:attr:`~xlarun.batch.BatchResult.exit_code`: the code ``capture`` would give).
    ``executor`` None: the spec's (``executor:``), else local."""
    from xlarun.batch import cell_summary
    from xlarun.console import print_json, say
    from xlarun.executors import executor_of, run_batch_on
    from xlarun.present import print_comparison

    executor = executor_of(cells, executor)
    team = None
    if remote is not None:
        from xlarun.store.remote import find_remote

        team = find_remote(remote)

    if executor == "ray":
        from xlarun.executors.ray_connect import import_ray

        import_ray()  # before the progress view: without Ray, one line naming the extra (exit 3)
    view = None if as_json else _ProgressView(len(cells))
    if view:
        how = f"{jobs or 1} at a time" if executor == "local" else f"on the Ray cluster at {address or 'a new local cluster'}"
        say(f"[bold]batch[/bold] of {len(cells)} cell(s), {how} -> {team.url if team else store.root}")
        view.start()
    try:
        result = run_batch_on(
            executor,
            cells,
            store,
            jobs=jobs,
            fail_fast=fail_fast,
            on_event=view.update if view else None,
            address=address,
            retries=retries,
            ship=ship,
            remote=team,
        )
    finally:
        if view:
            view.stop()
    if as_json:
        print_json(
            {
                "batch_id": result.batch_id,
                "remote": team.url if team else None,
                "ok": result.ok,
                "interrupted": result.interrupted,
                "cells": [cell_summary(c) for c in result.cells],
            }
        )
    else:
        print_comparison(result)
    if result.exit_code:
        raise typer.Exit(result.exit_code)  # capture's codes: 130 Ctrl-C, 143 SIGTERM, 3 a store it cannot write...


class _ProgressView:
    """One live table on stderr: a line per cell with its state and elapsed time."""

    def __init__(self, total: int):
        from rich.console import Console
        from rich.live import Live

        self.cells: dict[int, CellOutcome] = {}
        self.total = total
        self.lock = threading.Lock()
        self.live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4, transient=True)

    def _render(self) -> Any:
        from rich.table import Table

        table = Table(box=None, show_header=False, pad_edge=False)
        done = sum(1 for c in self.cells.values() if c.state in ("done", "error", "skipped"))
        table.add_row(f"[bold]{done}/{self.total} cells finished[/bold]", "")
        for cell in sorted(self.cells.values(), key=lambda c: c.index):
            elapsed = cell.elapsed_s if cell.elapsed_s is not None else (time.monotonic() - cell.started if cell.started else 0.0)
            where = f" on {cell.node}" if cell.node and cell.state == "running" else ""
            table.add_row(f"  {cell.label}", f"{cell.status}{where} {elapsed:.0f}s")
        return table

    def start(self) -> None:
        self.live.start()

    def update(self, cell: CellOutcome) -> None:
        with self.lock:
            self.cells[cell.index] = cell
            self.live.update(self._render())

    def stop(self) -> None:
        self.live.stop()
