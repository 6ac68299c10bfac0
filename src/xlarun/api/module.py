"""The front door's :class:`Run` and :class:`Module`: one run of the store and its modules; a module's facts, files
and passes, and the verbs the CLI has for a module (``diff``, ``render``, ``replay``, ``bisect``, ``bundle``);
:class:`RunList`, :class:`ModuleList`; :class:`Replay`, what ``Module.replay`` returns."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from xlarun import display
from xlarun.api.results import Bisection, Diff, Graph, Memory, Profile, TimeDiff, Times
from xlarun.declared_options import BISECT_OPTIONS, RENDER_OPTIONS, REPLAY_OPTIONS, keywords_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xlarun.replay.result import ReplayResult
    from xlarun.store.facade import LocalStore as LibraryStore
    from xlarun.store.rows import FileInfo, ModuleInfo, PassInfo, RunInfo


class FrontStore(Protocol):
    """What a run and a module ask of the front door's store that holds them (:class:`xlarun.api.Store`)."""

    store: LibraryStore

    def run(self, ref: str | None = None) -> Run: ...

    def module(self, ref: str, run: str | Run | None = None) -> Module: ...


class ModuleList(display.ShownList["Module"]):
    """A run's modules, the main program first; prints as ``xlarun modules``' table."""

    def __init__(self, store: FrontStore, modules: list[Module], run: Run | None = None):
        super().__init__(modules)
        self._store, self.run = store, run

    def _printed(self) -> display.Printed:
        from xlarun.present import print_modules

        return display.capture_printed(print_modules, [m.row for m in self])


class Module(display.Shown):
    """One module of a run: its facts, ``text(stage=...)``, ``files``, ``passes``, and the verbs
    ``diff``, ``render``, ``replay``, ``bisect``, ``bundle``. Prints as ``xlarun show``; in Jupyter adds its graph."""

    def __init__(self, store: FrontStore, info: ModuleInfo):
        self._store = store
        self._summary = info  # a run's module list carries no files: they are read on first use (``info``)

    @cached_property
    def info(self) -> ModuleInfo:
        """The index's ModuleInfo, with the module's files and pass timeline."""
        summary = self._summary
        if summary.files or not summary.n_files:
            return summary
        return self._store.store.index.module(summary.run_id, summary.module_id)

    run_id = property(lambda self: self._summary.run_id)
    module_id = property(lambda self: self._summary.module_id)
    name = property(lambda self: self._summary.name, doc="``jit_train_step`` (None where file names leave it out).")
    label = property(lambda self: self._summary.label, doc="``module_0012.jit_train_step``: as XLA names it in files.")
    ref = property(lambda self: self._summary.ref, doc="``RUN/module_0012``: a REF that names exactly this module.")
    backend = property(lambda self: self._summary.backend)
    stages = property(lambda self: self._summary.stages)
    instr_before = property(lambda self: self._summary.instr_before, doc="Instructions before optimizations.")
    instr_after = property(lambda self: self._summary.instr_after, doc="Instructions after optimizations.")
    signature = property(lambda self: self._summary.entry_signature, doc="The entry computation's signature.")
    fingerprint = property(lambda self: self._summary.fingerprint)
    opcodes_before = property(lambda self: self._summary.opcodes_before)
    opcodes_after = property(lambda self: self._summary.opcodes_after)
    n_pass_dumps = property(lambda self: self._summary.n_pass_dumps)

    @property
    def files(self) -> list[FileInfo]:
        """Every file of the module: stage dumps, pass dumps, snapshots, buffer assignment, codegen..."""
        return self.info.files

    @property
    def passes(self) -> list[PassInfo]:
        """The pass timeline (with a pass-by-pass capture): step, pipeline, after/before pass, instruction count."""
        return self.info.passes

    @property
    def run(self) -> Run:
        return self._store.run(self.run_id)

    @property
    def store(self) -> FrontStore:
        return self._store

    @property
    def row(self) -> ModuleInfo:
        """The index's row of the module as a run's module list holds it (no files: :attr:`info` has them)."""
        return self._summary

    def file(
        self, stage: str | None = None, *, pass_name: str | None = None, step: int | None = None, format: str | None = None
    ) -> FileInfo:
        """The file ``xlarun cat --stage/--pass/--step/--format`` picks: every stage spelling the tool prints
        (``before``, ``after``, ``cpu_after_optimizations``, ``buffer-assignment``, a file name)."""
        from xlarun.navigate.select import select_file

        return select_file(self.info, stage, pass_name, step, format)

    def text(self, stage: str = "before_optimizations", *, pass_name: str | None = None, step: int | None = None) -> str:
        """The module's HLO text at a stage (``before_optimizations``, ``after_optimizations``, or ``before``/``after``)
        or after a pass (``pass_name``, ``step``), as ``xlarun cat`` prints it."""
        return self.read(self.file(stage, pass_name=pass_name, step=step, format="text")).decode("utf-8", errors="replace")

    def read(self, file: FileInfo | str) -> bytes:
        """The exact archived bytes of one of the module's files (a FileInfo or its path)."""
        path = file if isinstance(file, str) else file.path
        return self._store.store.read_file(self.run_id, path)

    def diff(
        self,
        other: str | Module | Run | None = None,
        *,
        pass_name: str | None = None,
        from_step: int | None = None,
        to_step: int | None = None,
        stage: str = "before_optimizations",
        keep_metadata: bool = False,
        context: int = 3,
    ) -> Diff:
        """``xlarun diff``: what a pass did (``pass_name``, or ``from_step``/``to_step``), or this module against
        ``other`` (a Module, a module REF, or a run: the module of the same name there)."""
        from xlarun.errors import InputError
        from xlarun.see.diff import pass_diff, run_diff

        store = self._store.store
        if other is not None:
            if pass_name or to_step is not None or from_step is not None:
                raise InputError("pass_name, from_step and to_step compare steps of one module; give no other module with them")
            second = self._other(other)
            found = run_diff(store, self.info, second.info, stage=stage, keep_metadata=keep_metadata, context=context)
            peaks = [self._peak(), second._peak()]
            found.peak_bytes = peaks if any(p is not None for p in peaks) else None
            return Diff(found)
        if not pass_name and to_step is None:
            raise InputError(
                "say what to compare: pass_name=NAME, from_step/to_step, or another module",
                "module.passes lists the pass timeline",
            )
        return Diff(pass_diff(store, self.info, pass_name, from_step, to_step, context=context))

    def _peak(self) -> int | None:
        from xlarun.store.memory_index import run_peaks

        store = self._store.store
        return run_peaks(store.index.conn, store, self.run_id, {self.module_id}).get(self.module_id)

    def _other(self, other: str | Module | Run) -> Module:
        if isinstance(other, Module):
            return other
        ref = other.id if isinstance(other, Run) else other
        from xlarun.navigate.refs import counterpart_module

        return Module(self._store, counterpart_module(self._store.store.index, self.info, ref))

    @keywords_of(RENDER_OPTIONS, besides=("stage", "pass_name", "step", "format", "error_from", "time", "xla_dot"))
    def render(
        self,
        output: str | Path | None = None,
        *,
        stage: str | None = None,
        pass_name: str | None = None,
        step: int | None = None,
        format: str = "svg",
        around: str | None = None,
        depth: int = 3,
        limit: int = 1500,
        full: bool = False,
        expand: Sequence[str] | None = None,
        expand_fusions: bool = False,
        timeout_s: float = 60.0,
        error_from: str | None = None,
        time: bool = False,
        xla_dot: bool = False,
    ) -> Graph:
        """``xlarun render``: the module drawn with graphviz (SVG by default); written to ``output`` if given.
        A module over ``limit`` nodes (or 500, if fewer) is drawn as its overview unless ``full``; ``limit=0``
        draws every node. ``error_from`` (a recorded bisection's id, or ``"latest"``) colours it by each value's
        error, drawing the bisection's culprit step unless ``stage``, ``pass_name`` or ``step`` say otherwise;
        ``time`` colours it by each op's measured time (a profiled run), drawing the optimized module unless they
        say otherwise. ``xla_dot`` lays out XLA's own .dot dump instead."""
        from xlarun.declared_options import given_to
        from xlarun.navigate.select import select_file
        from xlarun.render import render_options, render_stored_file

        options = render_options(format, **given_to(RENDER_OPTIONS, locals()))
        chosen_stage = "after_optimizations" if time and stage is None and pass_name is None and step is None else stage
        chosen = select_file(self.info, chosen_stage, pass_name, step, purpose="dot" if xla_dot else "graph")
        if error_from:
            from xlarun.bisect.history import error_colouring

            options.errors, culprit = error_colouring(self._store.store, self.info, error_from)
            if culprit and stage is None and pass_name is None and step is None:
                chosen = culprit
        if time:
            from xlarun.navigate.profile import op_self_times

            options.times = op_self_times(self._store.store, self.info)
        rendered = render_stored_file(self._store.store, self.run_id, chosen, options)
        if output is not None:
            Path(output).write_bytes(rendered.data)
        return Graph(rendered.data, rendered.format, rendered.source, rendered.nodes, list(rendered.notes), rendered.kind)

    @keywords_of(REPLAY_OPTIONS, besides=("file",))
    def replay(
        self,
        *,
        engine: str = "auto",
        platform: str = "cpu",
        reference_platform: str | None = None,
        abs_error_bound: float = 1e-3,
        rel_error_bound: float = 1e-3,
        iterations: int = 1,
        seed: int | None = None,
        inputs: str = "auto",
        file: str | None = None,
        print_literals: bool = False,
        runner: str | Path | None = None,
        image: str | None = None,
        timeout: float | None = None,
        max_data_size: str | int = "4G",
        in_process: bool = False,
        save_outputs: str | Path | None = None,
        profile: bool = False,
    ) -> Replay:
        """``xlarun replay``: compile the module again, run it, compare with what was captured; recorded with the run.

        The keywords are ``xlarun replay``'s options (``timeout`` in seconds, ``max_data_size`` as ``"4G"`` or bytes)."""
        from xlarun.replay.options import keywords_for, replay_options
        from xlarun.replay.resolve import replay_stored_module

        options = replay_options(**keywords_for(replay_options, locals()))
        record = replay_stored_module(self._store.store, self.info, options, None, file=file)
        self.__dict__.pop("_shown", None)  # `show` lists the new replay
        return Replay(record.result, record.replay_id, self)

    @keywords_of(BISECT_OPTIONS)
    def bisect(
        self,
        *,
        tolerance: float = 1e-5,
        linear: bool = False,
        reference: str = "before",
        reference_platform: str | None = None,
        platform: str = "cpu",
        recompile: str = "timeline",
        inputs: str = "auto",
        seed: int = 0,
        ops: bool = True,
    ) -> Bisection:
        """``xlarun bisect`` (replay mode): the first pass of the timeline whose output leaves the reference; recorded."""
        from xlarun.bisect.bisect_options import bisect_options
        from xlarun.bisect.replay_mode import bisect_and_record
        from xlarun.replay.options import keywords_for

        options = bisect_options(**keywords_for(bisect_options, locals()))
        result, record = bisect_and_record(self._store.store, self.info, options)
        self.__dict__.pop("_shown", None)  # `show` lists the new bisection
        return Bisection(result, record.bisect_id)

    def profile(self, top: int | None = None) -> Profile:
        """The module's ops by measured time (``xlarun profile REF``), each with what it holds, its sources, flops,
        bytes and achieved rates; ``top``: how many it prints (all are in ``ops``)."""
        from xlarun.navigate.profile import module_profile

        return Profile(module_profile(self._store.store, self.info), top)

    def memory(self, top: int | None = None) -> Memory:
        """What fills the module's memory (``xlarun memory REF``): its peak, parameters, outputs, temporaries and
        aliased (donated) bytes, and the biggest buffers live at the peak; ``top``: how many (None: all)."""
        from xlarun.navigate.peak_memory import module_memory

        return Memory(module_memory(self._store.store, self.info, top))

    @property
    def time(self) -> Any:
        """The module's measured time in its run (a ModuleTime), or None: not profiled, or it did not run."""
        from xlarun.store.profile_index import module_time  # the index alone: `show` loads no profile reader

        return module_time(self._store.store.index.conn, self.info.run_id, self.info.module_id)

    def bundle(self, output: str | Path, *, passes: bool = False, snapshot: bool = True) -> Path:
        """``xlarun bundle``: the module in one .zip for a bug report."""
        from xlarun.share.bundle import BundleOptions, make_bundle

        return make_bundle(self._store.store, self.info, Path(output), BundleOptions(snapshot=snapshot, passes=passes)).path

    def _printed(self) -> display.Printed:
        from xlarun.present import print_module

        return display.capture_printed(print_module, self._store.store, self.info)

    def _repr_html_(self) -> str:
        return display.printed_html(self._shown, self._graph_html())

    def _graph_html(self) -> str:
        from xlarun.errors import XlarunError

        try:
            from xlarun.report.graphs import safe_inline_svg

            graph = self.render(stage="before_optimizations")
            return display.graph_html(
                safe_inline_svg(graph.data.decode("utf-8")), f"{self.label} before optimizations: {graph.nodes} nodes"
            )
        except XlarunError as exc:  # too big, graphviz missing, no HLO text: the tables still show
            return display.note_html(f"graph not drawn: {exc.one_line()}")


class Run(display.Shown):
    """One run of the store: its facts (``id``, ``name``, ``kind``, ``status``...), ``modules()``, ``files()``,
    ``logs()``, ``manifest``, ``report()``, ``export()``. Prints as ``xlarun modules RUN``."""

    def __init__(self, store: FrontStore, info: RunInfo):
        self._store = store
        self.info = info

    id = property(lambda self: self.info.run_id, doc="The run id (``20261122-103555-391d``).")
    name = property(lambda self: self.info.name, doc="The spec's name (or the function's, for an in-process capture).")
    kind = property(lambda self: self.info.kind, doc="capture, import, inline (xlarun.jax.capture), replay...")
    status = property(lambda self: self.info.status)
    error = property(lambda self: self.info.error, doc="What failed, for a run whose status is failed (else None).")
    backend = property(lambda self: self.info.backend)
    framework = property(lambda self: self.info.framework)
    started = property(lambda self: self.info.started)
    duration_s = property(lambda self: self.info.duration_s)
    n_modules = property(lambda self: self.info.n_modules)
    n_files = property(lambda self: self.info.n_files)
    dump_bytes = property(lambda self: self.info.dump_bytes)
    batch_id = property(lambda self: self.info.batch_id)
    tags = property(lambda self: self.info.tags)

    @property
    def ok(self) -> bool:
        """The job succeeded and dumped something."""
        return self.status == "succeeded" and self.n_files > 0

    @property
    def store(self) -> FrontStore:
        return self._store

    def modules(self) -> ModuleList:
        """The run's modules, the main program first."""
        return ModuleList(self._store, [Module(self._store, m) for m in self._store.store.index.modules(self.id)], self)

    def times(self) -> Times:
        """The run's modules by measured time, most first (``xlarun modules --by time``); the run must have been
        captured with ``profile:`` (else :class:`~xlarun.navigate.profile.NoProfile`)."""
        from xlarun.navigate.profile import run_times

        return Times(run_times(self._store.store, self.id))

    def diff_time(self, other: str | Run, *, min_change: float | None = None, top: int | None = None) -> TimeDiff:
        """``xlarun diff RUN RUN_B --time``: which modules and ops got slower or faster from this run to ``other`` (a
        Run or a run REF), beyond the spread of their repeated executions; both runs captured with ``profile:``.
        ``min_change``: the smallest ratio counted (0.1: 10%); ``top``: how many moved ops are listed (0: all)."""
        from xlarun.navigate.time_diff import DEFAULT_MIN_CHANGE, DEFAULT_TOP_MOVED, compare_run_times

        second = other if isinstance(other, Run) else self._store.run(other)
        return TimeDiff(
            compare_run_times(
                self._store.store,
                self.id,
                second.id,
                DEFAULT_MIN_CHANGE if min_change is None else min_change,
                DEFAULT_TOP_MOVED if top is None else top,
            )
        )

    def peaks(self, module_ids: set[int] | None = None) -> dict[int, int]:
        """The peak bytes of each module (of ``module_ids``; None: all) whose buffer assignment was dumped, by
        module id: ``modules``' peak column (``Module.memory()`` tells what makes one up)."""
        from xlarun.store.memory_index import run_peaks

        store = self._store.store
        return run_peaks(store.index.conn, store, self.id, module_ids)

    def module(self, ref: str) -> Module:
        return self._store.module(ref, run=self)

    @property
    def main(self) -> Module:
        """The main program: the first module ``xlarun modules`` lists."""
        modules = self.modules()
        if not modules:
            from xlarun.errors import InputError

            raise InputError(f"run {self.id} has no modules", "`xlarun files RUN` lists what it wrote")
        return modules[0]

    def files_outside_modules(self) -> list[tuple[str, int]]:
        """(kind, count) of the run's files that belong to no module (logs, TF graphs, reports...)."""
        return self._store.store.index.files_outside_modules(self.id)

    def files(self, kind: str | None = None) -> list[FileInfo]:
        """Every file the run wrote with what its name means (``xlarun files``); ``kind``: hlo, pass, snapshot..."""
        return [f for f in self._store.store.index.run_files(self.id) if kind is None or f.kind == kind]

    @property
    def manifest(self) -> dict[str, Any]:
        """What was recorded: command, flags, versions, host, times, status."""
        return self._store.store.manifest(self.id)

    def logs(self, stream: str = "stdout", process: int | None = None) -> str:
        """The job's ``stdout`` or ``stderr``; ``process``: that process's own (a run of many processes)."""
        if process is None:
            return self._store.store.read_log(self.id, stream)
        from xlarun.capture.backends.process_group import process_log

        return process_log(self._store.store.run_path(self.id), process, stream)

    def processes(self) -> Any:
        """In a run of many processes, its modules across them: which were compiled alike, which are in desync
        (a :class:`~xlarun.navigate.desync.ProcessReport`); None when fewer than two processes compiled anything."""
        from xlarun.navigate.desync import compare_processes

        return compare_processes([m.row for m in self.modules()])

    def report(self, out: str | Path = "report") -> Path:
        """``xlarun report``: the static HTML report of this run in folder ``out``; returns its index.html."""
        from xlarun.report import build_run_report

        return build_run_report(self._store.store, self.id, out).index_html

    def export(self, dest: str | Path, with_logs: bool = True) -> int:
        """``xlarun export``: the run's files back under their original names; returns how many."""
        return self._store.store.export(self.id, dest, with_logs=with_logs)

    def _printed(self) -> display.Printed:
        from xlarun.present import print_run_modules

        summaries = [m.row for m in self.modules()]
        return display.capture_printed(print_run_modules, self.info, summaries, self.files_outside_modules(), self.peaks())


class RunList(display.ShownList[Run]):
    """Runs, oldest first; prints as ``xlarun runs``."""

    def __init__(self, store: FrontStore, runs: list[Run], batch: str | None = None, name: str | None = None):
        super().__init__(runs)
        self._store, self._batch, self._name = store, batch, name
        self.total = len(runs)  # all the runs asked for, where only the newest were read (``last``)

    def _printed(self) -> display.Printed:
        from xlarun.present import print_runs

        return display.capture_printed(print_runs, [run.info for run in self])


class Replay(display.Shown):
    """A recorded replay: ``verdict`` (match, mismatch, ran, engine-error), ``result`` with errors and timings."""

    def __init__(self, result: ReplayResult, replay_id: str | None, module: Module | None):
        self.result, self.replay_id, self.module = result, replay_id, module

    verdict = property(lambda self: self.result.verdict)
    max_abs_error = property(lambda self: self.result.max_abs_error)
    max_rel_error = property(lambda self: self.result.max_rel_error)

    @property
    def ok(self) -> bool:
        return self.result.verdict in ("match", "ran")

    def _printed(self) -> display.Printed:
        from xlarun.present import print_replay

        return display.capture_printed(print_replay, self.result, self.replay_id, self.module.info if self.module else None)
