"""The store as commands and the Python API use it: the run store (:mod:`xlarun.store.runs`) with its index,
kept up to date with ``runs/`` (:mod:`xlarun.store.ingest`), its archiver, and its facts cache.

This is the top of the core's layers (records, then runstore and blobs, then index, then ingest): nothing
below imports it. ``LocalStore.open()`` opens (and creates) a store; ``store.index`` is this thread's index
connection, brought up to date on first use; ``store.facts`` is what parsing its dumps found in this
process, handed to the archiver (which fills it while a job runs) and to ingest (which reads it).
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from xlarun.console import note
from xlarun.errors import StoreError
from xlarun.store import agreement
from xlarun.store.index import DamagedIndex, Index
from xlarun.store.locks import writers_turn
from xlarun.store.rows import CheckReport, StoredFile
from xlarun.store.runs import (
    RunStore,
)

if TYPE_CHECKING:
    from xlarun.store.archive import OutputArchiver
    from xlarun.store.gc import GcResult
    from xlarun.store.summaries import FactsCache


@dataclass
class Reindexed:
    """What ``reindex`` did: the runs indexed, where a damaged index was moved, and the runs left out with why."""

    indexed: int
    moved: Path | None
    left_out: dict[str, str]


def _mend_advice(run_id: str, why: str) -> str:
    if why.startswith("it cannot be read"):  # a permission problem, not damage
        return "a user who can read it indexes it"
    return f"`xlarun check` names what is damaged; restore it from a backup, or `xlarun rm {run_id}` removes the run"


#: The stores this process opened and has not closed: closed when the process ends (the console script ends without
#: the interpreter's teardown, which closed their SQLite connections and checkpointed their write-ahead logs).
_OPEN_STORES: weakref.WeakSet[LocalStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        try:
            store.close()
        except Exception:  # a store a dying thread still used: its connections go with the process
            pass


class LocalStore(RunStore):
    """A run store folder with its index, archiver and facts cache. ``LocalStore.open()`` opens (and creates) the default one."""

    def __init__(self, root: Path):
        super().__init__(root)
        _OPEN_STORES.add(self)
        self._indexes = threading.local()  # one SQLite connection per thread (batch cells run in threads)
        self._open_indexes: list[Index] = []
        self._reconciled = False
        self._reconciled_ids: set[str] = set()  # runs the first reconcile indexed
        self._reconcile_lock = threading.Lock()

    @classmethod
    def open(cls, path: str | Path | None = None, create: bool = True) -> LocalStore:
        """Open the store at ``path`` (default: ``$XLARUN_STORE`` or ``./.xlarun``), creating it if asked."""
        return super().open(path, create)

    @cached_property
    def facts(self) -> FactsCache:
        """What parsing this store's dumps found in this process (made on first use: commands that only read
        the index never import the HLO readers)."""
        from xlarun.store.summaries import FactsCache

        return FactsCache()

    # --- the index -------------------------------------------------------------------------------

    @property
    def index(self) -> Index:
        """The SQLite index (this thread's connection), brought up to date with ``runs/`` on first use."""
        index = getattr(self._indexes, "index", None)
        if index is None:
            index = self._indexes.index = Index.open(self.root / "index.sqlite")
            self._open_indexes.append(index)
            with self._reconcile_lock:
                if not self._reconciled and not index.read_only:  # read-only: what the index says is read as is
                    self._reconcile(index)
                    self._reconciled = True
        return index

    def _reconcile(self, index: Index) -> None:
        """Index the runs ``runs/`` holds and the index lacks, and forget those it no longer holds: read both lists
        only when they may disagree (:mod:`xlarun.store.agreement`), as listing 10,000 runs twice took more than the
        rest of a reading command."""
        if agreement.agreed(index, self.runs_dir):
            return
        if agreement.pending(index) and not index.read_only:  # a writer's mark: listed in the turn, then removed
            with writers_turn(self.root, wait=False) as ours:
                if ours:
                    self._list_and_reconcile(index)
                    agreement.clear_pending(index)
                    return
        self._list_and_reconcile(index)

    def _list_and_reconcile(self, index: Index) -> None:
        stamp = agreement.folder_stamp(self.runs_dir)
        if set(self.run_ids()) != index.run_ids():  # else nothing to do, and the HLO readers stay unimported
            from xlarun.store.ingest import reconcile

            added, left_out = reconcile(index, self, self.facts)
            self._reconciled_ids, index.left_out = set(added), left_out
            for run_id, why in left_out.items():
                note(f"run {run_id} is left out of the index: {why} ({_mend_advice(run_id, why)})")
            return  # the next reader checks again, and notes the agreement
        agreement.note_if_settled(index, self.runs_dir, stamp)

    def ingest(self, run_id: str, files: list[StoredFile] | None = None) -> None:
        """Index a run just committed (a capture, an import, a recovered run): once, also when this is the
        store's first use of its index (whose reconcile then indexed it). ``files``: the list just committed as its
        ``files.json`` (saves reading it back)."""
        from xlarun.store.ingest import ingest_run

        index = self.index
        if run_id in self._reconciled_ids:
            self._reconciled_ids.discard(run_id)
            return
        ingest_run(index, self, run_id, self.facts, files)

    def rebuild_index(self) -> Reindexed:
        """Rebuild the index from ``runs/``; an index SQLite cannot read (met opening it or while rebuilding) is moved
        aside first with its side files, since it is derived data. Every run is ingested again; one whose manifest or
        file list is damaged is left out, named in the result."""
        self._reconciled = True  # every run is ingested below: the opening reconcile would do it twice
        try:
            return self._ingest_every_run(None)
        except DamagedIndex:
            return self._ingest_every_run(self._move_index_aside())

    def _ingest_every_run(self, moved: Path | None) -> Reindexed:
        from xlarun.store.ingest import ingest_unless_damaged

        index = self.index
        on_disk = self.run_ids()
        for gone in (index.run_ids() - set(on_disk)) | {None}:  # rows of no run, or of a damaged (NULL) run id
            index.forget_run(gone)
        left_out = {}
        for run_id in on_disk:
            why = ingest_unless_damaged(index, self, run_id, self.facts)
            if why is not None:
                index.forget_run(run_id)  # rows from before its damage would answer for a run the store cannot read
                left_out[run_id] = why
        return Reindexed(len(on_disk) - len(left_out), moved, left_out)

    def _move_index_aside(self) -> Path:
        """Close this thread's index connection and move the index file and its side files aside; returns where."""
        index = getattr(self._indexes, "index", None)
        if index is not None:
            index.close()
            self._open_indexes.remove(index)
            del self._indexes.index
        path = self.root / "index.sqlite"
        moved = path.with_name(f"index.sqlite.damaged-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
        os.replace(path, moved)
        for side in ("-wal", "-shm"):
            if os.path.lexists(f"{path}{side}"):
                os.replace(f"{path}{side}", f"{moved}{side}")
        return moved

    def open_index(self) -> Index:
        """Open (and reconcile) the index now. A writer calls it before :meth:`commit_run` and calls :meth:`ingest`
        after: its new run is then indexed once, not a second time by its own first reconcile, and its reconcile
        does not re-index runs other processes are committing meanwhile (8 concurrent captures each re-indexing
        the others' runs ran past the torture test's 5 minutes on 2 CPUs)."""
        return self.index

    #: What a writer says of a run :meth:`commit_indexed` committed but could not index.
    NOT_YET_INDEXED_ADVICE = "the next xlarun command indexes it, or `xlarun reindex` once the index can be written"

    def commit_indexed(
        self, run_id: str, staging: Path, files: list[StoredFile], metadata: dict[str, str | bytes]
    ) -> tuple[Path, str | None]:
        """Commit a run (:meth:`commit_run`) and index it: the index is opened before the commit, so the run is
        ingested once, after it (see :meth:`open_index`). The index is derived data: trouble with it (a full disk, a
        lock held past every retry) never stops the commit. Returns the run's folder and that trouble in words (None
        once indexed); the next command that opens the index indexes the run."""
        import sqlite3

        trouble: Exception | None = None
        try:
            self.open_index()
        except (StoreError, sqlite3.Error) as exc:
            trouble = exc
        with writers_turn(self.root):  # nothing else changes runs/ until the new agreement is noted
            index = getattr(self._indexes, "index", None) if trouble is None else None
            marked = index is not None and agreement.agreed(index, self.runs_dir) and agreement.mark_pending(index, run_id)
            run_dir = self.commit_run(run_id, staging, files, metadata)
            try:
                self.ingest(run_id, files)  # also when opening failed: it may open now, and its reconcile then indexes the run
                trouble = None
            except (StoreError, sqlite3.Error) as exc:
                trouble = exc
            if marked and trouble is None:
                agreement.note_committed(self.index, self.runs_dir, run_id)
        if trouble is None:
            return run_dir, None
        return run_dir, trouble.message if isinstance(trouble, StoreError) else str(trouble)

    def _forget(self, run_id: str) -> None:
        self.index.forget_run(run_id)

    def check(self, progress: Callable[[int, int], None] | None = None) -> CheckReport:
        """Every file and pack read back (:meth:`RunStore.check`), and every run's file list checked against its
        manifest and the index: a list emptied, deleted or cut short is damage, named with its run, as is a FIFO,
        link or folder in place of its manifest or logs."""
        from xlarun.store.index_health import unreadable_pages
        from xlarun.store.integrity import file_list_problems, metadata_problems

        report = super().check(progress)
        report.damaged[:0] = file_list_problems(self, self.index) + metadata_problems(self)
        if (pages := unreadable_pages(self.index.conn)) is not None:
            report.damaged.append({"run": None, "path": "index.sqlite", "problem": f"{pages} (`xlarun reindex` rebuilds it)"})
        elif (damage := self.index.damage(("runs", "modules", "passes", "files"))) is not None:  # derived: reindex mends it
            report.damaged.append({"run": None, "path": "index.sqlite", "problem": damage.one_line()})
        return report

    def gc(self, discard_recoverable: bool = False, keep: frozenset[str] = frozenset()) -> GcResult:
        """:func:`xlarun.store.gc.collect_garbage`: (folders, packs, bytes freed, small packs merged, into how many). Refused while a committed run's
        file list is damaged (its blobs would look unused), and keeping every blob the index still names."""
        from xlarun.store.gc import collect_garbage
        from xlarun.store.integrity import UNREADABLE_LIST, file_list_problems, indexed_digests

        def checked() -> frozenset[str]:  # under gc's exclusive lock: a run removed meanwhile is not a damaged one
            problems = [p for p in file_list_problems(self, self.index) if p["path"] == "files.json"]  # what names blobs
            if unreadable := [p for p in problems if p["problem"].startswith(UNREADABLE_LIST)]:  # permissions, not damage
                first = unreadable[0]
                raise StoreError(
                    f"gc refuses to run: {len(unreadable)} run(s) cannot be read (run {first['run']}: {first['problem']})",
                    "nothing was deleted; run gc as a user who can read every run",
                )
            if problems:
                first = problems[0]
                raise StoreError(
                    f"gc refuses to run: {len(problems)} run(s) have a damaged file list (run {first['run']}: {first['problem']})",
                    "nothing was deleted; `xlarun check` lists them: restore the file, or `xlarun rm RUN` to give the run up",
                )
            return frozenset(indexed_digests(self.index))

        return collect_garbage(self, discard_recoverable, keep, checked)

    def close(self) -> None:
        """Close every index and pack-table connection this store opened."""
        _OPEN_STORES.discard(self)
        super().close()
        for index in self._open_indexes:
            try:
                index.close()
            except Exception:  # a connection of a finished thread
                pass
        self._open_indexes.clear()
        self._indexes = threading.local()

    # --- archiving -------------------------------------------------------------------------------

    def archiver(
        self, staging: Path, progress: Callable[[int, int], None] | None = None, workers: int | None = None
    ) -> OutputArchiver:
        """An :class:`OutputArchiver` for a run's staging folder (``start()`` before the job, ``finish()`` after).
        It hands each file it archives to :attr:`facts`, and once the job has ended parses the stage dumps beside the
        archive's threads (:mod:`xlarun.store.parse_ahead`), so indexing the run afterwards finds the parsing done."""
        from xlarun.store.archive import OutputArchiver  # writing only: reading commands never import it
        from xlarun.store.parse_ahead import ParseAhead

        return OutputArchiver(
            self, staging, progress, workers, on_archived=self.facts.prepare, index_ahead=lambda: ParseAhead(self.facts)
        )

    def archive_outputs(
        self, staging: Path, progress: Callable[[int, int], None] | None = None, workers: int | None = None
    ) -> list[StoredFile]:
        """Move every file the job wrote under ``staging`` into the blob store; return the file list.

        Module dumps are stored in packs (see ``archiver.py``). Raw files are deleted from
        staging only after every blob is safely in place. To archive while the job runs, use
        :meth:`archiver`.
        """
        return self.archiver(staging, progress, workers).finish()
