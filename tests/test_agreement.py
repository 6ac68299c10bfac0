"""The index's agreement with runs/ noted by the writer that changed runs/ (store/agreement.py): a capture into a
settled store lists nothing, nor does the first reader after it; a writer that died half-way sends the next reader to
list, even where runs/ looks unchanged."""

from __future__ import annotations

import json
import os
import time

import pytest

from xlarun.store import agreement
from xlarun.store.facade import LocalStore
from xlarun.store.index import Index
from xlarun.store.locks import writers_turn

from .synthetic_store import archive_run, module_dumps

RUNS = ["20260101-000000-aa", "20260101-000001-bb"]


def commit(store: LocalStore, run_id: str) -> None:
    """Commit a run the way capture, import and recovery do (:meth:`LocalStore.commit_indexed`)."""
    run_id, staging = store.begin_run(run_id)
    (staging / "dump").mkdir(exist_ok=True)
    for name, text in module_dumps(1, f"jit_{run_id[-2:]}").items():
        (staging / "dump" / name).write_text(text)
    files = store.archive_outputs(staging)
    manifest = {"name": "mlp", "kind": "capture", "status": "succeeded", "exit_code": 0, "backend": "local"}
    _folder, trouble = store.commit_indexed(run_id, staging, files, {"manifest.json": json.dumps(manifest)})
    assert trouble is None


@pytest.fixture
def settled(tmp_path, monkeypatch):
    """A store of two runs whose agreement a reader noted; returns it and the list of listings made since."""
    store = LocalStore.open(tmp_path / "store")
    for run_id in RUNS:
        archive_run(store, module_dumps(1, "jit_a"), run_id=run_id)
    store.close()
    then = time.time() - 60
    os.utime(store.runs_dir, (then, then))
    LocalStore.open(store.root).index.close()  # a reader lists, finds them agreeing and notes it
    listed: list[str] = []
    real = LocalStore.run_ids
    monkeypatch.setattr(LocalStore, "run_ids", lambda self: listed.append("listed") or real(self))
    return store, listed


def reader(store: LocalStore) -> list[str]:
    opened = LocalStore.open(store.root)
    try:
        return [r.run_id for r in opened.index.runs()]
    finally:
        opened.close()


def test_a_capture_notes_the_agreement_so_neither_it_nor_the_next_reader_lists(settled):
    store, listed = settled
    writer = LocalStore.open(store.root)
    commit(writer, "20260101-000002-cc")
    writer.close()
    assert listed == []  # the capture read no listing of runs/
    assert reader(store) == [*RUNS, "20260101-000002-cc"] and listed == []  # nor did the first reader after it
    index = Index.open(store.root / "index.sqlite")
    assert agreement.pending(index) == [] and agreement.agreed(index, store.runs_dir)
    index.close()


def test_a_writer_that_died_between_its_rename_and_its_index_rows_is_found_by_the_next_reader(settled, monkeypatch):
    store, listed = settled
    writer = LocalStore.open(store.root)

    def killed(self, run_id, files=None):
        raise KeyboardInterrupt  # as a Ctrl-C there would: the run is committed, not indexed

    monkeypatch.setattr(LocalStore, "ingest", killed)
    with pytest.raises(KeyboardInterrupt):
        commit(writer, "20260101-000002-cc")
    writer.close()
    monkeypatch.undo()
    index = Index.open(store.root / "index.sqlite")
    assert agreement.pending(index) == ["20260101-000002-cc"]
    # the worst case: runs/ looks as it did when the agreement was noted (one tick of the clock, a capped link count)
    index.conn.execute(
        "UPDATE meta SET value = ? WHERE key = ?", (f"{agreement.folder_stamp(store.runs_dir)} 2", agreement.AGREED)
    )
    index.close()
    listed.clear()
    monkeypatch.setattr(LocalStore, "run_ids", lambda self: listed.append("listed") or type(self).__mro__[1].run_ids(self))
    assert reader(store) == [*RUNS, "20260101-000002-cc"] and listed != []  # the mark sent it to list
    index = Index.open(store.root / "index.sqlite")
    assert agreement.pending(index) == []  # and it removed the mark, in the writers' turn
    index.close()


def test_a_reader_leaves_a_mark_alone_while_its_writer_holds_the_turn(settled):
    store, _listed = settled
    index = Index.open(store.root / "index.sqlite")
    assert agreement.mark_pending(index, "20260101-000009-zz")
    with writers_turn(store.root) as ours:  # a writer half-way through its commit
        assert ours
        assert reader(store) == RUNS  # it lists (the mark says runs/ may be changing) but cannot take the turn
        assert agreement.pending(index) == ["20260101-000009-zz"]
    assert reader(store) == RUNS and agreement.pending(index) == []  # the writer is gone: the next reader removes it
    index.close()


def test_a_removal_takes_the_writers_turn(settled):
    store, _listed = settled
    remover = LocalStore.open(store.root)
    with writers_turn(store.root) as ours:
        assert ours
        with writers_turn(store.root, wait=False) as second:
            assert not second  # one turn at a time, even in one process (each open takes its own lock)
    remover.delete_run(RUNS[1])
    remover.close()
    assert reader(store) == [RUNS[0]]
