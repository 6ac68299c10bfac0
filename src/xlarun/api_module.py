"""The front door's :class:`Module`: one module of a run, its facts, files and passes, and the verbs the CLI has
for a module (``diff``, ``render``, ``replay``, ``bisect``, ``bundle``); :class:`ModuleList`, a run's modules."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from xlarun import display
from xlarun.api_results import Bisection, Diff, Graph, Profile, Replay

if TYPE_CHECKING:
    from collections.abc import Sequence

    from xlarun.api import Run, Store
    from xlarun.store.records import FileInfo, ModuleInfo, PassInfo


class ModuleList(display.ShownList["Module"]):
    """A run's modules, the main program first; prints as ``xlarun modules``' table."""

    def __init__(self, store: Store, modules: list[Module], run: Run | None = None):
        super().__init__(modules)
        self._store, self.run = store, run

    def _printed(self) -> display.Printed:
        from xlarun.present import print_modules

        return display.capture_printed(print_modules, [m.summary for m in self])


class Module(display.Shown):
    """One module of a run: its facts, ``text(stage=...)``, ``files``, ``passes``, and the verbs
    ``diff``, ``render``, ``replay``, ``bisect``, ``bundle``. Prints as ``xlarun show``; in Jupyter adds its graph."""

    def __init__(self, store: Store, info: ModuleInfo):
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
    def store(self) -> Store:
        return self._store

    @property
    def summary(self) -> ModuleInfo:
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
        from xlarun.diff import pass_diff, run_diff
        from xlarun.errors import InputError

        store = self._store.store
        if other is not None:
            if pass_name or to_step is not None or from_step is not None:
                raise InputError("pass_name, from_step and to_step compare steps of one module; give no other module with them")
            second = self._other(other)
            return Diff(run_diff(store, self.info, second.info, stage=stage, keep_metadata=keep_metadata, context=context))
        if not pass_name and to_step is None:
            raise InputError(
                "say what to compare: pass_name=NAME, from_step/to_step, or another module",
                "module.passes lists the pass timeline",
            )
        return Diff(pass_diff(store, self.info, pass_name, from_step, to_step, context=context))

    def _other(self, other: str | Module | Run) -> Module:
        from xlarun.api import Run

        if isinstance(other, Module):
            return other
        ref = other.id if isinstance(other, Run) else other
        from xlarun.navigate.refs import counterpart_module

        return Module(self._store, counterpart_module(self._store.store.index, self.info, ref))

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
        expand: Sequence[str] = (),
        expand_fusions: bool = False,
        limit: int | None = None,
        error_from: str | None = None,
    ) -> Graph:
        """``xlarun render``: the module drawn with graphviz (SVG by default); written to ``output`` if given.
        ``error_from`` (a recorded bisection's id, or ``"latest"``) colours it by each value's error, drawing the
        bisection's culprit step unless ``stage``, ``pass_name`` or ``step`` say otherwise."""
        from xlarun.navigate.select import select_file
        from xlarun.render import DEFAULT_NODE_LIMIT, RenderOptions, render_stored_file

        options = RenderOptions(
            format=format,
            around=around,
            depth=depth,
            expand=tuple(expand),
            expand_all=expand_fusions,
            limit=limit or DEFAULT_NODE_LIMIT,
        )
        chosen = select_file(self.info, stage, pass_name, step, purpose="graph")
        if error_from:
            from xlarun.bisect.recorded import error_colouring

            options.errors, culprit = error_colouring(self._store.store, self.info, error_from)
            if culprit and stage is None and pass_name is None and step is None:
                chosen = culprit
        rendered = render_stored_file(self._store.store, self.run_id, chosen, options)
        if output is not None:
            Path(output).write_bytes(rendered.data)
        return Graph(rendered.data, rendered.format, rendered.source, rendered.nodes, list(rendered.notes))

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
    ) -> Replay:
        """``xlarun replay``: compile the module again, run it, compare with what was captured; recorded with the run.

        The keywords are ``xlarun replay``'s options (``timeout`` in seconds, ``max_data_size`` as ``"4G"`` or bytes)."""
        from xlarun.replay.options import keywords_for, replay_options
        from xlarun.replay.record import replay_stored_module

        options = replay_options(**keywords_for(replay_options, locals()))
        record = replay_stored_module(self._store.store, self.info, options, None, file=file)
        self.__dict__.pop("_shown", None)  # `show` lists the new replay
        return Replay(record.result, record.replay_id, self)

    def bisect(
        self,
        *,
        tolerance: float = 1e-5,
        reference: str = "before",
        reference_platform: str | None = None,
        platform: str = "cpu",
        linear: bool = False,
        recompile: str = "timeline",
        inputs: str = "auto",
        seed: int = 0,
        ops: bool = True,
    ) -> Bisection:
        """``xlarun bisect`` (replay mode): the first pass of the timeline whose output leaves the reference; recorded."""
        from xlarun.bisect.bisect_options import bisect_options
        from xlarun.bisect.recorded import bisect_and_record
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

    @property
    def time(self):
        """The module's measured time in its run (a ModuleTime), or None: not profiled, or it did not run."""
        from xlarun.navigate.profile import module_time

        return module_time(self._store.store, self.info)

    def bundle(self, output: str | Path, *, passes: bool = False, snapshot: bool = True) -> Path:
        """``xlarun bundle``: the module in one .zip for a bug report."""
        from xlarun.bundle import BundleOptions, make_bundle

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
