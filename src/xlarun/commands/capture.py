"""``capture``, ``validate``, ``schema``, ``flags``: from a spec to a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from xlarun.commands import JsonOption, StoreOption, open_store
from xlarun.errors import mark_json_reported

if TYPE_CHECKING:
    from xlarun.capture.spec_yaml import LoadedSpec
    from xlarun.store.facade import LocalStore

SpecArgument = Annotated[
    Path,
    typer.Argument(help="A run spec (YAML). See configs/ for examples and `xlarun schema` for every key.", show_default=False),
]


def register(app: typer.Typer) -> None:
    app.command("capture")(capture)
    app.command("validate")(validate)
    app.command("schema")(schema)
    app.command("flags")(flags)


def capture(
    spec: SpecArgument,
    store: StoreOption = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Don't echo the job's output (it is still kept in the run's logs).")
    ] = False,
    as_json: JsonOption = False,
    top: Annotated[
        int,
        typer.Option(
            "--top", help="List this many modules after the capture, as `xlarun modules` does (0: name the main one only)."
        ),
    ] = 0,
) -> None:
    """Run SPEC's script with its dump flags, then archive and index everything it wrote.

    The job's output streams to this terminal and into the run's logs. A job that fails, times out
    or is interrupted (Ctrl-C) is archived all the same, and xlarun exits non-zero. Afterwards the
    run's main module is named (your code before the framework's, then most
    compute ops, as `xlarun modules` ranks them): the main one in a line, or a table of
    --top N. A spec with a `matrix`
    runs every cell, as `xlarun batch` does.

    Example: xlarun capture configs/jax-cpu.yaml
    """
    from xlarun.capture.spec_yaml import load_batch

    cells = load_batch(spec)
    the_store = open_store(store, create=True)
    try:  # closed here, not when the interpreter ends: the CLI's exit skips freeing objects one by one
        if cells[0].matrix_values is not None:  # a matrix spec: capture every cell, one at a time
            from xlarun.commands.batch import run_and_report

            run_and_report(cells, the_store, jobs=1, fail_fast=None, as_json=as_json)
            return
        _capture_one(cells[0], the_store, quiet, as_json, top)
    finally:
        the_store.close()


def _capture_one(loaded: LoadedSpec, the_store: LocalStore, quiet: bool, as_json: bool, top: int) -> None:
    from xlarun.capture.answers import capture_failure
    from xlarun.capture.launch import capture as run_capture
    from xlarun.console import ProgressBar, human_bytes, print_json, say, warn

    progress = ProgressBar("archiving", enabled=not as_json)
    if not as_json:
        say(f"[bold]capturing[/bold] {loaded.spec.name}: {loaded.script} on {loaded.spec.backend.kind} -> {the_store.root}")
    try:
        result = run_capture(loaded, the_store, echo=not (quiet or as_json), on_archive=progress.update)
    finally:
        progress.close()
    failure = capture_failure(result)
    if as_json:
        from xlarun.capture.answers import capture_document

        print_json(capture_document(result))
        if failure is not None:
            mark_json_reported(failure)  # one document: the CLI's handler adds none
    else:
        for line in result.warnings:
            warn(line)
        manifest = result.manifest
        colour = "green" if failure is None else "red"
        say(
            f"[{colour}]{result.status.value}[/{colour}] run [bold]{result.run_id}[/bold] in {manifest.duration_s:.1f} s: "
            f"{manifest.files} files, {human_bytes(manifest.dump_bytes)} dumped, {len(result.modules)} modules"
        )
        if result.push is not None and result.push.pushed:
            say(f"pushed to remote [bold]{result.push.remote}[/bold] ({human_bytes(result.push.bytes)} sent)")
        if result.modules:
            from xlarun.navigate.desync import compare_processes
            from xlarun.present import print_main_module, print_modules, print_process_report

            if top:
                print_modules(result.modules[:top], more=max(0, len(result.modules) - top))
            else:
                print_main_module(result.modules)
            print_process_report(compare_processes(result.modules))
    if failure is not None:
        raise failure


def validate(spec: SpecArgument, as_json: JsonOption = False) -> None:
    """Check SPEC without running anything: every problem is listed as file:line:col key.path: message.

    A spec with a `matrix` is checked cell by cell (a problem names its cell), and the cells it expands to are counted.
    """
    from rich.markup import escape

    from xlarun.capture.matrix import cell_label
    from xlarun.capture.spec_yaml import load_batch
    from xlarun.console import error_line, print_json, say
    from xlarun.errors import ExitCode, SpecError

    try:
        cells = load_batch(spec)
    except SpecError as exc:
        if as_json:
            print_json({"valid": False, "problems": exc.problems})
        else:
            for problem in exc.problems:
                error_line(problem)
        raise typer.Exit(int(ExitCode.USAGE)) from None
    first, is_matrix = cells[0], cells[0].matrix_values is not None
    if as_json:
        matrix = [
            {"values": c.matrix_values, "name": c.spec.name, "script": c.script, "backend": c.spec.backend.kind} for c in cells
        ]
        print_json(
            {
                "valid": True,
                "cells": len(cells),
                "spec": first.spec,
                "script": first.script,
                "workdir": first.workdir,
                "matrix": matrix if is_matrix else None,
            }
        )
    elif not is_matrix:
        say(f"[green]ok[/green] {spec}: run '{first.spec.name}' runs {first.script} on {first.spec.backend.kind}")
    else:
        say(f"[green]ok[/green] {escape(str(spec))}: a matrix of {len(cells)} cell(s); `xlarun batch` runs them")
        for cell in cells[:_CELLS_SHOWN]:
            line = (
                f"{cell_label(cell.matrix_values or {})}: run '{cell.spec.name}' runs {cell.script} on {cell.spec.backend.kind}"
            )
            say("  " + escape(line))
        if len(cells) > _CELLS_SHOWN:
            say(f"  and {len(cells) - _CELLS_SHOWN} more cell(s) (`--json` lists them all)")


#: How many cells of a matrix `validate` lists (all of them with --json).
_CELLS_SHOWN = 20


def schema(
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of run specs, for editor completion.

    VS Code with the YAML extension: add `# yaml-language-server: $schema=./xlarun.schema.json` at the top of a spec.
    """
    from xlarun.capture.spec_yaml import spec_json_schema

    text = json.dumps(spec_json_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
    else:
        typer.echo(text, nl=False)


def flags(
    spec: SpecArgument,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Folder for the outputs: XLA's dump goes to OUT/dump, TF graphs to OUT/tf_graphs, JAX IR to OUT/jax_ir (a capture uses the run's own folder).",
        ),
    ] = Path("xla_out"),
    as_json: JsonOption = False,
) -> None:
    """Print the environment a capture of SPEC would set, as `export` lines, without running anything.

    Paste the lines into a shell to reproduce a capture by hand. Only variables that differ from
    your current environment are printed; XLA_FLAGS already set in your environment are merged.
    Flags xlarun would add that the job's XLA does not know (read from the framework the job's
    Python finds) are left out, with a warning, as a capture leaves them out.
    """
    from xlarun.capture.answers import spec_flags
    from xlarun.console import print_json, warn

    answer = spec_flags(spec, out_dir)
    if as_json:
        print_json(answer.to_json())
        return
    loaded, composed = answer.loaded, answer.composed
    for line in composed.warnings:
        warn(line)
    if loaded.spec.processes > 1:  # what each process adds is drawn at launch (the coordinator's free port)
        n = loaded.spec.processes
        warn(
            f"processes: {n}: a capture launches {n} processes, process K with XLARUN_PROCESS_ID=K, XLARUN_NUM_PROCESSES={n}, "
            "XLARUN_COORDINATOR=127.0.0.1:<free port>, JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo and --xla_dump_to=.../dump/process-K"
        )
    for line in composed.export_lines():
        typer.echo(line)
