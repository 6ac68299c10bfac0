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

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun import display
from xlarun.api.module import Module, ModuleList, Replay, Run, RunList
from xlarun.api.results import Bisection, Diff, Graph
from xlarun.console import LineBlock

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore as _LibraryStore
    from xlarun.store.rows import FindHit

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


def open_store(path: str | Path | None = None, create: bool = True, remote: str | None = None) -> Store:
    """The store at ``path`` (default: ``$XLARUN_STORE`` or ``./.xlarun``), created if missing unless ``create=False``;
    with ``remote`` (a remote's name or an ``s3://`` URL), that team store's runs through its local mirror, as
    ``--remote`` gives them: found from their index objects, each file's pack fetched when it is read."""
    if remote is not None:
        from xlarun.store.remote import find_remote
        from xlarun.store.remote_index import open_mirror

        return Store(open_mirror(find_remote(remote)))
    from xlarun.store.facade import LocalStore as LibraryStore

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

    def replay(
        self, ref: str | Path, *, snapshot: str | Path | None = None, run: str | Run | None = None, **options: Any
    ) -> Replay:
        """``xlarun replay REF``: a module REF of this store (as :meth:`Module.replay`), or a dump file's path (an edited
        module, ``snapshot`` the arguments to run it on), replayed and recorded in this store. ``options`` are
        ``xlarun replay``'s (``file``: which of the module's files)."""
        from xlarun.replay.options import replay_options
        from xlarun.replay.resolve import replay_ref

        file = options.pop("file", None)
        run_ref = run.id if isinstance(run, Run) else run
        result, replay_id, info = replay_ref(
            self.store, str(ref), replay_options(**options), snapshot=snapshot, file=file, run=run_ref
        )
        return Replay(result, replay_id, Module(self, info) if info is not None else None)

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
        from xlarun.share.import_dump import import_dump

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


class Found(display.Shown, Sequence["FindHit"]):
    """What ``find`` found: one hit per module and kind; prints as ``xlarun find``."""

    def __init__(self, store: Store, text: str, hits: list[FindHit]):
        self._store, self.text, self.hits = store, text, hits

    def __getitem__(self, i: Any) -> Any:
        return self.hits[i]

    def __len__(self) -> int:
        return len(self.hits)

    def modules(self) -> list[Module]:
        """The modules hit, each once."""
        seen = dict.fromkeys((h.run_id, h.module_id) for h in self.hits)
        return [Module(self._store, self._store.store.index.module(r, m)) for r, m in seen]

    def _printed(self) -> display.Printed:
        from xlarun.present import print_found

        if not self.hits:
            return display.Printed(f"no module contains {self.text!r}", [LineBlock(f"no module contains {self.text!r}")])
        return display.capture_printed(print_found, self.hits)


class Batch(display.Shown):
    """A batch (``xlarun batch``): ``batch_id``, ``runs``, ``ok``; prints the CLI's comparison of the cells."""

    def __init__(self, store: Store, result: Any):
        self._store, self.result = store, result

    batch_id = property(lambda self: self.result.batch_id)
    ok = property(lambda self: self.result.ok)

    @property
    def runs(self) -> list[Run]:
        return [self._store.run(c.result.run_id) for c in self.result.cells if c.result is not None]

    def _printed(self) -> display.Printed:
        from xlarun.present import print_comparison

        return display.capture_printed(print_comparison, self.result)
