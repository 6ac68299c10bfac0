"""``bisect``: which pass changed the numbers."""

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
from xlarun.declared_options import BISECT_OPTIONS

BISECT_EXIT_CODES = (
    "Exit codes: 0 nothing diverges · 1 a pass changed the numbers (it is named) · 2 usage or input error "
    "(no pass dumps, elided constants, a flaky check) · 3 inconclusive, or the engine failed."
)


def register(app: typer.Typer) -> None:
    app.command("bisect", epilog=BISECT_EXIT_CODES)(bisect)
    app.command("extract")(extract)


@with_declared(BISECT_OPTIONS)
def bisect(
    target: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="Module REF (replay mode), or a spec file with --check (rerun mode).",
            show_default=False,
        ),
    ],
    check: Annotated[
        str | None,
        typer.Option(
            "--check",
            help="Rerun mode: 'exit' (the exit code), or a regex whose first group is the number to compare, e.g. 'loss (\\S+)'.",
        ),
    ] = None,
    tolerance: Any = DECLARED,
    linear: Any = DECLARED,
    reference: Any = DECLARED,
    reference_platform: Any = DECLARED,
    platform: Any = DECLARED,
    recompile: Any = DECLARED,
    inputs: Any = DECLARED,
    seed: Any = DECLARED,
    ops: Any = DECLARED,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Rerun mode: reruns at a time.")] = 1,
    module: Annotated[
        str | None,
        typer.Option(
            "--module", "-m", help="Rerun mode: take candidate passes from this module's timeline only (default: every module's)."
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Rerun mode: baseline runs (at least 2, to catch a flaky check).")] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Don't stream progress.")] = False,
    store: StoreOption = None,
    run: RunOption = None,
    remote: RemoteReadOption = None,
    as_json: JsonOption = False,
) -> None:
    """Find the XLA pass that changed a program's numbers.

    Replay mode (a REF): the module must be captured pass by pass (dump.pass_re: '.*', text
    dumps, large constants; a snapshot gives the real arguments). Each pass step's dump is
    replayed on the same arguments, recompiled with the timeline's passes disabled so it runs as
    that step left it, and compared with the reference; a binary search finds the first step
    past the tolerance, and its pass's diff is shown. Then the culprit step and the step before it
    run with every value of their entry computation made an output: the first instruction whose
    value moves is named with its source line and the operands the pass created (--no-ops skips it).

    Rerun mode (a spec and --check): the job is run twice as it is, then again with passes
    disabled (--xla_disable_hlo_passes), narrowing down to the one pass whose disabling flips
    the check. Every rerun is an ordinary run in the store.

    Examples: xlarun bisect bf16_sum · xlarun bisect bf16_sum --linear --json ·
    xlarun bisect configs/bisect-bf16.yaml --check 'result (\\S+)' -j 2
    """
    from xlarun.bisect.bisect_options import bisect_options
    from xlarun.replay.options import keywords_for

    given = locals()
    sink = None if (quiet or as_json) else _stream
    with json_on_failure(as_json, lambda exc: _failure_document(target, exc)):
        store = store_path_or_mirror(store, remote)  # a remote run: its blobs fetched as the bisection reads them
        if target.endswith((".yaml", ".yml")) and Path(target).is_file():
            result, record = _rerun_mode(target, check, tolerance, jobs, module, repeat, sink, store)
        else:
            options = bisect_options(**keywords_for(bisect_options, given))
            result, record = _replay_mode(target, check, options, sink, store, run)
        if as_json:
            from xlarun.console import print_json

            print_json({"bisect_id": record.bisect_id, "error": None, "hint": None, **result.to_dict()})
        else:
            from xlarun.present.bisection import print_bisection

            print_bisection(result, record.bisect_id)
    raise typer.Exit(int(result.exit_code))


def _rerun_mode(spec: str, check: Any, tolerance: Any, jobs: Any, module: Any, repeat: Any, sink: Any, store: Any) -> Any:
    from xlarun.bisect import bisect_rerun
    from xlarun.bisect.history import now, record_bisection
    from xlarun.errors import InputError

    if check is None:
        raise InputError(
            f"{spec} is a spec: rerun mode needs --check",
            "--check exit, or --check 'result (\\S+)' to compare a printed number",
        )
    started = now()
    the_store = open_store(store, create=True)
    result = bisect_rerun(
        spec,
        the_store,
        check,
        abs_tolerance=tolerance,
        rel_tolerance=tolerance,
        jobs=jobs,
        module=module,
        repeat=repeat,
        sink=sink,
    )
    options = {"check": check, "tolerance": tolerance, "jobs": jobs, "module": module, "repeat": repeat}
    return result, record_bisection(the_store, result, options, started)


def _replay_mode(target: str, check: Any, options: Any, sink: Any, store: Any, run: Any) -> Any:
    from xlarun.bisect.replay_mode import bisect_and_record
    from xlarun.errors import InputError
    from xlarun.navigate.refs import resolve_module

    if check is not None:
        raise InputError(
            "--check goes with a spec file (rerun mode)",
            f"give the spec's path, or drop --check to bisect {target} by replay",
        )
    the_store = open_store(store)
    # a name alone: the newest run that has the module captured pass by pass (rerun mode adds runs without)
    module = resolve_module(the_store.index, target, run=run, prefer=lambda m: bool(m.n_pass_dumps))
    return bisect_and_record(the_store, module, options, sink)


def _stream(line: str) -> None:
    sys.stderr.write(f"  | {line}\n")
    sys.stderr.flush()


def _failure_document(target: str, exc: BaseException) -> dict:
    from xlarun.errors import error_document

    return {"bisect_id": None, "subject": target, "verdict": None, **error_document(exc)}


def extract(
    ref: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref, help="Module REF (module_0006, jit_f, RUN/module_0006).", show_default=False
        ),
    ],
    instruction: Annotated[str, typer.Argument(help="The instruction's name (mul.2, %fusion.3).", show_default=False)],
    hops: Annotated[
        int, typer.Option("--hops", "-k", min=0, help="Keep operands this many hops back (0: the instruction alone).")
    ] = 1,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write OUTPUT.hlo.txt, OUTPUT.snapshot.pb and OUTPUT.extract.json (default: ./extract_NAME)."
        ),
    ] = None,
    step: Annotated[
        int | None, typer.Option("--step", help="From this per-pass dump (show's pass timeline) instead of before_optimizations.")
    ] = None,
    inputs: Annotated[
        str, typer.Option("--inputs", help="auto (the snapshot's arguments when there is one), snapshot, or fake.")
    ] = "auto",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fake arguments.")] = 0,
    store: StoreOption = None,
    run: RunOption = None,
    as_json: JsonOption = False,
) -> None:
    """Shrink a repro: one instruction and its operands as a standalone module, with the run's values.

    The instruction and the operands within --hops of it (constants always) become a module of their own,
    with only the computations they call and a header written for the new parameters; every other value
    they read becomes a parameter. The module runs once on its snapshot's arguments (or seeded fake data),
    so the extract's parameters carry the values the run computed and its expected result is the
    instruction's: OUTPUT.snapshot.pb replays to a match with `xlarun replay`, and is a few kilobytes for a
    bug report; OUTPUT.extract.json says where it was cut from (its bundle's README reads it). A per-device
    step of a partitioned module is extracted with device 0's values. Bisect names the instruction to
    extract ("first to move").

    Examples: xlarun extract residual mul.2 · xlarun extract bf16_sum mul.2 --hops 2 -o repro --json
    """
    from xlarun.bisect.extract import extract_from_store
    from xlarun.navigate.refs import resolve_module

    def failure(exc: BaseException) -> dict:
        from xlarun.errors import error_document

        return {"instruction": instruction, "files": [], **error_document(exc)}

    with json_on_failure(as_json, failure):
        the_store = open_store(store)
        module = resolve_module(the_store.index, ref, run=run)
        sink = None if as_json else _stream
        extracted = extract_from_store(
            the_store, module, instruction, hops=hops, output=output, step=step, inputs=inputs, seed=seed, log=sink
        )
    if as_json:
        from xlarun.console import print_json

        print_json({"module": module.ref, **extracted.to_dict(), "error": None, "hint": None})
        return
    from xlarun.console import say

    say(
        f"{extracted.instruction} of {module.ref}: {extracted.instructions} instructions ({len(extracted.kept)} of its entry), "
        f"{len(extracted.parameters)} parameters, {len(extracted.text.encode())} bytes of text"
    )
    for path in extracted.files:
        say(f"  wrote {path}")
    if len(extracted.files) > 1:
        say(f"replay it: xlarun replay {extracted.files[1]}")
        say(f"bundle it for a bug report: xlarun bundle {extracted.files[1]}")
