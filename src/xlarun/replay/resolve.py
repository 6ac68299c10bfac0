"""The entry of a replay: which engine (``resolve_engine``), which files (a stored module's most faithful one, its
before_optimizations dump, a snapshot), and where it runs: the worker's child process, this process, or one of
XLA's runners (:mod:`.drivers`). A replay of a stored module, or of a file into a store, is recorded last
(:mod:`.record`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.choose import choose_replay_input
from xlarun.replay.options import ReplayOptions
from xlarun.replay.record import ReplayRecord, record_replay
from xlarun.replay.result import ReplayResult

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo

Sink = Callable[[str], None]


def resolve_engine(options: ReplayOptions) -> str:
    """The engine ``options.engine`` means here: ``auto`` becomes pjrt when jaxlib imports, else a runner."""
    if options.engine != "auto":
        return options.engine
    from xlarun.replay import pjrt, runner_site

    if pjrt.jaxlib_version() is not None:
        return "pjrt"
    for runner in runner_site.RUNNERS:
        if runner_site.runner_available(runner):
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
    with _on_disk(Path(path), data) as local:
        result = run_runner(engine, local, options, sink)
    if data is not None:
        result.source = str(path)
    return result


@contextlib.contextmanager
def _on_disk(path: Path, data: bytes | None) -> Iterator[Path]:
    """``path`` itself, or (for bytes read from the store) a temporary file of its name holding ``data``."""
    if data is None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="xlarun-replay-") as tmp:
        local = Path(tmp) / path.name
        local.write_bytes(data)
        yield local


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


def _load_snapshot(path: str | Path, data: bytes | None) -> Any:
    from xlarun.replay.sources import SNAPSHOT, load_source

    snapshot = load_source(Path(path), data)
    if snapshot.file_format != SNAPSHOT:
        raise InputError(
            f"{Path(path).name} is not an HloSnapshot", "snapshots are dumped as *.snapshot.*.pb with --xla_dump_hlo_snapshots"
        )
    return snapshot


def _replay_pjrt(
    path: Path,
    options: Any,
    log: Any,
    data: Any,
    unoptimized: Any,
    unoptimized_data: Any,
    snapshot: Any,
    stage: Any,
    optimized_failure: Any,
) -> ReplayResult:
    from xlarun.replay import engine
    from xlarun.replay.sources import load_source, unoptimized_sibling

    source = load_source(path, data)
    if snapshot is not None:
        source.arguments, source.result = snapshot.arguments, snapshot.result
        source.warnings.append(f"arguments and expected result taken from {snapshot.path.name}")

    def load_unoptimized() -> Any:
        if unoptimized is not None:
            return load_source(Path(unoptimized), unoptimized_data)
        sibling = unoptimized_sibling(path) if data is None and os.path.exists(path) else None
        return load_source(sibling) if sibling else None

    if unoptimized is None and (data is not None or not os.path.exists(path)):
        looked = "the module was read from the store, and its stored files hold none"
    else:
        looked = f"none was given, and none lies beside {path.name} in {path.parent}"
    return engine.replay_with_pjrt(
        source, options, log, load_unoptimized, stage=stage, optimized_failure=optimized_failure, looked=looked
    )


@dataclass
class ReplayInput:
    """What a replay runs: a file (its bytes when it lives in the store), the module's unoptimized dump to fall back
    on, the snapshot whose arguments it runs on, and the stored module it is (None for a file outside the store)."""

    path: str | Path
    data: bytes | None = None
    unoptimized: str | None = None
    unoptimized_data: bytes | None = None
    snapshot: str | Path | None = None
    snapshot_data: bytes | None = None
    module: ModuleInfo | None = None
    warnings: list[str] = field(default_factory=list)


def replay_input(
    store: LocalStore | None,
    ref: str,
    options: ReplayOptions,
    *,
    snapshot: str | Path | None = None,
    file: str | None = None,
    run: str | None = None,
) -> ReplayInput:
    """The resolve stage: what ``ref`` names, a dump file's path (replayed as it is, ``snapshot`` its arguments) or a
    module REF of ``store`` (its most faithful file, or ``file``, with what it falls back on and runs on)."""
    if Path(ref).is_file() and run is None:
        return ReplayInput(ref, snapshot=snapshot)
    if snapshot is not None:
        raise InputError("--snapshot goes with a dump file path, not a module REF", "give the edited file's path")
    if store is None:
        raise InputError(
            f"no dump file {ref!r}, and no store to find a module of that name in", "give a dump file's path or a store"
        )
    from xlarun.navigate.refs import resolve_module

    return stored_input(store, resolve_module(store.index, ref, run=run), options, file)


def stored_input(store: LocalStore, module: ModuleInfo, options: ReplayOptions, file: str | None = None) -> ReplayInput:
    """A stored module's :class:`ReplayInput`: its most faithful file (or ``file``), read from the store."""

    def read(path: str) -> bytes:
        return store.read_file(module.run_id, path)

    choice = choose_replay_input([(f.path, f) for f in module.files], read=read)
    path = file or choice.path
    if file is not None and file not in {f.path for f in module.files}:
        raise InputError(f"{module.label} has no file {file!r}", f"`xlarun show {module.ref} --files` lists its files")
    unoptimized = choice.unoptimized if choice.unoptimized != path else None
    arguments_from = choice.arguments_from if file is None and options.inputs != "fake" else None
    return ReplayInput(
        path,
        read(path),
        unoptimized,
        read(unoptimized) if unoptimized else None,
        arguments_from,
        read(arguments_from) if arguments_from else None,
        module,
        choice.warnings if file is None else [],
    )


def replay_ref(
    store: LocalStore | None,
    ref: str,
    options: ReplayOptions,
    sink: Sink | None = None,
    *,
    snapshot: str | Path | None = None,
    file: str | None = None,
    run: str | None = None,
) -> tuple[ReplayResult, str | None, ModuleInfo | None]:
    """What ``xlarun replay REF`` and ``Store.replay(REF)`` do, in one path: resolve what ``ref`` names
    (:func:`replay_input`), replay it, and record the replay in ``store`` when there is one (a stored module's with
    its run). Returns the result, the replay's id (None when not recorded) and the module (None for a file)."""
    chosen = replay_input(store, ref, options, snapshot=snapshot, file=file, run=run)
    started, clock = _now(), time.perf_counter()
    result = replay_chosen(chosen, options, sink)
    if store is None:  # a dump file replayed where there is no store: nothing to record it in
        return result, None, None
    run_id, module_id = (chosen.module.run_id, chosen.module.module_id) if chosen.module else (None, None)
    record = record_replay(store, result, options, started, time.perf_counter() - clock, run_id, module_id)
    return result, record.replay_id, chosen.module


def replay_stored_module(
    store: LocalStore, module: ModuleInfo, options: ReplayOptions, sink: Any = None, file: str | None = None
) -> ReplayRecord:
    """Replay a module of the store (its most faithful file, or ``file``) and record the replay."""
    chosen = stored_input(store, module, options, file)
    started, clock = _now(), time.perf_counter()
    result = replay_chosen(chosen, options, sink)
    return record_replay(store, result, options, started, time.perf_counter() - clock, module.run_id, module.module_id)


def replay_chosen(chosen: ReplayInput, options: ReplayOptions, sink: Any = None) -> ReplayResult:
    """The replay of what the resolve stage chose, with its warnings and its module's name."""
    result = replay_file(
        chosen.path,
        options,
        sink,
        data=chosen.data,
        unoptimized=chosen.unoptimized,
        unoptimized_data=chosen.unoptimized_data,
        snapshot=chosen.snapshot,
        snapshot_data=chosen.snapshot_data,
    )
    if chosen.module is not None:
        result.warnings = _unique(chosen.warnings + result.warnings)
        result.module_name = result.module_name or chosen.module.name
    return result


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))
