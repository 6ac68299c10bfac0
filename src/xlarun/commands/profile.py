"""``profile``: a profiled module's ops by measured time (``modules --by time`` ranks the modules)."""

from __future__ import annotations

from typing import Annotated

import typer

from xlarun.commands import JsonOption, RunOption, StoreOption, front_door
from xlarun.commands.navigate import RefArgument


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)


def profile(
    ref: RefArgument,
    store: StoreOption = None,
    run: RunOption = None,
    top: Annotated[int, typer.Option("--top", "-n", min=0, help="Only the N ops that took most time (0: all).")] = 25,
    as_json: JsonOption = False,
) -> None:
    """List a module's ops by measured time: count, total, mean, share, what each fusion holds, its source lines,
    and achieved GFLOP/s and GB/s from the work its shapes say.

    The run must have been captured with `profile: true` in its spec (a JAX job), or by
    xlarun.jax.capture(..., profile=True). Times are each op's own: an op inside a while loop's body is counted
    in its own row, not in the loop's. `xlarun modules RUN --by time` ranks the run's modules.
    """
    from xlarun.console import print_json
    from xlarun.present.times import print_module_profile

    found = front_door(store).module(ref, run=run).profile(top).found
    if as_json:
        print_json(found)
        return
    print_module_profile(found, top)
