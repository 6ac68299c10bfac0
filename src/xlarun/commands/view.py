"""``view``: open a module in Model Explorer (the ``view`` extra), or with ``--xprof`` a run's profile in XProf (the
``profile`` extra), served on loopback only."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from xlarun.commands import JsonOption, RunOption, StoreOption, complete_module_ref, complete_stage, open_store


def register(app: typer.Typer) -> None:
    app.command("view")(view)


def view(
    ctx: typer.Context,
    ref: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="Module REF (jit_train_step, module_0006, RUN/module_0006) or a bundle .zip; with --xprof, a RUN "
            "(id, unique prefix, spec name, latest).",
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
    xprof: Annotated[
        bool,
        typer.Option("--xprof", help="Open the run's profile (a capture with `profile:`) in XProf instead (the profile extra)."),
    ] = False,
    store: StoreOption = None,
    run: RunOption = None,
    as_json: JsonOption = False,
) -> None:
    """Open a module's graph in Google's Model Explorer, a local web app built for huge graphs (where
    graphviz gives up). Nodes are grouped by op_name, fusions and called computations open as subgraphs,
    and each node shows its shape, op_name, source line and fusion.

    Serves on 127.0.0.1 only, until Ctrl-C. Needs the view extra (pip install 'xlarun[view]'); exit 3 without
    it. `xlarun export REF FILE.json --format model-explorer` writes the graph file for a Model Explorer of your own.

    With --xprof, REF names a run captured with `profile:` (exit 2 for one without): its archived trace is laid
    out in xlarun's cache folder as XProf reads it and XProf's trace viewer, HLO op stats and memory tools serve it
    (pip install 'xlarun[profile]'; exit 3 without it).
    """
    from xlarun.commands.share import bundle_or_ref
    from xlarun.interrupts import StopRequest, exit_code_for, stop_on_signals

    store, ref, run = bundle_or_ref(ctx, ref, store, run)
    stop = StopRequest()
    # Ctrl-C, SIGTERM and SIGHUP are routed to `stop` from here on, also while the server starts: the server's
    # process group and the temp folder go away in every case
    with stop_on_signals(stop):
        if xprof:
            _serve_xprof(open_store(store), ref, run, port, stop, no_browser, as_json)
        else:
            _serve_model_explorer(open_store(store), ref, run, stage, port, stop, no_browser, as_json)
    if stop.signal_name not in (None, "SIGINT"):
        raise typer.Exit(exit_code_for(stop.signal_name))  # SIGTERM 143, SIGHUP 129; Ctrl-C is the way to stop: 0


def _serve_model_explorer(
    the_store: Any, ref: str, run: str | None, stage: str, port: int | None, stop: Any, no_browser: bool, as_json: bool
) -> None:
    import tempfile
    from pathlib import Path

    from xlarun.errors import EnvironmentProblem
    from xlarun.navigate.refs import resolve_module
    from xlarun.navigate.select import stage_of
    from xlarun.see.view import INSTALL_HINT, ModelExplorerServer, model_explorer_installed, write_model_explorer_json

    stage = stage_of(stage)
    if not model_explorer_installed():
        raise EnvironmentProblem("Model Explorer is not installed", INSTALL_HINT)
    module = resolve_module(the_store.index, ref, run=run)
    with tempfile.TemporaryDirectory(prefix="xlarun-view-") as folder:
        graph = write_model_explorer_json(
            the_store, module, Path(folder) / f"{module.name or module.module_id}.{stage}.json", stage
        )
        if not stop.cancel.is_set():
            with ModelExplorerServer.start(graph, port) as server:
                said = {"viewer": "model-explorer", "module": module.label, "run_id": module.run_id, "stage": stage}
                headline = f"Model Explorer shows [bold]{module.label}[/bold] ({stage}) at"
                _serve_until_stopped(server, stop, no_browser, as_json, headline, {**said, "loopback_only": True})


def _serve_xprof(the_store: Any, ref: str, run: str | None, port: int | None, stop: Any, no_browser: bool, as_json: bool) -> None:
    from xlarun.errors import EnvironmentProblem
    from xlarun.navigate.refs import resolve_run
    from xlarun.see.view import XPROF_ALL_INTERFACES, XPROF_INSTALL_HINT, XprofServer, xprof_installed, xprof_logdir

    if not xprof_installed():
        raise EnvironmentProblem("XProf is not installed", XPROF_INSTALL_HINT)
    laid_out = xprof_logdir(the_store, resolve_run(the_store.index, run or ref).run_id)
    if stop.cancel.is_set():
        return
    with XprofServer.start(laid_out, port) as server:
        said = {
            "viewer": "xprof",
            "run_id": laid_out.run_id,
            "sessions": laid_out.sessions,
            "hosts": laid_out.hosts,
            "logdir": str(laid_out.logdir),
            "loopback_only": server.loopback_only,
            "warning": None if server.loopback_only else XPROF_ALL_INTERFACES,
        }
        headline = f"XProf shows the profile of run [bold]{laid_out.run_id}[/bold] ({', '.join(laid_out.hosts)}) at"
        _serve_until_stopped(server, stop, no_browser, as_json, headline, said)


def _serve_until_stopped(server: Any, stop: Any, no_browser: bool, as_json: bool, headline: str, said: dict) -> None:
    """Say where the server is (a line, or one JSON document), open a browser unless asked not to, and wait for a
    stop signal or the server's end."""
    import webbrowser

    from xlarun.console import print_json, say

    if as_json:
        print_json({**said, "url": server.url, "port": server.port})
    else:
        say(headline)
        typer.echo(server.url, nl=True)
    if said["loopback_only"]:
        typer.echo("(serving on 127.0.0.1 only; Ctrl-C stops it)", err=True)
    else:
        typer.echo(f"warning: {said['warning']} (Ctrl-C stops it)", err=True)
    if not no_browser and not stop.cancel.is_set():
        webbrowser.open_new_tab(server.url)
    while not stop.cancel.wait(0.2) and server.process.poll() is None:
        pass
    if stop.cancel.is_set():
        typer.echo("stopped", err=True)


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
