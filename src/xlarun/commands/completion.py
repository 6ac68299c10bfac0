"""``completion``: the shell script that completes xlarun's commands, options and values in bash, zsh or fish."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

#: The variable a shell sets when it asks ``xlarun`` for completions (click's ``_<PROG>_COMPLETE``).
COMPLETE_VAR = "_XLARUN_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def register(app: typer.Typer) -> None:
    app.command("completion")(completion)


def completion(shell: Annotated[Literal["bash", "zsh", "fish"], typer.Argument(help="bash, zsh or fish.")]) -> None:
    """Print the script that makes SHELL complete xlarun's commands, options and values.

    Values come from the store's index: run ids and spec names (--run, run REFs), module names (module REFs, also
    RUN/NAME), stages (--stage) and the pass names of the newest runs (--pass). Install it once per shell:

    \b
    bash:  mkdir -p ~/.local/share/bash-completion/completions
           xlarun completion bash > ~/.local/share/bash-completion/completions/xlarun
    zsh:   mkdir -p ~/.zfunc && xlarun completion zsh > ~/.zfunc/_xlarun
           (and in ~/.zshrc, before compinit: fpath=(~/.zfunc $fpath))
    fish:  xlarun completion fish > ~/.config/fish/completions/xlarun.fish

    \b
    bash without the bash-completion package (which loads that folder), or this shell only:
           eval "$(xlarun completion bash)"      (in ~/.bashrc, or typed once)

    The script asks xlarun itself at each Tab, so it follows the installed version's commands.
    """
    from typer.completion import completion_init, get_completion_script

    completion_init()
    typer.echo(get_completion_script(prog_name="xlarun", complete_var=COMPLETE_VAR, shell=shell))


def prepare_completion_request(environ: dict[str, str]) -> None:
    """When a shell asks for completions (``_XLARUN_COMPLETE`` set), register typer's completion classes, which
    the CLI leaves out otherwise (start-up stays cheap), and read click's spelling of the request
    (``bash_source``) as well as typer's (``source_bash``)."""
    request = environ.get(COMPLETE_VAR)
    if request is None:
        return
    from typer.completion import completion_init

    completion_init()
    first, _, second = request.partition("_")
    if first in SHELLS and second in ("source", "complete"):
        environ[COMPLETE_VAR] = f"{second}_{first}"
