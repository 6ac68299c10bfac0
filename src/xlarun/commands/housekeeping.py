"""``rm``, ``gc``, ``reindex``, ``check``: keeping a store tidy and sound."""

from __future__ import annotations

from typing import Annotated

import typer

from . import JsonOption, StoreOption, open_store


def register(app: typer.Typer) -> None:
    app.command("rm")(rm)
    app.command("gc")(gc)
    app.command("reindex")(reindex)
    app.command("check")(check)


def rm(
    runs: Annotated[list[str], typer.Argument(help="Run REFs to delete.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Don't ask.")] = False,
    store: StoreOption = None,
) -> None:
    """Delete runs from the store (their dump blobs are freed by the next `xlarun gc`)."""
    from ..refs import resolve_run

    the_store = open_store(store)
    ids = [resolve_run(the_store.index, ref).run_id for ref in runs]
    if not yes and not typer.confirm(f"delete {len(ids)} run(s): {', '.join(ids)}?"):
        raise typer.Exit(1)
    for run_id in ids:
        the_store.delete_run(run_id)
        typer.echo(f"deleted {run_id}")


def gc(store: StoreOption = None) -> None:
    """Remove leftovers of killed captures and dump blobs no run refers to."""
    from ..console import human_bytes

    folders, blobs, freed = open_store(store).gc()
    typer.echo(f"removed {folders} abandoned staging folder(s) and {blobs} unused blob(s), freed {human_bytes(freed)}")


def reindex(store: StoreOption = None) -> None:
    """Rebuild the index from the runs on disk (after an upgrade, or if the index was deleted)."""
    the_store = open_store(store)
    index = the_store.index
    ids = the_store.run_ids()
    for run_id in ids:
        index.ingest_run(the_store, run_id)
    typer.echo(f"reindexed {len(ids)} run(s)")


def check(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Read back every archived file and pack and verify its digest; list what is missing or damaged.

    Exit code 1 when something is damaged (re-capture the runs it names, or `xlarun rm` them).
    """
    from ..console import ProgressBar, print_json

    the_store = open_store(store)
    bar = ProgressBar("checking", enabled=not as_json)
    try:
        report = the_store.check(progress=bar.update)
    finally:
        bar.close()
    if as_json:
        print_json({"runs": report.runs, "files": report.files, "blobs": report.blobs, "packs": report.packs, "damaged": report.damaged})
    else:
        for item in report.damaged:
            where = f"{item['run']}/{item['path']}" if item["run"] else item["path"]
            typer.echo(f"DAMAGED {where}: {item['problem']}")
        verdict = f"{len(report.damaged)} damaged" if report.damaged else "all sound"
        typer.echo(f"checked {report.files} file(s) of {report.runs} run(s): {report.blobs} distinct, {report.packs} pack(s); {verdict}")
    if report.damaged:
        raise typer.Exit(1)
