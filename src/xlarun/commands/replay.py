"""``replay`` and ``convert``: run a dumped module again, and move it between text and proto."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from xlarun.commands import (
    DECLARED,
    JsonOption,
    RemoteReadOption,
    RunOption,
    StoreOption,
    complete_module_ref,
    json_on_failure,
    open_store,
    store_path_or_mirror,
    with_declared,
)
from xlarun.declared_options import REPLAY_OPTIONS

REPLAY_EXIT_CODES = (
    "Exit codes: 0 the outputs match (or ran, with nothing to compare against) · 1 mismatch · "
    "2 usage or input error (unknown REF, unreadable file, a module refused by a limit: --max-data-size, nesting, infeed) · "
    "3 engine failure (compile or run failed, XLA aborted or crashed, --timeout passed, jaxlib or runner missing)."
)


def register(app: typer.Typer) -> None:
    app.command("replay", epilog=REPLAY_EXIT_CODES)(replay)
    app.command("convert")(convert)


@with_declared(REPLAY_OPTIONS)
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
    engine: Any = DECLARED,
    platform: Any = DECLARED,
    reference_platform: Any = DECLARED,
    abs_error_bound: Any = DECLARED,
    rel_error_bound: Any = DECLARED,
    iterations: Any = DECLARED,
    seed: Any = DECLARED,
    inputs: Any = DECLARED,
    snapshot: Annotated[
        Path | None, typer.Option("--snapshot", help="Take arguments and expected result from this HloSnapshot (pjrt engine).")
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="Replay this file of the module instead of the most faithful one.")
    ] = None,
    print_literals: Any = DECLARED,
    runner: Any = DECLARED,
    image: Any = DECLARED,
    timeout: Any = DECLARED,
    max_data_size: Any = DECLARED,
    in_process: Any = DECLARED,
    save_outputs: Any = DECLARED,
    profile: Any = DECLARED,
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


def _replay(
    ctx: typer.Context, ref: str, options: Any, sink: Any, *, snapshot: Any, file: Any, store: Any, run: Any, as_json: bool
) -> int:
    from xlarun.commands.share import bundle_or_ref
    from xlarun.replay.resolve import replay_ref

    given = ref
    store, ref, run = bundle_or_ref(ctx, ref, store, run)  # a bundle .zip: replayed from a temporary store
    from_bundle = ref != given  # that store goes when the command ends: nothing of the replay is kept
    # a dump file's replay needs no store (it is just not recorded); a module REF's does
    the_store = _existing_store(store) if Path(ref).is_file() and run is None else open_store(store)
    result, replay_id, module = replay_ref(the_store, ref, options, sink, snapshot=snapshot, file=file, run=run)
    _report(result, None if from_bundle else replay_id, module, as_json, bundle=given if from_bundle else None)
    return int(result.exit_code)


def _report(result: Any, replay_id: str | None, module: Any, as_json: bool, bundle: str | None = None) -> None:
    from xlarun.console import print_json
    from xlarun.present import print_replay

    if as_json:
        named = bundle or (module.ref if module else None)  # a bundle's temporary run id names nothing afterwards
        print_json({"replay_id": replay_id, "module": named, "hint": None, **result.to_dict()})
    else:
        print_replay(result, replay_id, module)
        if result.profile:
            from xlarun.present.times import print_replay_profile

            print_replay_profile(result.profile, result.run_times_s)


def _failure_document(ref: str, exc: BaseException) -> dict:
    """The one JSON document of a replay that failed before it had a result (exit code beside the error)."""
    from xlarun.errors import EngineError, EnvironmentProblem, error_document

    verdict = "engine-error" if isinstance(exc, (EngineError, EnvironmentProblem)) else None  # no engine, or it failed
    return {"replay_id": None, "module": None, "ref": ref, "verdict": verdict, **error_document(exc)}


def _existing_store(path: Path | None) -> Any:
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
