"""``view``: open a module in Model Explorer (the optional ``view`` extra), served on loopback only."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from xlarun.commands import RunOption, StoreOption, complete_module_ref, complete_stage, open_store


def register(app: typer.Typer) -> None:
    app.command("view")(view)


def view(
    ctx: typer.Context,
    ref: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="Module REF (jit_train_step, module_0006, RUN/module_0006) or a bundle .zip.",
            show_default=False,
        ),
    ],
    stage: Annotated[
        str,
        typer.Option(
            "--stage",
            "-s",
            help="before (before_optimizations: the framework's graph) or after (after_optimizations, cpu_after_optimizations: fusions).",
            autocompletion=complete_stage,
        ),
    ] = "before_optimizations",
    port: Annotated[int | None, typer.Option("--port", help="Port on 127.0.0.1 (default: a free one).")] = None,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Print the URL, don't open a browser.")] = False,
    store: StoreOption = None,
    run: RunOption = None,
) -> None:
    """Open a module's graph in Google's Model Explorer, a local web app built for huge graphs (where
    graphviz gives up). Nodes are grouped by op_name, fusions and called computations open as subgraphs,
    and each node shows its shape, op_name, source line and fusion.

    Serves on 127.0.0.1 only, until Ctrl-C. Needs the view extra (pip install 'xlarun[view]'); exit 3 without
    it. `xlarun export REF FILE.json --format model-explorer` writes the graph file for a Model Explorer of your own.
    """
    import tempfile
    import webbrowser
    from pathlib import Path

    from xlarun.commands.share import bundle_or_ref
    from xlarun.console import say
    from xlarun.errors import EnvironmentProblem
    from xlarun.interrupts import StopRequest, exit_code_for, stop_on_signals
    from xlarun.navigate.refs import resolve_module
    from xlarun.navigate.select import stage_of
    from xlarun.see.view import INSTALL_HINT, ModelExplorerServer, model_explorer_installed, write_model_explorer_json

    stage = stage_of(stage)
    if not model_explorer_installed():
        raise EnvironmentProblem("Model Explorer is not installed", INSTALL_HINT)
    store, ref, run = bundle_or_ref(ctx, ref, store, run)
    the_store = open_store(store)
    module = resolve_module(the_store.index, ref, run=run)
    stop = StopRequest()
    # Ctrl-C, SIGTERM and SIGHUP are routed to `stop` from here on, also while the server starts: the server's
    # process group and the temp folder go away in every case
    with stop_on_signals(stop), tempfile.TemporaryDirectory(prefix="xlarun-view-") as folder:
        graph = write_model_explorer_json(
            the_store, module, Path(folder) / f"{module.name or module.module_id}.{stage}.json", stage
        )
        if not stop.cancel.is_set():
            with ModelExplorerServer.start(graph, port) as server:
                say(f"Model Explorer shows [bold]{module.label}[/bold] ({stage}) at")
                typer.echo(server.url, nl=True)
                typer.echo("(serving on 127.0.0.1 only; Ctrl-C stops it)", err=True)
                if not no_browser and not stop.cancel.is_set():
                    webbrowser.open_new_tab(server.url)
                while not stop.cancel.wait(0.2) and server.process.poll() is None:
                    pass
                if stop.cancel.is_set():
                    typer.echo("stopped", err=True)
    if stop.signal_name not in (None, "SIGINT"):
        raise typer.Exit(exit_code_for(stop.signal_name))  # SIGTERM 143, SIGHUP 129; Ctrl-C is the way to stop: 0


def export_model_explorer(ref: str, dest: Any, stage: str, store: str | None) -> None:
    """`xlarun export REF FILE.json --format model-explorer`."""
    from xlarun.navigate.refs import resolve_module
    from xlarun.navigate.select import stage_of
    from xlarun.see.view import write_model_explorer_json

    stage = stage_of(stage)
    the_store = open_store(store)
    module = resolve_module(the_store.index, ref)
    path = write_model_explorer_json(the_store, module, dest, stage)
    typer.echo(f"wrote {module.label} ({stage}) as a Model Explorer graph to {path}; open it with: model-explorer {path}")
