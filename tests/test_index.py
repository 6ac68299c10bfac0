"""The index's queries over a synthetic store: runs, modules ranked main program first, files, passes, find,
fingerprints, and the index as derived data (rebuilt from runs/ when it is lost, forgetting deleted runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xlarun.errors import XlarunError
from xlarun.store.facade import LocalStore

from .synthetic_store import SOURCE, archive_run, hlo_module, module_dumps

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
OLD, NEW, SWEEP_A, SWEEP_B = "20261102-080000-1a2b", "20261102-093000-77c1", "20261103-120000-9f00", "20261103-120001-9f01"
BATCH = "b20261103-120000-ab12"
GRAPHDEF = 'node {\n  name: "x"\n  op: "Placeholder"\n}\n'


def _mlp_files() -> dict[str, str]:
    # module ids as XLA numbers them, not in ranking order: the RNG init module has the most instructions, no matmul
    return {
        **module_dumps(1, "jit_init_params", dots=0, adds=20, optimized=False),
        **module_dumps(4, "jit_accuracy", dots=1),
        **module_dumps(7, "jit_train_step", dots=3, passes=4),
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> LocalStore:
    store = LocalStore.open(tmp_path_factory.mktemp("index") / "store")
    archive_run(
        store,
        {**module_dumps(2, "jit_sweep", dots=2)},
        run_id=SWEEP_B,
        name="sweep",
        batch_id=BATCH,
        matrix={"lr": 0.1},
        status="failed",
    )
    archive_run(store, _mlp_files(), run_id=OLD, other={"tf_graphs/mark_for_compilation.pbtxt": GRAPHDEF})
    archive_run(
        store, {**module_dumps(2, "jit_sweep", dots=2)}, run_id=SWEEP_A, name="sweep", batch_id=BATCH, matrix={"lr": 0.01}
    )
    archive_run(store, {**module_dumps(1, "jit_f", source="/elsewhere/app/model.py")}, run_id=NEW, name="other", kind="import")
    return store


def test_runs_are_listed_oldest_first_with_what_they_hold(store):
    runs = store.index.runs()
    assert [r.run_id for r in runs] == [OLD, NEW, SWEEP_A, SWEEP_B]  # archived in another order
    old = runs[0]
    files = store.stored_files(OLD)
    assert (old.name, old.kind, old.status, old.framework) == ("mlp", "capture", "succeeded", "jax")
    assert old.n_modules == 3  # the TF GraphDef is a file of the run, not a module
    assert old.n_files == len(files) == 1 + 3 + (3 + 4) + 1  # init (before only), accuracy, train step (4 passes), the graph
    assert old.dump_bytes == sum(f.size for f in files) == sum(len(t.encode()) for t in _mlp_files().values()) + len(GRAPHDEF)
    assert old.batch_id is None and old.matrix is None
    assert (runs[3].status, runs[3].exit_code, runs[3].matrix, runs[3].batch_id) == ("failed", 1, {"lr": 0.1}, BATCH)


def test_runs_filter_by_batch_name_and_kind(store):
    index = store.index
    assert [r.run_id for r in index.runs(batch_id=BATCH)] == [SWEEP_A, SWEEP_B]
    assert [r.run_id for r in index.runs(name="mlp")] == [OLD]
    assert [r.run_id for r in index.runs(kind="import")] == [NEW]
    assert [r.run_id for r in index.runs(name="sweep", batch_id=BATCH)] == [SWEEP_A, SWEEP_B]
    assert index.runs(name="no-such-spec") == [] and index.runs(batch_id="b20000101-000000-0000") == []
    assert index.batch_ids() == [BATCH]


def test_an_unknown_run_or_module_says_what_to_do(store):
    with pytest.raises(XlarunError, match="run 20990101-000000-0000 is not indexed") as no_run:
        store.index.run("20990101-000000-0000")
    assert "xlarun reindex" in no_run.value.hint
    with pytest.raises(XlarunError, match=f"run {OLD} has no module 99") as no_module:
        store.index.module(OLD, 99)
    assert "xlarun modules" in no_module.value.hint


def test_modules_are_ranked_main_program_first(store):
    modules = store.index.modules(OLD)
    # by compute ops (dots), not by size: jit_init_params has the most instructions and comes last
    assert [(m.name, m.module_id, m.compute_ops, m.instr_before) for m in modules] == [
        ("jit_train_step", 7, 3, 14),
        ("jit_accuracy", 4, 1, 12),
        ("jit_init_params", 1, 0, 31),
    ]
    assert [m.label for m in modules] == ["module_0007.jit_train_step", "module_0004.jit_accuracy", "module_0001.jit_init_params"]
    assert modules[0].ref == f"{OLD}/module_0007"


def test_a_module_summary_holds_its_counts_stages_and_signature(store):
    main = store.index.module(OLD, 7)
    assert main.stages == ["before_optimizations", "cpu_after_optimizations"] and main.backend == "cpu"
    assert (main.instr_before, main.instr_after) == (14, 5)  # the optimized dump fuses the elementwise work
    assert main.opcodes_before == {
        "parameter": 4,
        "dot": 3,
        "tanh": 1,
        "constant": 2,
        "broadcast": 1,
        "multiply": 1,
        "reduce": 1,
        "add": 1,
    }
    assert main.opcodes_after == {"parameter": 3, "tanh": 1, "fusion": 1}
    assert main.entry_signature == "(f32[4,4], f32[4,4]) -> f32[]"
    assert (main.n_files, main.n_pass_dumps, main.elided_constants, main.parse_error) == (7, 4, False, None)
    assert main.hlo_bytes == len(hlo_module("jit_train_step", dots=3).encode())
    # a module dumped before optimizations only (a compile that failed, or an old dump) has no after-stage facts
    init = store.index.module(OLD, 1)
    assert (init.stages, init.instr_after, init.opcodes_after, init.backend) == (["before_optimizations"], None, {}, None)


def test_a_modules_files_list_stage_dumps_then_passes_in_step_order(store):
    main = store.index.module(OLD, 7)
    paths = [f.path for f in main.files]
    assert paths[:3] == [
        "module_0007.jit_train_step.before_optimizations.txt",
        "module_0007.jit_train_step.cpu_after_optimizations-buffer-assignment.txt",
        "module_0007.jit_train_step.cpu_after_optimizations.txt",
    ]
    assert [f.step for f in main.files[3:]] == [0, 1, 2, 3] and {f.kind for f in main.files[3:]} == {"pass"}
    by_path = {f.path: f for f in main.files}
    assert by_path["module_0007.jit_train_step.cpu_after_optimizations-buffer-assignment.txt"].kind == "buffer-assignment"
    assert store.read_file(OLD, paths[0]).decode() == hlo_module("jit_train_step", dots=3)
    # the pass timeline: which pass ran at each step, and the instruction count it left
    assert [(p.step, p.pipeline, p.after_pass, p.before_pass, p.instr_count) for p in main.passes] == [
        (0, "simplification", "pipeline-start", "algsimp", 14),
        (1, "HLO_passes_through_layout_assignment", "transpose-folding", "cse", 14),
        (2, "HLO_passes_through_layout_assignment", "layout-assignment", "sub-byte-size-setter", 14),
        (3, "cpu-pipeline", "fusion", "cse", 5),
    ]
    assert store.index.module(OLD, 7, with_files=False).files == []


def test_run_files_include_files_of_no_module(store):
    files = {f.path: f for f in store.index.run_files(OLD)}
    graph = files["tf_graphs/mark_for_compilation.pbtxt"]
    assert (graph.kind, graph.format, graph.stage, graph.step) == ("tf-graph", "pbtxt", None, None)
    assert sorted(files) == sorted(f.path for f in store.stored_files(OLD))
    assert store.index.files_outside_modules(OLD) == [("tf-graph", 1)]
    assert store.index.files_outside_modules(NEW) == []


def test_find_matches_opcodes_exactly_and_names_as_substrings(store):
    index = store.index
    hits = index.find("dot", kinds=("opcode",), run_id=OLD)
    assert [(h.module_name, h.kind, h.matches) for h in hits] == [
        ("jit_accuracy", "opcode", ["dot"]),
        ("jit_train_step", "opcode", ["dot"]),
    ]
    assert index.find("do", kinds=("opcode",)) == []  # an opcode is a whole word
    by_op_name = index.find("dot_general", kinds=("op_name",), run_id=OLD)
    assert {(h.module_name, tuple(h.matches)) for h in by_op_name} == {
        ("jit_accuracy", ("jit(accuracy)/dot_general",)),
        ("jit_train_step", ("jit(train_step)/dot_general",)),
    }
    assert index.find("dot_general", kinds=("op_name",), exact=True) == []
    assert [h.module_name for h in index.find("jit(train_step)/dot_general", kinds=("op_name",), exact=True)] == [
        "jit_train_step"
    ]
    assert index.find("Dot_General", kinds=("op_name",)) == []  # case-sensitive


def test_find_by_source_location_across_runs_and_within_one(store):
    index = store.index
    everywhere = index.find("model.py:10", kinds=("source",))
    assert {(h.run_id, h.module_name) for h in everywhere} == {
        (OLD, "jit_train_step"),
        (OLD, "jit_accuracy"),
        (OLD, "jit_init_params"),
        (NEW, "jit_f"),
        (SWEEP_A, "jit_sweep"),
        (SWEEP_B, "jit_sweep"),
    }
    [elsewhere] = index.find("/elsewhere/app/", kinds=("source",))
    assert (elsewhere.run_id, elsewhere.module_name, elsewhere.matches) == (
        NEW,
        "jit_f",
        ["/elsewhere/app/model.py:10", "/elsewhere/app/model.py:11", "/elsewhere/app/model.py:12"],
    )
    [main] = index.find(SOURCE, kinds=("source",), run_id=OLD, limit_matches=2)[2:]  # ordered by module id: 1, 4, 7
    assert main.module_name == "jit_train_step" and main.matches == [f"{SOURCE}:10", f"{SOURCE}:11"]


def test_find_in_every_kind_reports_each_kind_it_matched(store):
    hits = store.index.find("tanh", run_id=OLD)
    kinds = {(h.module_name, h.kind) for h in hits}
    assert ("jit_train_step", "opcode") in kinds and ("jit_train_step", "op_name") in kinds
    assert ("jit_train_step", "name") in kinds  # the instruction tanh.30


def test_same_computation_has_one_fingerprint_whatever_its_id_or_source_path(tmp_path):
    store = LocalStore.open(tmp_path / "store")
    first = archive_run(store, module_dumps(4, "jit_f"), run_id=OLD)
    moved = archive_run(store, module_dumps(12, "jit_f", source="/elsewhere/app/model.py"), run_id=NEW)
    changed = archive_run(store, module_dumps(4, "jit_f", scale=4.0), run_id=SWEEP_A)
    fp = {run: store.index.module(run, mid).fingerprint for run, mid in ((first, 4), (moved, 12), (changed, 4))}
    assert len(fp[first]) == 64 and fp[first] == fp[moved]
    assert fp[changed] != fp[first]  # one constant changed: another computation


def test_fingerprints_of_real_jax_dumps(tmp_path):
    """fixtures/hlo/fp*: the same jit from two paths (module 0004 and, after 3 other jits, 0012), and with a constant changed."""
    store = LocalStore.open(tmp_path / "store")
    runs = {}
    for folder, run_id in (("fp", OLD), ("fp_elsewhere", NEW), ("fp_changed", SWEEP_A)):
        files = {p.name: p.read_bytes() for p in (FIXTURES / folder).iterdir()}
        archive_run(store, files, run_id=run_id)
        runs[folder] = store.index.modules(run_id)
    a, b, c = (runs[folder][0] for folder in ("fp", "fp_elsewhere", "fp_changed"))
    assert (a.module_id, b.module_id, c.module_id) == (4, 12, 4)
    assert a.name == b.name == c.name == "jit_f"
    assert a.fingerprint == b.fingerprint and a.fingerprint != c.fingerprint
    assert a.opcodes_before["dot"] == 1 and a.stages == ["before_optimizations", "cpu_after_optimizations"]


def test_a_lost_index_is_rebuilt_from_the_runs(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store.root, copy, ignore=shutil.ignore_patterns("index.sqlite*"))
    rebuilt = LocalStore.open(copy)
    assert [json.dumps(r.__dict__, sort_keys=True) for r in rebuilt.index.runs()] == [
        json.dumps(r.__dict__, sort_keys=True) for r in store.index.runs()
    ]
    assert rebuilt.index.modules(OLD) == store.index.modules(OLD)
    assert rebuilt.index.module(OLD, 7).passes == store.index.module(OLD, 7).passes
    rebuilt.close()


def test_a_deleted_run_leaves_no_rows(tmp_path):
    store = LocalStore.open(tmp_path / "store")
    keep = archive_run(store, module_dumps(1, "jit_kept"), run_id=OLD)
    gone = archive_run(store, module_dumps(1, "jit_gone", dots=2), run_id=NEW)
    store.delete_run(gone)
    index = store.index
    assert [r.run_id for r in index.runs()] == [keep]
    assert index.modules(gone) == [] and index.run_files(gone) == []
    assert {h.module_name for h in index.find("dot", kinds=("opcode",))} == {"jit_kept"}


def test_a_run_removed_behind_the_index_is_forgotten_on_reconcile(tmp_path):
    store = LocalStore.open(tmp_path / "store")
    archive_run(store, module_dumps(1, "jit_a"), run_id=OLD)
    archive_run(store, module_dumps(1, "jit_b"), run_id=NEW)
    shutil.rmtree(store.runs_dir / NEW)  # as a user might, by hand
    store.close()
    index = LocalStore.open(store.root).index  # the next command to open the store
    assert [r.run_id for r in index.runs()] == [OLD]
    assert index.modules(NEW) == [] and index.run_files(NEW) == []
    assert {h.run_id for h in index.find("dot", kinds=("opcode",))} == {OLD}


def test_a_reader_lists_the_runs_only_when_runs_or_the_index_changed(tmp_path, monkeypatch):
    """Listing runs/ and the index's runs to compare them took more than the rest of `xlarun runs` at 10,000 runs:
    a reader compares them only when runs/ or the index's count of runs changed since a reader found them agreeing."""
    import os
    import time

    from xlarun.store.index import Index

    store = LocalStore.open(tmp_path / "store")
    archive_run(store, module_dumps(1, "jit_a"), run_id=OLD)
    archive_run(store, module_dumps(1, "jit_b"), run_id=NEW)
    store.close()
    listed: list[str] = []
    real = LocalStore.run_ids
    monkeypatch.setattr(LocalStore, "run_ids", lambda self: listed.append("listed") or real(self))

    def settle():
        then = time.time() - 60
        os.utime(store.runs_dir, (then, then))

    def reader_sees() -> tuple[list[str], bool]:
        """What the next command to open the store sees, and whether it listed runs/ to see it."""
        before = len(listed)
        opened = LocalStore.open(store.root)
        try:
            return [r.run_id for r in opened.index.runs()], len(listed) > before
        finally:
            opened.close()

    settle()
    assert reader_sees() == ([OLD, NEW], True)  # compared, found agreeing, noted
    assert reader_sees() == ([OLD, NEW], False)  # nothing changed: not listed
    behind = Index.open(store.root / "index.sqlite")
    behind.forget_run(NEW)  # rows lost behind the readers' back (a writer killed between commit and index)
    behind.close()
    assert reader_sees() == ([OLD, NEW], True)  # the count changed: listed, indexed again
    settle()
    assert reader_sees() == ([OLD, NEW], True)  # noted again
    assert reader_sees() == ([OLD, NEW], False)
    shutil.rmtree(store.runs_dir / NEW)  # by hand
    assert reader_sees() == ([OLD], True)
    assert reader_sees() == ([OLD], True)  # runs/ changed a moment ago: not noted (racy), listed again


def test_threads_opening_a_new_index_at_once_all_get_it(tmp_path):
    """Switching a new SQLite file to WAL takes a lock SQLite does not wait for: two cells of a batch opening a fresh
    store's index together failed one of them with "database is locked" (about one pair in twelve; CI lost a
    batch cell's commit to it). Each open now waits the lock out."""
    from xlarun.store.index import Index

    from .conftest import at_once

    failures: list[str] = []
    for pair in range(60):
        path = tmp_path / f"index-{pair}.sqlite"

        def open_it(path=path):
            try:
                Index.open(path).close()
            except XlarunError as exc:
                failures.append(exc.one_line())

        at_once(open_it, 2)
    assert failures == []


def test_index_trouble_at_the_commit_never_stops_it(tmp_path, monkeypatch):
    """The index is derived data: a capture that cannot open it still commits its run, says so, and the next
    command's first look at the index indexes the run."""
    from xlarun.capture.launch import capture
    from xlarun.errors import StoreError

    from .conftest import write_spec

    spec = write_spec(tmp_path, "name: unindexed\nscript: job.py\n", "print('hi')\n")
    store = LocalStore.open(tmp_path / "s")

    def locked(self):
        raise StoreError(f"cannot open the index {self.root / 'index.sqlite'}: database is locked", "try again")

    monkeypatch.setattr(LocalStore, "open_index", locked)
    monkeypatch.setattr(LocalStore, "ingest", lambda self, run_id, files=None: locked(self))
    result = capture(spec, store)
    assert result.status.value == "succeeded" and result.modules == []
    assert any(f"run {result.run_id} is committed but not yet indexed (cannot open the index" in w for w in result.warnings)
    monkeypatch.undo()
    again = LocalStore.open(tmp_path / "s")
    assert [r.run_id for r in again.index.runs()] == [result.run_id] == again.run_ids()


def test_a_checked_index_is_not_checked_again_until_a_statement_changes_its_tables(tmp_path, monkeypatch):
    """Every command opens the index; its tables are checked whole (some 2 ms) only when SQLite's schema cookie moved
    since the last check, so a column renamed or a table dropped by hand after a check is still found."""
    import sqlite3

    import xlarun.store.index as index_module
    from xlarun.store.index_health import DamagedIndex, check_columns_and_id, checked_stamp

    path = tmp_path / "index.sqlite"
    index_module.Index.open(path).close()
    conn = sqlite3.connect(path)
    stamp = conn.execute("SELECT value FROM meta WHERE key = 'checked_schema'").fetchone()[0]
    assert stamp == checked_stamp(conn, index_module.SCHEMA)
    conn.close()

    checks: list[Path] = []
    monkeypatch.setattr(index_module, "check_columns_and_id", lambda c, p, s: (checks.append(p), check_columns_and_id(c, p, s)))
    index_module.Index.open(path).close()
    assert checks == []  # the stamp holds: nothing checked
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE modules RENAME COLUMN name TO nom")  # by hand, after the check
    conn.close()
    with pytest.raises(DamagedIndex, match="modules has no column name"):
        index_module.Index.open(path)
    assert checks == [path]
