"""``rm``, ``gc``, ``reindex``: keeping a store tidy."""

from __future__ import annotations

from typing import Annotated

import typer

from . import StoreOption, open_store


def register(app: typer.Typer) -> None:
    app.command("rm")(rm)
    app.command("gc")(gc)
    app.command("reindex")(reindex)


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
