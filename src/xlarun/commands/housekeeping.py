"""``rm``, ``gc``, ``recover``, ``reindex``, ``check``: keeping a store tidy and sound."""

from __future__ import annotations

from typing import Annotated

import typer

from xlarun.commands import JsonOption, StoreOption, complete_run_ref, open_store
from xlarun.errors import ExitCode, InputError


def register(app: typer.Typer) -> None:
    app.command("rm")(rm)
    app.command("gc")(gc)
    app.command("recover")(recover)
    app.command("reindex")(reindex)
    app.command("check")(check)


def rm(
    runs: Annotated[list[str], typer.Argument(autocompletion=complete_run_ref, help="Run REFs to delete.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Don't ask.")] = False,
    store: StoreOption = None,
) -> None:
    """Delete runs from the store (their dump blobs are freed by the next `xlarun gc`). Exit code 1 when you decline."""
    from xlarun.navigate.refs import resolve_run

    the_store = open_store(store)
    on_disk = set(the_store.run_ids())  # a run's exact id removes it, damaged or left out of the index too
    ids = [ref if ref in on_disk else resolve_run(the_store.index, ref).run_id for ref in runs]
    if not yes and not typer.confirm(f"delete {len(ids)} run(s): {', '.join(ids)}?"):
        raise typer.Exit(int(ExitCode.FAILED))
    for run_id in ids:
        the_store.delete_run(run_id)
        typer.echo(f"deleted {run_id}")


def gc(
    store: StoreOption = None,
    discard_recoverable: Annotated[
        bool,
        typer.Option(
            "--discard-recoverable", help="Also delete what killed captures left that `xlarun recover` could make runs."
        ),
    ] = False,
    remote: Annotated[
        str | None,
        typer.Option("--remote", help="Collect on this remote (a name or s3:// URL) instead: a dry run unless --apply."),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="With --remote: delete runs started longer ago than this (90m, 12h, 30d, 2w)."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label", help="With --remote: delete only runs whose spec tags have this KEY or KEY=VALUE (repeatable: all)."
        ),
    ] = None,
    keep: Annotated[
        int | None, typer.Option("--keep", help="With --remote: never delete the newest N runs of each spec name.", min=0)
    ] = None,
    apply: Annotated[bool, typer.Option("--apply", help="With --remote: delete (without it, only say what would go).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Remove leftovers of killed captures that hold nothing, and dump blobs no run refers to.

    With --remote: delete the remote's runs that --older-than, --label and --keep select, then every object no
    remaining run names (a dry run unless --apply); it refuses (exit 3) while a run cannot be read or names a
    missing object, and while a push is under way.

    A killed capture's staging folder that holds what its job wrote is kept (and the blobs it lists):
    `xlarun recover` makes it a run marked incomplete; `--discard-recoverable` deletes it instead.

    What each pack holds is read from the pack's own header: gc deletes nothing (exit 3, saying what to do) while
    a run's file list or a pack cannot be read, or while the pack table disagrees with the packs.

    Small packs (a store of many tiny runs has one of a few hundred bytes per run, each taking a block of disk) are
    merged into packs of about 1 MB once there are 16 or more; every file is read back and checked on the way.
    """
    from xlarun.console import human_bytes, print_json, warn

    if remote is not None:
        from xlarun.commands.remote import remote_gc

        return remote_gc(remote, older_than, tuple(label or ()), keep, apply, as_json)
    if older_than is not None or label or keep is not None or apply:
        raise InputError("--older-than, --label, --keep and --apply choose what gc --remote deletes", "add --remote NAME")
    the_store = open_store(store)
    kept = [lo for lo in the_store.leftovers() if lo.recoverable]
    if kept and not discard_recoverable:
        warn(
            f"{len(kept)} killed capture(s) left what their jobs wrote in {the_store.staging_dir}: "
            f"{', '.join(f'{lo.run_id} ({lo.what})' for lo in kept)}; kept: `xlarun recover` makes them runs marked incomplete, "
            "`xlarun gc --discard-recoverable` deletes them"
        )
    done = the_store.gc(discard_recoverable=discard_recoverable)
    if as_json:
        print_json(
            {
                "folders": done.folders,
                "packs": done.packs,
                "bytes": done.freed,
                "merged": done.merged,
                "merged_into": done.merged_into,
            }
        )
        return None
    from xlarun.store.pack_collect import SMALL_PACK_BYTES

    small = f"under {SMALL_PACK_BYTES >> 10} KiB"
    merged = f", merged {done.merged} pack(s) {small} into {done.merged_into} pack(s)" if done.merged else ""
    typer.echo(
        f"removed {done.folders} abandoned staging folder(s) and {done.packs - done.merged} unused pack(s){merged}, "
        f"freed {human_bytes(done.freed)}"
    )


def recover(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids of staging folders to recover (default: every one).", show_default=False)
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make what killed captures left in staging/ into runs marked incomplete.

    A capture killed at any point (kill -9, out of memory, a reboot) leaves its staging folder: the spec,
    the logs so far, the dump files not yet archived, the list of those that were. Each folder holding
    something of the job's becomes a visible run with status `incomplete`; files that cannot be archived
    are listed with why (`xlarun files RUN`). Folders holding nothing are left to `xlarun gc`.
    """
    from xlarun.capture.recover import recover_runs
    from xlarun.console import print_json, say, warn

    the_store = open_store(store)
    done = recover_runs(the_store, runs or None)
    if as_json:
        print_json({"recovered": [r for r in done if r.error is None], "left": [r for r in done if r.error is not None]})
    else:
        for item in done:
            if item.error:
                warn(f"{item.run_id}: not recovered: {item.error}")
            else:
                say(f"recovered run [bold]{item.run_id}[/bold] ({item.status}): {item.files} file(s) from {item.what}")
        if not done:
            say("nothing to recover")
    if runs and {r.run_id for r in done if r.error is None} != set(runs):
        from xlarun.errors import InputError

        missing = sorted(set(runs) - {r.run_id for r in done if r.error is None})
        raise InputError(
            f"not recovered: {', '.join(missing)}",
            "`xlarun gc` lists what killed captures left; a folder whose capture still runs is not a leftover",
        )


def reindex(store: StoreOption = None) -> None:
    """Rebuild the index from the runs on disk (after an upgrade, or if the index was deleted)."""
    the_store = open_store(store)
    done = the_store.rebuild_index()
    if done.moved is not None:
        typer.echo(f"the index could not be used: moved it aside to {done.moved}")
    typer.echo(f"reindexed {done.indexed} run(s)")
    if done.left_out:
        from xlarun.errors import StoreError

        for run_id, why in done.left_out.items():
            typer.echo(f"left out run {run_id}: {why}")
        first = next(iter(done.left_out))
        raise StoreError(
            f"{len(done.left_out)} run(s) left out of the index (run {first}: {done.left_out[first]})",
            f"every other command works; restore a damaged file from a backup or `xlarun rm {first}` removes the run; "
            "a run another user owns is indexed by a user who can read it",
            exit_code=ExitCode.FAILED,
        )


def check(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """Read back every archived file and pack and verify its digest; list what is missing or damaged.

    Exit code 1 when something is damaged (re-capture the runs it names, or `xlarun rm` them).
    """
    from xlarun.console import ProgressBar, print_json

    the_store = open_store(store)
    bar = ProgressBar("checking", enabled=not as_json)
    try:
        report = the_store.check(progress=bar.update)
    finally:
        bar.close()
    if as_json:
        print_json(
            {"runs": report.runs, "files": report.files, "blobs": report.blobs, "packs": report.packs, "damaged": report.damaged}
        )
    else:
        for item in report.damaged:
            where = f"{item['run']}/{item['path']}" if item["run"] else item["path"]
            typer.echo(f"DAMAGED {where}: {item['problem']}")
        verdict = f"{len(report.damaged)} damaged" if report.damaged else "all sound"
        typer.echo(
            f"checked {report.files} file(s) of {report.runs} run(s): {report.blobs} distinct, {report.packs} pack(s); {verdict}"
        )
    if report.damaged:
        raise typer.Exit(int(ExitCode.FAILED))
