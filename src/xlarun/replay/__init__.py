"""Replay dumped HLO modules: the built-in PJRT engine, or XLA's own runners.

Public API::

    from xlarun.replay import ReplayOptions, replay_file, choose_replay_input

    result = replay_file("dump/module_0012.jit_f.snapshot.928779095.pb", ReplayOptions(iterations=5))
    result.verdict        # "match" | "mismatch" | "ran" | "engine-error"
    result.max_abs_error, result.compile_s, result.median_s

Engines: ``pjrt`` (built in, on jaxlib 0.4.30 to 0.12; :mod:`.engine`), ``run_hlo_module`` and ``hlo_runner_main``
(:mod:`.drivers`), ``auto`` (pjrt when jaxlib imports, else the first runner found).
Every private jaxlib name lives in :mod:`.pjrt` (and, for N devices, :mod:`.multidevice`).
A module partitioned over N devices is replayed on N devices (:mod:`.partitioned`); the worker's child then
has N host devices.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.choose import ReplayChoice, choose_replay_input
from xlarun.replay.options import ReplayOptions
from xlarun.replay.result import INPUT_KINDS, VERDICTS, OutputSummary, ReplayResult

__all__ = [
    "INPUT_KINDS",
    "VERDICTS",
    "OutputSummary",
    "ReplayChoice",
    "ReplayOptions",
    "ReplayResult",
    "choose_replay_input",
    "replay_file",
    "replay_here",
    "resolve_engine",
]

Sink = Callable[[str], None]


def resolve_engine(options: ReplayOptions) -> str:
    """The engine ``options.engine`` means here: ``auto`` becomes pjrt when jaxlib imports, else a runner."""
    if options.engine != "auto":
        return options.engine
    from xlarun.replay import drivers, pjrt

    if pjrt.jaxlib_version() is not None:
        return "pjrt"
    for runner in drivers.RUNNERS:
        if drivers.runner_available(runner):
            return runner
    raise EnvironmentProblem(
        "no replay engine: jaxlib is not installed and neither run_hlo_module nor hlo_runner_main was found",
        "pip install 'xlarun[jax]' (jax and jaxlib), or put an XLA runner on PATH (or set XLARUN_RUN_HLO_MODULE)",
    )


def replay_file(
    path: str | Path,
    options: ReplayOptions | None = None,
    sink: Sink | None = None,
    *,
    data: bytes | None = None,
    unoptimized: str | Path | None = None,
    unoptimized_data: bytes | None = None,
    snapshot: str | Path | None = None,
    snapshot_data: bytes | None = None,
) -> ReplayResult:
    """Replay one dump file and return what happened; ``sink`` receives log lines as they come.

    ``data``: the file's bytes when it does not live at ``path`` (a file read from the store).
    ``unoptimized``: the module's ``before_optimizations`` dump, replayed instead when ``path`` is
    an optimized module that cannot be recompiled (found beside ``path`` on disk when omitted).
    ``snapshot``: an HloSnapshot whose arguments and recorded result the module is replayed with
    and compared to (e.g. after editing the module's text); built-in engine only.
    The built-in engine runs in a child process (:mod:`.worker`) unless ``options.isolate`` is
    ``never``: XLA aborting, crashing or hanging, or the child running out of memory or time, comes
    back as verdict ``engine-error`` with ``failed_step`` and ``crash`` set.
    Raises InputError for unreadable input or a module refused by a limit (:mod:`.limits`), and
    EnvironmentProblem for a missing engine or platform; compile and run failures come back as
    verdict ``engine-error``.
    """
    options = (options or ReplayOptions()).validate()
    engine = resolve_engine(options)
    if engine == "pjrt" and options.isolate != "never":
        from xlarun.replay.worker import ReplayWorker

        with ReplayWorker() as worker:
            return worker.replay(
                path,
                options,
                sink,
                data=data,
                unoptimized=unoptimized,
                unoptimized_data=unoptimized_data,
                snapshot=snapshot,
                snapshot_data=snapshot_data,
            )
    if engine == "pjrt":
        return replay_here(
            Path(path),
            options,
            sink,
            data=data,
            unoptimized=unoptimized,
            unoptimized_data=unoptimized_data,
            snapshot=snapshot,
            snapshot_data=snapshot_data,
        )
    from xlarun.replay.drivers import run_runner

    if snapshot is not None:
        raise InputError(f"--snapshot works with the pjrt engine only, not {engine}", "give the runner the snapshot file itself")
    if data is None:
        return run_runner(engine, path, options, sink)
    with tempfile.TemporaryDirectory(prefix="xlarun-replay-") as tmp:
        local = Path(tmp) / Path(path).name
        local.write_bytes(data)
        result = run_runner(engine, local, options, sink)
        result.source = str(path)
        return result


def replay_here(
    path: Path,
    options: ReplayOptions,
    sink: Sink | None = None,
    *,
    data: bytes | None = None,
    unoptimized: str | Path | None = None,
    unoptimized_data: bytes | None = None,
    snapshot: str | Path | None = None,
    snapshot_data: bytes | None = None,
    stage: Sink = lambda name: None,
    optimized_failure: str | None = None,
) -> ReplayResult:
    """:func:`replay_file` on the built-in engine in this process (what the worker's child runs).

    ``stage`` and ``optimized_failure``: see :func:`.engine.replay_with_pjrt`.
    """
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if sink:
            sink(line)

    snapshot_source = _load_snapshot(snapshot, snapshot_data) if snapshot is not None else None
    result = _replay_pjrt(
        Path(path), options, log, data, unoptimized, unoptimized_data, snapshot_source, stage, optimized_failure
    )
    result.log = "\n".join(lines)
    return result


def _load_snapshot(path: str | Path, data: bytes | None):
    from xlarun.replay.sources import SNAPSHOT, load_source

    snapshot = load_source(Path(path), data)
    if snapshot.file_format != SNAPSHOT:
        raise InputError(
            f"{Path(path).name} is not an HloSnapshot", "snapshots are dumped as *.snapshot.*.pb with --xla_dump_hlo_snapshots"
        )
    return snapshot


def _replay_pjrt(
    path: Path, options, log, data, unoptimized, unoptimized_data, snapshot, stage, optimized_failure
) -> ReplayResult:
    from xlarun.replay.engine import replay_with_pjrt
    from xlarun.replay.sources import load_source, unoptimized_sibling

    source = load_source(path, data)
    if snapshot is not None:
        source.arguments, source.result = snapshot.arguments, snapshot.result
        source.warnings.append(f"arguments and expected result taken from {snapshot.path.name}")

    def load_unoptimized():
        if unoptimized is not None:
            return load_source(Path(unoptimized), unoptimized_data)
        sibling = unoptimized_sibling(path) if data is None and os.path.exists(path) else None
        return load_source(sibling) if sibling else None

    if unoptimized is None and (data is not None or not os.path.exists(path)):
        looked = "the module was read from the store, and its stored files hold none"
    else:
        looked = f"none was given, and none lies beside {path.name} in {path.parent}"
    return replay_with_pjrt(
        source, options, log, load_unoptimized, stage=stage, optimized_failure=optimized_failure, looked=looked
    )
