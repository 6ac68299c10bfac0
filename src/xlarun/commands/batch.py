"""``batch``: run every cell of a matrix spec and compare them side by side."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import JsonOption, StoreOption, open_store


def register(app: typer.Typer) -> None:
    app.command("batch")(batch)


def batch(
    spec: Annotated[Path, typer.Argument(help="A run spec, usually with a `matrix:` section.", show_default=False)],
    jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Cells run at the same time (local: 1; ray: every cell, up to 32).", show_default=False)] = None,
    fail_fast: Annotated[Optional[bool], typer.Option("--fail-fast/--no-fail-fast", help="Stop after the first failing cell (default: the spec's fail_fast).", show_default=False)] = None,
    executor: Annotated[Optional[str], typer.Option("--executor", "-x", help="local (threads here) or ray (tasks on a Ray cluster); default: the spec's executor, else local.", show_default=False)] = None,
    address: Annotated[Optional[str], typer.Option("--address", envvar="RAY_ADDRESS", help="The Ray cluster (HOST:6379, ray://HOST:10001, auto); without it --executor ray starts one on this machine.", show_default=False)] = None,
    retries: Annotated[int, typer.Option("--retries", min=0, help="With ray: run a cell whose node was lost again, this many times.")] = 0,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Capture every cell of SPEC's matrix (e.g. across backends or flag sets), then compare them.

    Each cell is an ordinary run in the store, tagged with the batch id and its matrix values
    (`xlarun runs --batch ID` lists them). The table at the end compares status, time, modules,
    the main module's instruction counts before and after optimization, files and dump size.

    With --executor ray each cell runs as a Ray task on a node that serves its backend (nodes say what they
    serve when started with `xlarun worker --address ADDR`); the finished runs are shipped back into this
    store, and the table says which node each cell ran on.

    Example: xlarun batch configs/matrix-local-docker.yaml -j 2
    """
    from ..spec import load_batch

    cells = load_batch(spec)
    the_store = open_store(store, create=True)
    run_and_report(cells, the_store, jobs=jobs, fail_fast=fail_fast, as_json=as_json, executor=executor, address=address, retries=retries)


def run_and_report(cells, store, *, jobs: int | None, fail_fast: bool | None, as_json: bool, executor: str | None = None,
                   address: str | None = None, retries: int = 0) -> None:
    """Run a batch with a live progress view, print the comparison, exit non-zero unless every cell captured.
    ``executor`` None: the spec's (``executor:``), else local."""
    from ..console import print_json, say
    from ..errors import ExitCode
    from ..executors import executor_of, run_batch_on

    executor = executor_of(cells, executor)

    if executor == "ray":
        from ..executors.ray_cluster import import_ray

        import_ray()  # before the progress view: without Ray, one line naming the extra (exit 3)
    view = None if as_json else _ProgressView(len(cells))
    if view:
        how = f"{jobs or 1} at a time" if executor == "local" else f"on the Ray cluster at {address or 'a new local cluster'}"
        say(f"[bold]batch[/bold] of {len(cells)} cell(s), {how} -> {store.root}")
        view.start()
    try:
        result = run_batch_on(executor, cells, store, jobs=jobs, fail_fast=fail_fast, on_event=view.update if view else None,
                              address=address, retries=retries)
    finally:
        if view:
            view.stop()
    if as_json:
        print_json({"batch_id": result.batch_id, "ok": result.ok, "interrupted": result.interrupted, "cells": [_cell_json(c) for c in result.cells]})
    else:
        print_comparison(result)
    if result.interrupted:
        from ..interrupts import exit_code_for

        raise typer.Exit(exit_code_for(result.signal))  # 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
    if not result.ok:
        raise typer.Exit(int(ExitCode.FAILED))


def _cell_json(cell) -> dict:
    from ..batch import main_module_counts

    before, after = main_module_counts(cell.result)
    result = cell.result
    return {
        "values": cell.values,
        "status": cell.status,
        "error": cell.error,
        "run_id": result.run_id if result else None,
        "seconds": round(cell.elapsed_s, 3) if cell.elapsed_s is not None else None,
        "modules": len(result.modules) if result else None,
        "main_module": result.modules[0].name if result and result.modules else None,
        "main_fingerprint": result.modules[0].fingerprint if result and result.modules else None,
        "main_instr_before": before,
        "main_instr_after": after,
        "files": result.manifest.files if result else None,
        "dump_bytes": result.manifest.dump_bytes if result else None,
        "node": cell.node,
        "attempts": cell.attempts,
        "shipped_bytes": cell.shipped_bytes,
    }


def print_comparison(result) -> None:
    """The side-by-side table of a batch's cells."""
    from ..console import human_bytes, print_table, say

    rows = []
    on_nodes = any(cell.node for cell in result.cells)  # a batch spread over a cluster says where each cell ran
    for cell in result.cells:
        data = _cell_json(cell)
        rows.append(
            (
                cell.label, data["status"], data["run_id"] or "", f"{data['seconds']:.1f}s" if data["seconds"] is not None else "",
                data["modules"] if data["modules"] is not None else "", data["main_module"] or "",
                data["main_instr_before"] or "", data["main_instr_after"] or "", data["files"] if data["files"] is not None else "",
                human_bytes(data["dump_bytes"]) if data["dump_bytes"] is not None else "",
            ) + ((cell.node or "", human_bytes(cell.shipped_bytes) if cell.shipped_bytes is not None else "") if on_nodes else ())
        )
    columns = ("cell", "status", "run", "time", "modules", "main module", "instr before", "instr after", "files", "dump")
    print_table(columns + (("node", "shipped") if on_nodes else ()), rows,
                title=f"batch {result.batch_id}", right=("time", "modules", "instr before", "instr after", "files", "dump", "shipped"))
    prints = {c.result.modules[0].fingerprint for c in result.cells if c.result and c.result.modules}
    if len(prints) == 1 and len(result.cells) > 1 and all(c.result and c.result.modules for c in result.cells):
        say("[green]the main module's unoptimized HLO is identical in every cell[/green] (same fingerprint)")
    for cell in result.cells:
        for note in cell.attempts if cell.ok else ():
            say(f"[yellow]{cell.label}[/yellow]: retried after {note}")
        if cell.error:
            say(f"[red]{cell.label}[/red]: {cell.error}")


class _ProgressView:
    """One live table on stderr: a line per cell with its state and elapsed time."""

    def __init__(self, total: int):
        from rich.console import Console
        from rich.live import Live

        self.cells: dict[int, object] = {}
        self.total = total
        self.lock = threading.Lock()
        self.live = Live(self._render(), console=Console(stderr=True), refresh_per_second=4, transient=True)

    def _render(self):
        from rich.table import Table

        table = Table(box=None, show_header=False, pad_edge=False)
        done = sum(1 for c in self.cells.values() if c.state in ("done", "error", "skipped"))
        table.add_row(f"[bold]{done}/{self.total} cells finished[/bold]", "")
        for cell in sorted(self.cells.values(), key=lambda c: c.index):
            elapsed = (cell.elapsed_s if cell.elapsed_s is not None else (time.monotonic() - cell.started if cell.started else 0.0))
            where = f" on {cell.node}" if cell.node and cell.state == "running" else ""
            table.add_row(f"  {cell.label}", f"{cell.status}{where} {elapsed:.0f}s")
        return table

    def start(self) -> None:
        self.live.start()

    def update(self, cell) -> None:
        with self.lock:
            self.cells[cell.index] = cell
            self.live.update(self._render())

    def stop(self) -> None:
        self.live.stop()
