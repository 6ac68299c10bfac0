"""``remote add`` / ``remote list``, ``push`` and ``pull``: a team store on S3-compatible object storage."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import typer

from xlarun.commands import JsonOption, StoreOption, complete_run_ref, open_store

remote_app = typer.Typer(help="Name the team stores (S3 buckets) that push, pull and runs --remote use.", no_args_is_help=True)
RemoteOption = Annotated[
    str,
    typer.Option("--remote", help="A remote's name (`xlarun remote list`), or an s3://BUCKET/PREFIX URL.", show_default=False),
]


def register(app: typer.Typer) -> None:
    app.add_typer(remote_app, name="remote")
    app.command("push")(push)
    app.command("pull")(pull)


@remote_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="The remote's name, e.g. team.", show_default=False)],
    url: Annotated[str, typer.Argument(help="s3://BUCKET or s3://BUCKET/PREFIX.", show_default=False)],
    endpoint: Annotated[
        str | None,
        typer.Option("--endpoint", help="The S3 server's URL (default: AWS, or $AWS_ENDPOINT_URL), e.g. http://host:8333."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Name a remote in your user config ($XDG_CONFIG_HOME/xlarun/remotes.json). No credentials are written: they
    come from the AWS environment variables, config files and profiles."""
    from xlarun.console import print_json, say
    from xlarun.store.remote import add_remote, config_path

    spec = add_remote(name, url, endpoint)
    if as_json:
        print_json({"name": spec.name, "url": spec.url, "endpoint": spec.endpoint, "config": str(config_path())})
        return
    say(f"remote [bold]{spec.name}[/bold] is {spec.url}" + (f" at {spec.endpoint}" if spec.endpoint else ""))


@remote_app.command("list")
def list_(as_json: JsonOption = False) -> None:
    """List the named remotes."""
    from xlarun.console import print_json, print_table
    from xlarun.store.remote import load_remotes

    remotes = load_remotes()
    if as_json:
        print_json([{"name": r.name, "url": r.url, "endpoint": r.endpoint} for r in remotes.values()])
        return
    print_table(["name", "url", "endpoint"], [[r.name, r.url, r.endpoint or ""] for r in remotes.values()])


def _progress(verb: str) -> Any:
    """A progress line on stderr (bytes, files, rate), redrawn at most 5 times a second, only on a terminal."""
    from xlarun.console import human_bytes

    last = [0.0]
    tty = sys.stderr.isatty()

    def show(transfer: Any) -> None:
        now = time.monotonic()
        if tty and now - last[0] > 0.2:
            last[0] = now
            line = f"{verb} {human_bytes(transfer.bytes)} in {transfer.files} file(s), {human_bytes(int(transfer.rate))}/s"
            sys.stderr.write(f"\r{line}\x1b[K")
            sys.stderr.flush()

    return show, tty


def _summary(verb: str, transfer: Any, remote: str) -> None:
    from xlarun.console import human_bytes, say

    moved = ", ".join(transfer.runs) or "no run"
    say(
        f"{verb} {moved} ({human_bytes(transfer.bytes)} in {transfer.files} file(s), {human_bytes(int(transfer.rate))}/s;"
        f" {human_bytes(transfer.skipped_bytes)} already there) [dim]{remote}[/dim]"
    )
    if transfer.already:
        say(f"[dim]already there, left as they are: {', '.join(transfer.already)}[/dim]")


def _sync(store: str | None, remote: str, create: bool) -> Any:
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_sync import RemoteSync

    spec = find_remote(remote)
    show, tty = _progress("sent" if not create else "fetched")
    return RemoteSync(open_store(store, create=create), ObjectStore(spec), progress=show), tty


def push(
    runs: Annotated[
        list[str] | None,
        typer.Argument(
            help="Runs to push (ids, prefixes, names, 'latest'; default: every run).", autocompletion=complete_run_ref
        ),
    ] = None,
    remote: RemoteOption = ...,  # type: ignore[assignment]
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send runs to a remote: only the packs it lacks, each run published last and once (a run already there is
    left as it is; an interrupted push leaves nothing visible, and running it again resumes)."""
    from xlarun.navigate.refs import resolve_run

    sync, tty = _sync(store, remote, create=False)
    index = sync.store.index
    ids = [resolve_run(index, ref).run_id for ref in runs] if runs else [r.run_id for r in index.runs()]
    _said("pushed", sync, sync.push(ids), tty, as_json)


def pull(
    runs: Annotated[
        list[str], typer.Argument(help="Run ids to fetch (`xlarun runs --remote NAME` lists them).", show_default=False)
    ],
    remote: RemoteOption = ...,  # type: ignore[assignment]
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Fetch runs from a remote into the store, every object checked against its hash (a damaged one: exit 3,
    nothing of the run kept)."""

    sync, tty = _sync(store, remote, create=True)
    _said("pulled", sync, sync.pull(runs), tty, as_json)


def _said(verb: str, sync: Any, transfer: Any, tty: bool, as_json: bool) -> None:
    """What a push or a pull did: the progress line cleared, then its JSON or its summary line."""
    from xlarun.console import print_json

    if tty:
        sys.stderr.write("\r\x1b[K")
    if as_json:
        print_json({"remote": sync.remote.spec.url, **transfer.as_dict()})
        return
    _summary(verb, transfer, sync.remote.spec.url)


def remote_runs(remote: str, as_json: bool) -> None:
    """``xlarun runs --remote NAME``: the runs on a remote, from their index objects."""
    from xlarun.console import human_bytes, print_json, print_table, short_time
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_index import mirror_root
    from xlarun.store.remote_sync import list_remote_runs

    spec = find_remote(remote)
    mirror = mirror_root(spec)  # the runs' summaries are kept beside the remote's mirror, never in it
    listed = list_remote_runs(ObjectStore(spec), cache=mirror.with_name(f"{mirror.name}.runs.json"))
    if as_json:
        print_json(listed)
        return
    rows = [
        [
            r["run"],
            str(r["name"] or ""),
            str(r["status"] or ""),
            short_time(r["started"]),
            str(r["files"]),
            human_bytes(r["bytes"]),
        ]
        for r in listed
    ]
    print_table(["run", "name", "status", "started", "files", "size"], rows, right=["files", "size"])


def remote_gc(remote: str, older_than: str | None, labels: tuple[str, ...], keep: int | None, apply: bool, as_json: bool) -> None:
    """``xlarun gc --remote NAME``: the policy's runs and the objects no run names, deleted or (dry run) listed."""
    from xlarun.console import human_bytes, print_json, say
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_gc import RetentionPolicy, collect_remote_garbage, parse_age

    policy = RetentionPolicy(parse_age(older_than) if older_than else None, labels, keep)
    result = collect_remote_garbage(ObjectStore(find_remote(remote)), policy, apply=apply)
    if as_json:
        print_json(result.as_dict())
        return
    verb = "deleted" if apply else "would delete"
    say(
        f"{verb} {len(result.runs)} run(s) and {result.objects} object(s) no remaining run names"
        f" ({human_bytes(result.bytes)}); {result.kept_runs} run(s) kept [dim]{result.remote}[/dim]"
    )
    if result.runs:
        say(f"[dim]runs: {', '.join(result.runs)}[/dim]")
    if result.young_kept:
        say(
            f"[dim]{result.young_kept} object(s) no run names kept: younger than the grace period (a push may be under way)[/dim]"
        )
    if not apply:
        say("[dim]a dry run: add --apply to delete[/dim]")
