"""``replay`` and ``convert``: run a dumped module again, and move it between text and proto."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from xlarun.commands import (
    JsonOption,
    RemoteReadOption,
    RunOption,
    StoreOption,
    complete_module_ref,
    json_on_failure,
    open_store,
    store_path_or_mirror,
)

REPLAY_EXIT_CODES = (
    "Exit codes: 0 the outputs match (or ran, with nothing to compare against) · 1 mismatch · "
    "2 usage or input error (unknown REF, unreadable file, a module refused by a limit: --max-data-size, nesting, infeed) · "
    "3 engine failure (compile or run failed, XLA aborted or crashed, --timeout passed, jaxlib or runner missing)."
)


def register(app: typer.Typer) -> None:
    app.command("replay", epilog=REPLAY_EXIT_CODES)(replay)
    app.command("convert")(convert)


def replay(
    ctx: typer.Context,
    ref: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="Module REF (module_0006, jit_f, RUN/module_0006) or a path to a dump file.",
            show_default=False,
        ),
    ],
    engine: Annotated[
        str, typer.Option("--engine", "-e", help="pjrt (built in), run_hlo_module, hlo_runner_main, or auto.")
    ] = "auto",
    platform: Annotated[str, typer.Option("--platform", "-p", help="cpu, cuda or rocm.")] = "cpu",
    reference_platform: Annotated[
        str | None, typer.Option("--reference-platform", help="Run again on this platform and compare.")
    ] = None,
    abs_error_bound: Annotated[
        float, typer.Option("--abs-error-bound", help="An element matches if its absolute error is within this...")
    ] = 1e-3,
    rel_error_bound: Annotated[
        float, typer.Option("--rel-error-bound", help="...or its relative error within this (XLA's rule).")
    ] = 1e-3,
    iterations: Annotated[int, typer.Option("--iterations", "-n", help="Executions after one compile, each timed.")] = 1,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the fake arguments (default 0).")] = None,
    inputs: Annotated[
        str, typer.Option("--inputs", help="auto (the snapshot's arguments when there are any), snapshot, or fake.")
    ] = "auto",
    snapshot: Annotated[
        Path | None, typer.Option("--snapshot", help="Take arguments and expected result from this HloSnapshot (pjrt engine).")
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="Replay this file of the module instead of the most faithful one.")
    ] = None,
    print_literals: Annotated[bool, typer.Option("--print-literals", help="Print the output values.")] = False,
    runner: Annotated[Path | None, typer.Option("--runner", help="Path of the run_hlo_module / hlo_runner_main binary.")] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image", help="Run the runner inside this container image (found there: NVIDIA's JAX images carry hlo_runner_main)."
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help="Seconds before the engine is stopped (default: none for runners, 900 for the built-in engine)."
        ),
    ] = None,
    max_data_size: Annotated[
        str,
        typer.Option(
            "--max-data-size", help="Refuse modules whose fake arguments and results need more (4G, 512M; 0: no limit)."
        ),
    ] = "4G",
    in_process: Annotated[
        bool,
        typer.Option("--in-process", help="Run the built-in engine in this process: no child, no limits; XLA can abort xlarun."),
    ] = False,
    save_outputs: Annotated[
        Path | None,
        typer.Option(
            "--save-outputs", help="Write the output values to this .npz (output_0, ...; bf16 as float32), built-in engine."
        ),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Run the iterations under JAX's profiler and list each op's time (built-in engine; with --jaxlib: "
            "the ops that moved between releases).",
        ),
    ] = False,
    jaxlib: Annotated[
        str | None,
        typer.Option(
            "--jaxlib",
            help="Replay on each of these jaxlib releases (0.4.30,0.8.3,current), each in its cached venv, side by side.",
        ),
    ] = None,
    time_tolerance: Annotated[
        float | None,
        typer.Option(
            "--time-tolerance",
            help="With --jaxlib: a release whose median run time is more than this fraction off the first's "
            "(0.3: 30% slower or faster) has moved too (exit 1). Give -n 10 or more so the medians mean something.",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Don't stream the engine's log.")] = False,
    store: StoreOption = None,
    run: RunOption = None,
    remote: RemoteReadOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a module: compile it again, run it, and compare with what was captured.

    The most faithful input is picked: a snapshot (real arguments, and its recorded result to
    compare with) > an .hlo.pb > text dumped with large constants > plain text (whose {...}
    constants are garbage: you are warned loudly). Without a snapshot the arguments are seeded
    fake data. Optimized modules are rewritten to recompile, else their unoptimized dump is
    replayed instead, and the result says so. The built-in engine runs in a child process with a
    time and memory limit: XLA aborting, crashing or hanging is an engine error (exit 3), and
    fake data over --max-data-size is refused before it is made. NaN/Inf in the outputs and
    random-number instructions are said beside the verdict. A module partitioned over N devices
    runs on N devices (its optimized dump, fake global arguments cut per device) and is compared
    with its before_optimizations module; fewer than N devices is refused naming N (exit 3).
    Every replay of a stored module is recorded and listed by `xlarun show REF`.

    With --jaxlib, the module is replayed on each release listed, in the venvs `scripts/compat.py venvs`
    builds (under $XLARUN_COMPAT_DIR, default ~/.cache/xlarun/compat; 'current' is this one), on the same
    inputs: verdicts, errors and timings side by side, each release's outputs against the first's, and the
    first release whose outputs moved past the bounds (exit 1 when one did); with --time-tolerance, the first
    whose median run time moved past it too.

    Examples: xlarun replay jit_train_step -n 10 · xlarun replay jit_f --reference-platform cpu ·
    xlarun replay dump/module_0001.jit_f.before_optimizations.txt --engine run_hlo_module
    """
    from xlarun.replay.options import keywords_for, replay_options

    given = locals()
    with json_on_failure(as_json, lambda exc: _failure_document(ref, exc)):
        store = store_path_or_mirror(store, remote)  # a remote run: its blobs fetched as the replay reads them
        options = replay_options(**keywords_for(replay_options, given))
        sink = None if (quiet or as_json) else _stream
        if jaxlib is not None:
            from xlarun.commands.replay_versions import replay_versions_command

            raise typer.Exit(
                replay_versions_command(
                    ref, jaxlib, options, sink, file=file, store=store, run=run, as_json=as_json, time_tolerance=time_tolerance
                )
            )
        if time_tolerance is not None:
            from xlarun.errors import InputError

            raise InputError("--time-tolerance compares releases' run times", "give it with --jaxlib A,B,...")
        code = _replay(ctx, ref, options, sink, snapshot=snapshot, file=file, store=store, run=run, as_json=as_json)
    raise typer.Exit(code)


def _replay(ctx: typer.Context, ref: str, options, sink, *, snapshot, file, store, run, as_json: bool) -> int:
    from xlarun.commands.share import bundle_or_ref
    from xlarun.replay import replay_file
    from xlarun.replay.resolve import replay_and_record_file, replay_stored_module

    given = ref
    store, ref, run = bundle_or_ref(ctx, ref, store, run)  # a bundle .zip: replayed from a temporary store
    from_bundle = ref != given  # that store goes when the command ends: nothing of the replay is kept
    path = Path(ref)
    if path.is_file() and run is None:
        the_store = _existing_store(store)
        if the_store is None:
            result, replay_id = replay_file(path, options, sink, snapshot=snapshot), None
        else:
            record = replay_and_record_file(the_store, path, options, sink, snapshot=snapshot)
            result, replay_id = record.result, record.replay_id
        _report(result, replay_id, None, as_json)
    else:
        if snapshot is not None:
            from xlarun.errors import InputError

            raise InputError("--snapshot goes with a dump file path, not a module REF", "give the edited file's path")
        from xlarun.navigate.refs import resolve_module

        the_store = open_store(store)
        module = resolve_module(the_store.index, ref, run=run)
        record = replay_stored_module(the_store, module, options, sink, file=file)
        _report(record.result, None if from_bundle else record.replay_id, module, as_json, bundle=given if from_bundle else None)
        result = record.result
    return int(result.exit_code)


def _report(result, replay_id: str | None, module, as_json: bool, bundle: str | None = None) -> None:
    from xlarun.console import print_json
    from xlarun.present import print_replay

    if as_json:
        named = bundle or (module.ref if module else None)  # a bundle's temporary run id names nothing afterwards
        print_json({"replay_id": replay_id, "module": named, "hint": None, **result.to_dict()})
    else:
        print_replay(result, replay_id, module)
        if result.profile:
            from xlarun.present_profile import print_replay_profile

            print_replay_profile(result.profile, result.run_times_s)


def _failure_document(ref: str, exc: BaseException) -> dict:
    """The one JSON document of a replay that failed before it had a result (exit code beside the error)."""
    from xlarun.errors import EngineError, EnvironmentProblem, error_document

    verdict = "engine-error" if isinstance(exc, (EngineError, EnvironmentProblem)) else None  # no engine, or it failed
    return {"replay_id": None, "module": None, "ref": ref, "verdict": verdict, **error_document(exc)}


def _existing_store(path: Path | None):
    from xlarun.errors import StoreError

    try:
        return open_store(path)
    except StoreError:
        return None  # replaying a loose file needs no store; it is just not recorded


def _stream(line: str) -> None:
    sys.stderr.write(f"  | {line}\n")
    sys.stderr.flush()


def convert(
    file: Annotated[Path, typer.Argument(help="A dump file: HLO text, .hlo.pb, HloModuleProto or snapshot.", show_default=False)],
    to: Annotated[str, typer.Option("--to", help="text or proto (a serialized HloModuleProto).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout; proto only when piped).")
    ] = None,
) -> None:
    """Convert an HLO module between text and HloModuleProto (what `hlo-opt --emit-proto` does).

    Text is printed with large constants in full. Exit codes: 0 ok, 2 bad input, 3 jaxlib missing.
    """
    from xlarun.console import warn
    from xlarun.errors import InputError
    from xlarun.replay.convert import convert_hlo

    if not file.is_file():
        raise InputError(f"no such file: {file}")
    converted = convert_hlo(file, to)
    for line in converted.warnings:
        warn(line)
    if output is not None:
        output.write_bytes(converted.data)
        return
    if to == "proto" and sys.stdout.isatty():
        raise InputError("a binary proto would go to the terminal", "give -o OUT, or pipe the output")
    sys.stdout.buffer.write(converted.data)
    sys.stdout.flush()
