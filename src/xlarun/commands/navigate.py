"""``runs``, ``modules``, ``show``, ``cat``, ``find``, ``explain``, ``logs``, ``export``: finding your way in the store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from xlarun.commands import (
    JsonOption,
    PassOption,
    RemoteReadOption,
    RunOption,
    StepOption,
    StoreOption,
    complete_module_ref,
    complete_run_ref,
    complete_stage,
    front_door,
    open_store,
)
from xlarun.errors import ExitCode, XlarunError

RefArgument = Annotated[
    str,
    typer.Argument(
        autocompletion=complete_module_ref,
        help="Module REF: module_0006, 6, jit_f (a name or unique prefix), RUN/module_0006, or a dump file name.",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    for command in (runs, modules, files, show, cat, find, explain, logs, export):
        app.command(command.__name__)(command)


#: How many runs ``xlarun runs`` shows in its table unless told (--last).
DEFAULT_LAST_RUNS = 50


def runs(
    store: StoreOption = None,
    batch: Annotated[
        str | None,
        typer.Option("--batch", help="Only the runs of this batch (id or unique prefix; 'latest' for the newest batch)."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Only the runs of this spec name.")] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Also the runs xlarun made for its own purposes (a bisection's reruns).")
    ] = False,
    last: Annotated[
        int | None,
        typer.Option(
            "--last", "-n", min=0, help="Only the newest N runs (0: every run). Default: 50 in the table, every run with --json."
        ),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option("--remote", help="List the runs on this remote (a name or s3:// URL) instead, from their index objects."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List the runs in the store, oldest first (the newest 50 in the table: a store of 10,000 runs answers at once).

    Runs xlarun made for its own purposes (`xlarun bisect SPEC --check` reruns the spec with passes disabled) are
    left out unless --all, and marked when shown; no plain name or 'latest' resolves to them.
    """
    from xlarun.console import print_json, say
    from xlarun.present import print_runs

    if remote is not None:
        from xlarun.commands.remote import remote_runs

        return remote_runs(remote, as_json)
    wanted = (None if as_json else DEFAULT_LAST_RUNS) if last is None else (last or None)
    listed = front_door(store).runs(batch=batch, name=name, last=wanted)
    everything = [run.info for run in listed]
    items = everything if show_all or batch else [r for r in everything if not r.made_by_xlarun]
    if as_json:
        print_json(items)
        return
    print_runs(items)
    hidden = len(everything) - len(items)
    if hidden:
        say(f"[dim]{hidden} run(s) xlarun made for a bisection not shown (--all shows them)[/dim]")
    if listed.total > len(everything):
        say(f"[dim]{listed.total - len(everything)} older run(s) not shown (--last 0 lists every run)[/dim]")


def files(
    run: Annotated[
        str | None, typer.Argument(autocompletion=complete_run_ref, help="Run REF (default: latest).", show_default=False)
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help="Only these kinds (hlo, pass, tf-graph, jax-ir, snapshot, codegen, unknown, ...)."),
    ] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every file of a run with what its name means: modules' dumps, TF GraphDefs, JAX IR, reports.

    Files whose names xlarun cannot decode are archived and listed as kind 'unknown'. Paths of the dump
    folder that were not archived (symbolic links, FIFOs, sockets, unreadable files) are listed after
    them with why, as are files archived with a caveat (a name that is not UTF-8, still being written).
    """
    from xlarun.console import print_json
    from xlarun.errors import InputError
    from xlarun.hlo.names import KINDS
    from xlarun.navigate.refs import resolve_run
    from xlarun.present import print_files

    unknown = sorted(set(kind or ()) - set(KINDS))
    if unknown:  # 'bogus' would list 0 files and exit 0: a typo must not read as "the run has none"
        raise InputError(f"no file kind {', '.join(map(repr, unknown))}", f"the kinds are {', '.join(KINDS)}")
    the_store = open_store(store)
    index = the_store.index
    info = resolve_run(index, run)
    items = [f for f in index.run_files(info.run_id) if not kind or f.kind in kind]
    notes = the_store.manifest(info.run_id).get("file_notes") or []
    if as_json:
        print_json(
            {
                "run_id": info.run_id,
                "files": items,
                "not_archived": [n for n in notes if not n["archived"]],
                "caveats": [n for n in notes if n["archived"]],
            }
        )
        return
    print_files(items, notes)


def modules(
    run: Annotated[
        str | None,
        typer.Argument(
            autocompletion=complete_run_ref, help="Run id, unique prefix, spec name or 'latest' (default).", show_default=False
        ),
    ] = None,
    store: StoreOption = None,
    remote: RemoteReadOption = None,
    by: Annotated[
        str,  # checked below: a Literal would make typer import pydantic, which costs more than the command
        typer.Option(
            "--by",
            metavar="<program|time>",
            help="program: the main program first (the default); time: most measured time first, with a time column "
            "(a run captured with `profile: true`).",
        ),
    ] = "program",
    as_json: JsonOption = False,
) -> None:
    """List a run's modules, the main program first (--by time: the most measured time first).

    Modules whose code lives in your files come first ("yours" in the code column), then those xlarun
    cannot place, then those of only the framework's own code ("framework": jax.random, jnp.linspace...
    called from your code; Keras's train step runs your model, so it is yours); within each, most compute
    ops (dot, convolution, collectives...; sharding annotations such as custom_call_target="Sharding" do
    not count), then most instructions. Where its code lives is read from the stack-frame tables JAX 0.8 and later print in
    the dumps (a module naming no source at all, such as a cast outside any jit, is the framework's);
    older JAX and TF runs leave the code column blank. After `xlarun reindex`, older runs get the rule
    of this version.

    A function compiled more than once (two modules of one name) is told apart under the table: other
    shapes, what it donates, how its parameters are sharded, or the same HLO compiled again.
    """
    from xlarun.console import print_json, say
    from xlarun.navigate.compiles import tell_compiles_apart
    from xlarun.navigate.desync import compare_processes
    from xlarun.present import print_process_report, print_run_modules, with_peaks

    if by not in ("program", "time"):
        from xlarun.errors import InputError

        raise InputError(f"--by {by!r}: no such order", "--by program (the default) or --by time")
    the_run = front_door(store, remote=remote).run(run)
    if by == "time":
        _modules_by_time(the_run, as_json)
        return
    listed = the_run.modules()
    items = [module.row for module in listed]
    by_id = {module.module_id: module for module in listed}
    recompiles = tell_compiles_apart(items, lambda summary: _before_text(by_id[summary.module_id]))
    processes = compare_processes(items)  # as Run.processes() says it, from the modules already read
    peaks = the_run.peaks(set(by_id))  # from the buffer assignments XLA dumped (`xlarun memory` tells more)
    if as_json:
        found = {"run_id": the_run.id, "modules": with_peaks(items, peaks), "recompiles": recompiles}
        print_json(found | ({"processes": processes.to_json()} if processes else {}))
        return
    print_run_modules(the_run.info, items, the_run.files_outside_modules(), peaks)
    if recompiles:
        say("compiled more than once (each against the function's first compile):")
        for r in recompiles:
            say(f"  {r.name} {r.line()}")
    print_process_report(processes)


def _modules_by_time(the_run: Any, as_json: bool) -> None:
    from xlarun.console import print_json
    from xlarun.present.times import print_run_times

    times = the_run.times()
    if as_json:
        print_json({"run_id": times.run_id, "by": "time", "job_wall_s": times.job_wall_s, "modules": times.modules})
        return
    print_run_times(times.found)


def _before_text(module: Any) -> str | None:
    from xlarun.errors import XlarunError

    try:
        return module.text("before_optimizations")
    except XlarunError:  # no text dump of it: told apart by its shapes and fingerprint alone
        return None


def show(
    ctx: typer.Context,
    ref: RefArgument,
    store: StoreOption = None,
    run: RunOption = None,
    remote: RemoteReadOption = None,
    files: Annotated[bool, typer.Option("--files", help="List every file.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Show one module: its stages and files, the pass timeline, instruction counts and opcodes."""
    from xlarun.commands.share import bundle_or_ref
    from xlarun.console import print_json, to_jsonable
    from xlarun.present import print_module
    from xlarun.present.times import time_line

    given = ref
    store, ref, run = bundle_or_ref(ctx, ref, store, run)  # a bundle .zip: shown from a temporary store
    bundle = given if ref != given else None  # named as the user gave it: the temporary store's run id names nothing
    module = front_door(store, remote=remote).module(ref, run=run)
    time = module.time  # measured, when the run was profiled
    if as_json:
        shown = {**to_jsonable(module.info), "run_id": None, "bundle": bundle} if bundle else to_jsonable(module.info)
        print_json({**shown, "time": time})
        return
    print_module(module.store.store, module.info, files, bundle=bundle, time=time_line(time))


def cat(
    ctx: typer.Context,
    ref: RefArgument,
    stage: Annotated[
        str | None,
        typer.Option(
            "--stage",
            "-s",
            help="before (before_optimizations, the default), after (after_optimizations, cpu_after_optimizations), a report (buffer-assignment, memory-usage-report, live-range...) or a file name as show --files lists it.",
            autocompletion=complete_stage,
        ),
    ] = None,
    pass_name: PassOption = None,
    step: StepOption = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="text, proto, dot, html, ... (default: text when there is one).")
    ] = None,
    store: StoreOption = None,
    run: RunOption = None,
    remote: RemoteReadOption = None,
) -> None:
    """Print a module's dump at a stage or after a pass (the exact archived bytes); REF may be a bundle .zip."""
    from xlarun.commands.share import bundle_or_ref

    given = ref
    store, ref, run = bundle_or_ref(ctx, ref, store, run)  # a bundle .zip: read from a temporary store
    module = front_door(store, remote=remote).module(ref, run=run)
    chosen = module.file(stage, pass_name=pass_name, step=step, format=fmt)
    typer.echo(f"# {given if ref != given else module.run_id}/{chosen.path}", err=True)
    data = module.read(chosen)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def find(
    text: Annotated[
        str,
        typer.Argument(
            help="What to look for: an opcode (dot), an instruction name (dot.3), an op_name (jit(f)/dot_general) or a source file."
        ),
    ],
    opcode: Annotated[bool, typer.Option("--opcode", help="Only opcodes (exact).")] = False,
    name: Annotated[bool, typer.Option("--name", help="Only instruction names (substring).")] = False,
    op_name: Annotated[bool, typer.Option("--op-name", help="Only metadata op_name (substring).")] = False,
    source: Annotated[bool, typer.Option("--source", help="Only metadata source file:line (substring).")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Whole values only.")] = False,
    run: RunOption = None,
    store: StoreOption = None,
    remote: RemoteReadOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the modules that contain an opcode, instruction name, op_name or source location.

    The seeds' trick, indexed: put a distinctive op in your model (or name a scope) and find the
    modules holding it across every run in the store. Exit code 1 when no module matches.
    """
    from xlarun.console import print_json
    from xlarun.present import print_found

    hits = (
        front_door(store, remote=remote)
        .find(text, opcode=opcode, name=name, op_name=op_name, source=source, exact=exact, run=run)
        .hits
    )
    if as_json:
        print_json(hits)
        return
    if not hits:
        typer.echo(f"no module contains {text!r}", err=True)
        raise typer.Exit(int(ExitCode.FAILED))
    print_found(hits)


def explain(
    names: Annotated[list[str], typer.Argument(help="Dump file names (or paths) to decode.", show_default=False)],
    as_json: JsonOption = False,
) -> None:
    """Explain what dump file names mean: module id and name, stage, pass, pipeline, format.

    Example: xlarun explain module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot
    """
    from xlarun.console import print_json, print_pairs
    from xlarun.hlo.names import decode_dump_name

    decoded = [decode_dump_name(Path(n).name if "/dump/" in n else n) for n in names]
    holds = [_binary_dump_holds(Path(n)) for n in names]
    if as_json:
        found = [{**d.to_dict(), "holds": h} for d, h in zip(decoded, holds, strict=True)]
        print_json(found if len(found) > 1 else found[0])
        return
    for item, kind in zip(decoded, holds, strict=True):
        print_pairs(item.describe() + ([("holds", _proto_kind_words(kind))] if kind else []), title=item.path)


def _proto_kind_words(kind: str) -> str:
    from xlarun.hlo.proto import PROTO_KINDS  # only for a binary dump that exists: a name alone loads no reader

    return PROTO_KINDS[kind]


def _binary_dump_holds(path: Path) -> str | None:
    """For an existing binary dump file: what it holds by the rule replay reads it by (its content, not its name)."""
    try:
        if not path.is_file() or path.stat().st_size > 1 << 30:
            return None
        from xlarun.hlo import gunzip
        from xlarun.hlo.proto import proto_holds

        return proto_holds(gunzip(path.read_bytes(), str(path)))
    except (OSError, XlarunError):
        return None


def logs(
    run: Annotated[
        str | None, typer.Argument(autocompletion=complete_run_ref, help="Run REF (default: latest).", show_default=False)
    ] = None,
    stream: Annotated[str, typer.Option("--stream", help="stdout, stderr or both.")] = "both",
    process: Annotated[
        int | None,
        typer.Option(
            "--process", "-p", min=0, help="Only this process's output (a run of many processes: `processes:` in its spec)."
        ),
    ] = None,
    store: StoreOption = None,
) -> None:
    """Print a run's captured stdout and stderr (in a run of many processes, every line prefixed with its process)."""
    the_run = front_door(store).run(run)
    for name in ("stdout", "stderr"):
        if stream in (name, "both"):
            text = the_run.logs(name, process)
            if stream == "both":
                typer.echo(f"==> {name} <==")
            typer.echo(text, nl=not text.endswith("\n"))


def export(
    run: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_run_ref, help="Run REF (a module REF with --format model-explorer).", show_default=False
        ),
    ],
    dest: Annotated[
        Path, typer.Argument(help="A new or empty folder (a .json file with --format model-explorer).", show_default=False)
    ],
    no_logs: Annotated[
        bool, typer.Option("--no-logs", help="Only the dump files, without _xlarun/ (manifest, spec, logs).")
    ] = False,
    fmt: Annotated[
        str,
        typer.Option("--format", help="files (the run's files), or model-explorer (a module's JSON graph for Model Explorer)."),
    ] = "files",
    stage: Annotated[
        str,
        typer.Option(
            "--stage",
            help="With model-explorer: before (before_optimizations) or after (after_optimizations, cpu_after_optimizations).",
            autocompletion=complete_stage,
        ),
    ] = "before_optimizations",
    store: StoreOption = None,
) -> None:
    """Write a run's files back with their original names and exact bytes (dump files at the top,
    tf_graphs/, jax_ir/ ... beside them, and the manifest, spec and logs in _xlarun/).

    With --format model-explorer: `xlarun export jit_f f.json --format model-explorer` writes the module's
    graph as a Model Explorer JSON graph (what `xlarun view` serves); open it with `model-explorer f.json`."""
    from xlarun.navigate.refs import resolve_run

    if fmt == "model-explorer":
        from xlarun.commands.view import export_model_explorer

        export_model_explorer(run, dest, stage, store)
        return
    if fmt != "files":
        from xlarun.errors import InputError

        raise InputError(f"unknown --format {fmt!r}", "use files or model-explorer")
    the_store = open_store(store)
    info = resolve_run(the_store.index, run)
    count = the_store.export(info.run_id, dest, with_logs=not no_logs)
    typer.echo(f"exported {count} files of run {info.run_id} to {dest}")
