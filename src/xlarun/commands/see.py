"""``render``, ``diff``, ``report``: looking at dumps instead of reading them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from xlarun.commands import (
    DECLARED,
    JsonOption,
    PassOption,
    RemoteReadOption,
    RunOption,
    StageOption,
    StepOption,
    StoreOption,
    complete_module_ref,
    complete_run_ref,
    front_door,
    open_store,
    with_declared,
)
from xlarun.declared_options import RENDER_OPTIONS

ModuleRefArgument = Annotated[
    str,
    typer.Argument(
        autocompletion=complete_module_ref,
        help="Module REF (module_0006, jit_f, RUN/module_0006), a run REF with --file, or a file on disk.",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    app.command("render")(render)
    app.command("diff")(diff)
    app.command("report")(report)


@with_declared(RENDER_OPTIONS)
def render(
    ref: ModuleRefArgument,
    stage: StageOption = None,
    pass_name: PassOption = None,
    step: StepOption = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            help="An archived file of the run, e.g. tf_graphs/mark_for_compilation_annotated_1.pbtxt (a unique suffix will do).",
        ),
    ] = None,
    xla_dot: Annotated[
        bool, typer.Option("--xla-dot", help="Lay out XLA's own .dot dump as it is, instead of xlarun's drawing of the HLO.")
    ] = False,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="svg, png, pdf or dot (default: from -o's extension, else svg).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Where to write (default: the dump's name with the format's extension, here); '-' for stdout."
        ),
    ] = None,
    around: Any = DECLARED,
    depth: Any = DECLARED,
    limit: Any = DECLARED,
    full: Any = DECLARED,
    expand: Any = DECLARED,
    expand_fusions: Any = DECLARED,
    timeout_s: Any = DECLARED,
    error_from: Annotated[
        str | None,
        typer.Option(
            "--error-from",
            help="Colour the nodes by each value's error as this recorded bisection measured it (its id, a prefix, or "
            "'latest'); draws its culprit step unless --stage/--pass/--step say otherwise.",
        ),
    ] = None,
    by_time: Annotated[
        bool,
        typer.Option(
            "--time",
            help="Colour the nodes by each op's measured time (a run captured with `profile: true`): a heat map, the "
            "5 ops that took most marked; draws the optimized module unless --stage/--pass/--step say otherwise.",
        ),
    ] = False,
    open_it: Annotated[bool, typer.Option("--open", help="Open the result with the desktop's viewer.")] = False,
    store: StoreOption = None,
    run: RunOption = None,
) -> None:
    """Draw a module's HLO (or a dumped .dot, or a TF GraphDef .pbtxt) with graphviz.

    Computations are clusters, fusions one node each (--expand opens them), edges carry shapes,
    colours tell opcode categories, hovering shows op_name and source line (SVG). A module over
    500 nodes is drawn as its overview (the entry computation, loops and calls one node each,
    plumbing folded into edges, condensed to at most 600 nodes if need be), in seconds;
    --around NAME --depth N draws a part in full, --full every node (slow), and `xlarun view`
    opens huge graphs in Model Explorer.

    Examples: xlarun render train_step -s after_optimizations -o step.svg;
    xlarun render init_params --around add.577 --depth 2;
    xlarun render tf1-autojit --file mark_for_compilation_annotated_1.pbtxt -f png;
    xlarun render residual --error-from latest;
    xlarun render train_step --time  (a profiled run: a heat map of measured time)
    """
    from xlarun.declared_options import given_to
    from xlarun.render import FORMATS, render_options, render_path, render_stored_file

    drawing = given_to(RENDER_OPTIONS, locals())
    fmt = fmt or (output.suffix.lstrip(".") if output and output.suffix.lstrip(".") in FORMATS else "svg")
    if (Path(ref).is_file() and not file) or file:  # a file on disk, or an archived file of a run: drawn as it is
        options = render_options(fmt, **drawing)
        if file:
            the_store = open_store(store)
            run_id, chosen = _stored_file(the_store, ref, run, file)
            rendered = render_stored_file(the_store, run_id, chosen, options)
        else:
            rendered = render_path(ref, options)
        _write_rendered(rendered, Path(rendered.source).name, output, around, open_it)
        return
    drawn = (
        front_door(store)
        .module(ref, run=run)
        .render(
            stage=stage,
            pass_name=pass_name,
            step=step,
            format=fmt,
            error_from=error_from,
            time=by_time,
            xla_dot=xla_dot,
            **drawing,
        )
    )
    _write_rendered(drawn, Path(drawn.source).name, output, around, open_it)


def _stored_file(store: Any, ref: str, run: str | None, path: str) -> Any:
    """(run id, FileInfo) of ``--file PATH`` in the run REF names (a module REF names its run)."""
    from xlarun.errors import RefError
    from xlarun.navigate.refs import resolve_module, resolve_run
    from xlarun.navigate.select import select_run_file

    try:
        run_id = resolve_module(store.index, ref, run=run).run_id
    except RefError:
        run_id = resolve_run(store.index, run or ref).run_id
    return run_id, select_run_file(store.index.run_files(run_id), path, run_id)


def _write_rendered(rendered: Any, stem: str, output: Path | None, around: str | None, open_it: bool) -> None:
    from xlarun.console import say
    from xlarun.errors import check_room

    if output is not None and str(output) == "-":
        sys.stdout.buffer.write(rendered.data)
        sys.stdout.flush()
        return
    if output is None:
        base = stem.rsplit(".", 1)[0] if stem.endswith((".txt", ".pb", ".pbtxt", ".dot", ".hlo")) else stem
        suffix = f".around-{around}" if around else ""
        output = Path("".join(c if c.isalnum() or c in "._-" else "_" for c in f"{base}{suffix}.{rendered.format}"))
    output.parent.mkdir(parents=True, exist_ok=True)
    check_room(output.parent, len(rendered.data), f"writing {output.name}")
    partial = output.with_name(f".{output.name}.{os.getpid()}.tmp")  # a full disk never leaves half a drawing
    try:
        partial.write_bytes(rendered.data)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    what = {"hlo": "HLO drawn by xlarun", "xla-dot": "XLA's own .dot", "graphdef": "TF GraphDef"}.get(
        rendered.kind, rendered.kind
    )
    say(f"wrote [bold]{output}[/bold]: {rendered.nodes} nodes, {what} from {rendered.source}")
    for note in rendered.notes:
        typer.echo(f"  {note}")
    if open_it:
        typer.launch(str(output.resolve()))


def diff(
    ref: Annotated[
        str, typer.Argument(autocompletion=complete_module_ref, help="Module REF (a run REF with --time).", show_default=False)
    ],
    other: Annotated[
        str | None,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="A second module REF (or a run REF: the module of the same name there), to compare across runs; "
            "with --time, the second run.",
            show_default=False,
        ),
    ] = None,
    pass_name: PassOption = None,
    from_step: Annotated[
        int | None, typer.Option("--from", help="Compare from this per-pass step (default: the step before --to).")
    ] = None,
    to_step: Annotated[int | None, typer.Option("--to", help="Compare up to this per-pass step.")] = None,
    stage: StageOption = None,
    summary_only: Annotated[bool, typer.Option("--summary", help="Only the structural summary, not the text diff.")] = False,
    context: Annotated[int, typer.Option("--context", "-U", help="Lines of context in the text diff.")] = 3,
    keep_metadata: Annotated[
        bool, typer.Option("--keep-metadata", help="Across runs: keep op_name/source metadata in the text diff.")
    ] = False,
    by_time: Annotated[
        bool,
        typer.Option(
            "--time", help="Compare two profiled runs (REF and REF_B are runs) by measured time: which modules and ops moved."
        ),
    ] = False,
    min_change: Annotated[
        float,
        typer.Option(
            "--min-change",
            min=0.0,
            help="With --time: how far apart (0.1: 10%) the middle halves of two runs' executions must lie to count.",
        ),
    ] = 0.1,
    top: Annotated[int, typer.Option("--top", "-n", min=0, help="With --time: how many moved ops to list (0: all).")] = 10,
    store: StoreOption = None,
    run: RunOption = None,
    as_json: JsonOption = False,
) -> None:
    """What one pass did to a module (--pass NAME, or --from/--to STEP), or how a module differs between two runs (REF REF_B).

    Prints a structural summary (instructions added, removed, changed and fused by opcode, the
    fusions formed, the opcode count changes) and a unified diff of the HLO text.

    With --time, REF and REF_B are two runs captured with `profile: true` (two cells of a batch too): each module's
    median time per execution in both, paired by fingerprint then name (not module number), the ratio, and whether
    it got slower or faster beyond the spread of its repeated executions; then the ops that moved most.

    Examples: xlarun diff train_step --pass fusion; xlarun diff train_step --from 7 --to 9;
    xlarun diff RUN_A/jit_train_step RUN_B/jit_train_step; xlarun diff RUN_A RUN_B --time
    """
    from xlarun.console import print_json
    from xlarun.errors import InputError
    from xlarun.present.module_diff import print_module_diff

    if by_time:
        from xlarun.present.times import print_time_diff

        if other is None or pass_name or to_step is not None or from_step is not None or stage or run:
            raise InputError("--time compares two runs: give two run REFs, without --pass, --from, --to, --stage or --run")
        timed = front_door(store).run(ref).diff_time(other, min_change=min_change, top=top)
        if as_json:
            print_json(timed.to_dict())
        else:
            print_time_diff(timed.found)
        return
    module = front_door(store).module(ref, run=run)
    if other is not None and (pass_name or to_step is not None or from_step is not None):
        raise InputError("--pass, --from and --to compare steps of one module; give one REF with them")
    if other is None and not pass_name and to_step is None:
        raise InputError(
            "say what to compare: --pass NAME, --from STEP --to STEP, or a second REF",
            f"`xlarun show {ref}` lists the pass timeline",
        )
    result = module.diff(
        other,
        pass_name=pass_name,
        from_step=from_step,
        to_step=to_step,
        stage=stage or "before_optimizations",
        keep_metadata=keep_metadata,
        context=context,
    ).diff
    if as_json:
        print_json(result.to_dict() if not summary_only else {**result.to_dict(), "unified": None})
        return
    print_module_diff(result, summary_only)


def report(
    run: Annotated[
        str | None, typer.Argument(autocompletion=complete_run_ref, help="Run REF (default: latest).", show_default=False)
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Folder to write the site into (default ./xlarun-report-RUN).")
    ] = None,
    batch: Annotated[
        str | None, typer.Option("--batch", help="Report a whole batch: its id, a unique prefix, or 'latest'.")
    ] = None,
    graph_limit: Annotated[
        int, typer.Option("--graph-limit", help="Graphs with more nodes are shown as the neighbourhood of the root.")
    ] = 500,
    no_graphs: Annotated[bool, typer.Option("--no-graphs", help="Skip the graphs (faster).")] = False,
    open_it: Annotated[bool, typer.Option("--open", help="Open the report in a browser.")] = False,
    store: StoreOption = None,
    remote: RemoteReadOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
) -> None:
    """Build a static HTML report of a run (or a batch): works from file://, no server, no network.

    Run summary and manifest, the module table (main program first; sortable, filterable), and per
    module its stages, pass timeline, pass diffs, graphs and files. index.json beside index.html
    holds the same for scripts.

    Example: xlarun report --open
    """
    from xlarun.console import say
    from xlarun.navigate.refs import resolve_batch, resolve_run
    from xlarun.report import ReportOptions, build_batch_report, build_run_report

    the_store = open_store(store, remote=remote)
    options = ReportOptions(graph_limit=graph_limit, graphs=not no_graphs, command=["xlarun", *sys.argv[1:]])
    progress = None if quiet else (lambda text: typer.echo(text, err=True))
    if batch:
        batch = resolve_batch(the_store.index, batch)
        built = build_batch_report(the_store, batch, output or Path(f"xlarun-report-{batch}"), options, progress)
    else:
        info = resolve_run(the_store.index, run)
        built = build_run_report(the_store, info.run_id, output or Path(f"xlarun-report-{info.run_id}"), options, progress)
    say(
        f"wrote [bold]{built.index_html}[/bold] ({built.pages} pages, {built.graphs} graphs, {built.files} files) in {built.seconds:.1f} s"
    )
    if open_it:
        typer.launch(built.index_html.resolve().as_uri())
