"""The Python front door: ``xlarun.open_store()`` -> :class:`Store` -> :class:`Run` -> :class:`Module`.

Thin objects over the library the CLI uses (the store, the index, REFs, diff, render, replay, bisect),
named as the CLI names things. Each prints as the CLI prints it and shows as HTML in Jupyter::

    import xlarun
    store = xlarun.open_store()
    run = store.run()                        # the latest run (a run REF: id, prefix, spec name)
    step = store.module("train_step")        # a module REF, as `xlarun show` takes it
    print(step.instr_before, step.text()[:200])
    step.diff(pass_name="fusion")
    step.replay()
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun import display
from xlarun.api_module import Module, ModuleList
from xlarun.api_results import Batch, Bisection, Diff, Found, Graph, Replay, Times

if TYPE_CHECKING:
    from xlarun.store.facade import Store as _LibraryStore
    from xlarun.store.records import FileInfo, RunInfo

__all__ = [
    "Batch",
    "Bisection",
    "Diff",
    "Found",
    "Graph",
    "Module",
    "ModuleList",
    "Replay",
    "Run",
    "RunList",
    "Store",
    "batch",
    "capture",
    "open_store",
]


def open_store(path: str | Path | None = None, create: bool = True) -> Store:
    """The store at ``path`` (default: ``$XLARUN_STORE`` or ``./.xlarun``), created if missing unless ``create=False``."""
    from xlarun.store.facade import Store as LibraryStore

    return Store(LibraryStore.open(path, create=create))


class Store(display.Shown):
    """A run store. ``runs()``, ``run(ref)``, ``modules(run)``, ``module(ref)``, ``find(text)``; ``capture``,
    ``batch`` and ``import_dump`` add runs to it."""

    def __init__(self, store: _LibraryStore):
        self.store = store  # the library's Store: blobs, index, run folders

    @property
    def path(self) -> Path:
        return self.store.root

    def runs(self, batch: str | None = None, name: str | None = None, last: int | None = None) -> RunList:
        """The runs, oldest first (``xlarun runs``); ``batch`` an id or prefix or 'latest', ``name`` a spec name,
        ``last`` only the newest N (``total`` on the list still counts them all)."""
        if batch:
            from xlarun.navigate.refs import resolve_batch

            batch = resolve_batch(self.store.index, batch)
        index = self.store.index
        found = RunList(self, [Run(self, info) for info in index.runs(batch_id=batch, name=name, last=last)], batch, name)
        found.total = len(found) if last is None else index.count_runs(batch_id=batch, name=name)
        return found

    def run(self, ref: str | None = None) -> Run:
        """The run a run REF names: an id, a unique prefix, a spec name (its latest run); None: the latest."""
        from xlarun.navigate.refs import resolve_run

        return Run(self, resolve_run(self.store.index, ref))

    def modules(self, run: str | Run | None = None) -> ModuleList:
        """A run's modules, the main program first (``xlarun modules``); default: the latest run."""
        return (run if isinstance(run, Run) else self.run(run)).modules()

    def module(self, ref: str, run: str | Run | None = None) -> Module:
        """The module a REF names (``module_0006``, ``6``, ``jit_f``, ``train_step``, ``RUN/module_0006``), as ``xlarun show`` finds it."""
        from xlarun.navigate.refs import resolve_module

        run_ref = run.id if isinstance(run, Run) else run
        return Module(self, resolve_module(self.store.index, ref, run=run_ref))

    def find(
        self,
        text: str,
        *,
        opcode: bool = False,
        name: bool = False,
        op_name: bool = False,
        source: bool = False,
        exact: bool = False,
        run: str | Run | None = None,
    ) -> Found:
        """Modules holding an opcode, instruction name, op_name or source location (``xlarun find``), across runs."""
        from xlarun.store.index import TERM_KINDS

        kinds = tuple(k for k, on in zip(TERM_KINDS, (opcode, name, op_name, source), strict=True) if on) or TERM_KINDS
        run_id = (run if isinstance(run, Run) else self.run(run)).id if run is not None else None
        return Found(self, text, self.store.index.find(text, kinds=kinds, run_id=run_id, exact=exact))

    def capture(self, spec: str | Path, *, echo: bool = False) -> Run:
        return capture(spec, store=self, echo=echo)

    def batch(
        self,
        spec: str | Path,
        *,
        jobs: int | None = None,
        fail_fast: bool | None = None,
        executor: str | None = None,
        address: str | None = None,
        retries: int = 0,
        ship: str = "auto",
    ) -> Batch:
        return batch(
            spec, store=self, jobs=jobs, fail_fast=fail_fast, executor=executor, address=address, retries=retries, ship=ship
        )

    def import_dump(self, source: str | Path, *, name: str | None = None) -> Run:
        """``xlarun import``: a dump folder, archive or bundle made elsewhere becomes a run of kind ``import``."""
        from xlarun.dump_import import import_dump

        result = import_dump(source, self.store, name=name)
        return self.run(result.run_id)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _printed(self) -> display.Printed:
        return self.runs()._printed()

    def __repr__(self) -> str:
        return f"<xlarun.Store {self.path}: {len(self.store.index.runs())} runs>"

    def __str__(self) -> str:
        return repr(self)


class Run(display.Shown):
    """One run of the store: its facts (``id``, ``name``, ``kind``, ``status``...), ``modules()``, ``files()``,
    ``logs()``, ``manifest``, ``report()``, ``export()``. Prints as ``xlarun modules RUN``."""

    def __init__(self, store: Store, info: RunInfo):
        self._store = store
        self.info = info

    id = property(lambda self: self.info.run_id, doc="The run id (``20261122-103555-391d``).")
    name = property(lambda self: self.info.name, doc="The spec's name (or the function's, for an in-process capture).")
    kind = property(lambda self: self.info.kind, doc="capture, import, inline (xlarun.jax.capture), replay...")
    status = property(lambda self: self.info.status)
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
    def store(self) -> Store:
        return self._store

    def modules(self) -> ModuleList:
        """The run's modules, the main program first."""
        return ModuleList(self._store, [Module(self._store, m) for m in self._store.store.index.modules(self.id)], self)

    def module(self, ref: str) -> Module:
        return self._store.module(ref, run=self)

    def times(self) -> Times:
        """The run's modules by measured time, most first (``xlarun modules --by time``); the run must have been
        captured with ``profile:`` (else :class:`~xlarun.navigate.profile.NoProfile`)."""
        from xlarun.navigate.profile import run_times

        return Times(run_times(self._store.store, self.id))

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

    def processes(self):
        """In a run of many processes, its modules across them: which were compiled alike, which are in desync
        (a :class:`~xlarun.navigate.desync.ProcessReport`); None when fewer than two processes compiled anything."""
        from xlarun.navigate.desync import compare_processes

        return compare_processes([m.summary for m in self.modules()])

    def report(self, out: str | Path = "report") -> Path:
        """``xlarun report``: the static HTML report of this run in folder ``out``; returns its index.html."""
        from xlarun.report import build_run_report

        return build_run_report(self._store.store, self.id, out).index_html

    def export(self, dest: str | Path, with_logs: bool = True) -> int:
        """``xlarun export``: the run's files back under their original names; returns how many."""
        return self._store.store.export(self.id, dest, with_logs=with_logs)

    def _printed(self) -> display.Printed:
        from xlarun.present import print_run_modules

        return display.capture_printed(
            print_run_modules, self.info, [m.summary for m in self.modules()], self.files_outside_modules()
        )


class RunList(display.ShownList[Run]):
    """Runs, oldest first; prints as ``xlarun runs``."""

    def __init__(self, store: Store, runs: list[Run], batch: str | None = None, name: str | None = None):
        super().__init__(runs)
        self._store, self._batch, self._name = store, batch, name
        self.total = len(runs)  # all the runs asked for, where only the newest were read (``last``)

    def _printed(self) -> display.Printed:
        from xlarun.present import print_runs

        return display.capture_printed(print_runs, [run.info for run in self])


def capture(spec: str | Path, store: Store | str | Path | None = None, *, echo: bool = False) -> Run:
    """``xlarun capture SPEC``: run the spec's job with its dump environment, archive and index what it wrote.

    A job that fails is archived all the same: look at ``run.ok`` / ``run.status``. ``echo`` streams the
    job's output here as it runs."""
    from xlarun.capture.launch import capture as capture_spec

    the_store = store if isinstance(store, Store) else open_store(store)
    result = capture_spec(spec, the_store.store, echo=echo)
    return the_store.run(result.run_id)


def batch(
    spec: str | Path,
    store: Store | str | Path | None = None,
    *,
    jobs: int | None = None,
    fail_fast: bool | None = None,
    executor: str | None = None,
    address: str | None = None,
    retries: int = 0,
    ship: str = "auto",
) -> Batch:
    """``xlarun batch SPEC``: capture every cell of the spec's matrix, ``jobs`` at a time (local: 1 by default; ray:
    every cell at once by default); each cell is a run.
    ``executor``: ``local`` (here), ``ray`` (the cluster at ``address``, else a new one on this machine;
    ``retries`` a cell whose node was lost; ``ship``: auto, always or never, whether the spec's folder is sent to
    the nodes); default: the spec's ``executor:``, else local."""
    from xlarun.capture.spec_yaml import load_batch
    from xlarun.executors import executor_of, run_batch_on

    the_store = store if isinstance(store, Store) else open_store(store)
    cells = load_batch(spec)
    result = run_batch_on(
        executor_of(cells, executor),
        cells,
        the_store.store,
        jobs=jobs,
        fail_fast=fail_fast,
        address=address,
        retries=retries,
        ship=ship,
    )
    return Batch(the_store, result)
