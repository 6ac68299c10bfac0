"""``memory``: what fills a module's memory, from XLA's buffer assignment (``modules`` has a peak column)."""

from __future__ import annotations

from typing import Annotated

import typer

from xlarun.commands import JsonOption, RunOption, StoreOption, front_door
from xlarun.commands.navigate import RefArgument


def register(app: typer.Typer) -> None:
    app.command("memory")(memory)


def memory(
    ref: RefArgument,
    store: StoreOption = None,
    run: RunOption = None,
    top: Annotated[int, typer.Option("--top", "-n", min=0, help="Only the N biggest buffers (0: all).")] = 15,
    as_json: JsonOption = False,
) -> None:
    """Show a module's peak memory and what makes it up (parameters, outputs, temporaries, aliased by donation),
    and the biggest buffers live at the peak with their instruction, shape, size and source line.

    Read from the buffer assignment XLA dumps next to the optimized module (*-buffer-assignment.txt, and
    *-live-range.txt for what is live at the peak). The peak is what one call holds: parameters + outputs +
    temporaries - aliased, the sum of jax's Compiled.memory_analysis().
    """
    from xlarun.console import print_json
    from xlarun.present.memory_table import print_module_memory

    found = front_door(store).module(ref, run=run).memory(top or None).found
    if as_json:
        print_json(found)
        return
    print_module_memory(found)
