"""``doctor``: what this machine can do, with a fix for each missing part."""

from __future__ import annotations

from typing import Annotated

import typer

from xlarun.commands import JsonOption


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


def doctor(
    no_docker: Annotated[
        bool, typer.Option("--no-docker", help="Skip the Docker checks (they wait up to 5 s for a daemon).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Check what this machine can do: frameworks, the replay engines, graphviz, Docker, GPUs and IPUs.

    Exits 0 when local captures work, 3 when something essential is missing. Optional parts
    (Docker, a GPU, XLA's own runners) are reported with how to get them.
    """
    from xlarun.console import escape_markup, print_json, say
    from xlarun.doctor import run_checks
    from xlarun.errors import ExitCode

    checks = run_checks(docker=not no_docker)
    if as_json:
        print_json(checks)
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            mark = "[green]ok[/green]  " if check.ok else ("[red]MISSING[/red]" if check.essential else "[yellow]no[/yellow]  ")
            say(
                f"{mark} {check.name.ljust(width)}  {escape_markup(check.detail)}"
                + (f"\n         [dim]fix: {escape_markup(check.fix)}[/dim]" if check.fix and not check.ok else "")
            )
    if any(c.essential and not c.ok for c in checks):
        raise typer.Exit(int(ExitCode.ENVIRONMENT))
