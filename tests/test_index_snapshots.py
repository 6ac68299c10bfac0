"""Snapshots named by module name only (TensorFlow's, PyTorch/XLA-on-Neuron's) join their module at index time."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from xlarun.hlo.names import decode_dump_name
from xlarun.replay import choose_replay_input
from xlarun.store.facade import LocalStore
from xlarun.store.ingest import tie_to_named_modules

from .compat_support import require_compat
from .conftest import write_spec

# a real TF function name (tensorflow-cpu 2.16.2); its snapshot file carries this name and no module id
TF_NAME = "a_inference_f_19__XlaMustCompile_true_config_proto_3175580994766145631_executor_type_11160318154034397263_.23"
TF_SNAPSHOT = f"module_{TF_NAME}.execution_0000.hlo_snapshot.pb"

Stored = namedtuple("Stored", "path")


def tied(paths: list[str]) -> dict[str, int | None]:
    return {s.path: n.module_id for s, n in tie_to_named_modules([(Stored(p), decode_dump_name(p)) for p in paths])}


def test_a_snapshot_joins_the_one_module_of_its_name():
    ids = tied([f"module_0000.{TF_NAME}.before_optimizations.txt", f"module_0000.{TF_NAME}.o", TF_SNAPSHOT,
                "module_0002.jit_g.before_optimizations.txt"])  # fmt: skip
    assert ids[TF_SNAPSHOT] == 0
    assert ids["module_0002.jit_g.before_optimizations.txt"] == 2


def test_the_real_tf_216_dump_ties_its_snapshot():
    fixture = Path(__file__).parent / "fixtures" / "names" / "other_versions.txt"
    names = [n for n in fixture.read_text().splitlines() if "a_inference_f_" in n and not n.startswith("#")]
    snapshot = next(n for n in names if n.endswith(".hlo_snapshot.pb"))
    assert tied(names)[snapshot] == 0


def test_a_name_two_modules_share_ties_to_neither():
    # one jit over two ids (xla#7193), or a function compiled twice: which one ran is not in the file name
    ids = tied(["module_0021.jit_train_step.before_optimizations.txt", "module_0023.jit_train_step.after_optimizations.txt",
                "module_jit_train_step.execution_0000.hlo_snapshot.pb"])  # fmt: skip
    assert ids["module_jit_train_step.execution_0000.hlo_snapshot.pb"] is None


def test_a_name_no_module_has_stays_alone_and_framework_files_are_never_tied():
    ids = tied(["module_0004.jit_f.before_optimizations.txt", "module_jit_g.execution_0000.hlo_snapshot.pb",
                "jax_ir/jax_ir0002_jit_f_compile.mlir", "jit_f_1732212345123/module.mlir"])  # fmt: skip
    assert ids["module_jit_g.execution_0000.hlo_snapshot.pb"] is None
    assert ids["jax_ir/jax_ir0002_jit_f_compile.mlir"] is None  # JAX's own IR is listed apart from XLA's files
    assert ids["jit_f_1732212345123/module.mlir"] is None
    neuron = tied(["module_0001.SyncTensorsGraph.387.before_optimizations.txt",
                   "module_SyncTensorsGraph.387.pid_12643.execution_7496.hlo_snapshot.pb"])  # fmt: skip
    assert neuron["module_SyncTensorsGraph.387.pid_12643.execution_7496.hlo_snapshot.pb"] == 1


def test_replay_ranks_every_snapshot_spelling_first_and_skips_unoptimized_snapshots():
    text = f"module_0000.{TF_NAME}.before_optimizations.txt"
    for snapshot in (TF_SNAPSHOT, "module_0004.jit_f.execution_0001.hlo_snapshot.pb", "module_0006.jit_f.snapshot.-18754.pb",
                     "module_SyncTensorsGraph.387.pid_12643.execution_7496.hlo_snapshot.pb"):  # fmt: skip
        choice = choose_replay_input([(text, decode_dump_name(text)), (snapshot, None)], read=lambda p: HLO)
        assert (choice.path, choice.input_kind) == (snapshot, "snapshot")
        assert choose_replay_input([(text, None), (snapshot, decode_dump_name(snapshot))], read=lambda p: HLO).path == snapshot
    # an HloUnoptimizedSnapshot is a different proto that replay cannot read: the text dump is replayed instead
    unoptimized = "module_0006.jit__reduce_sum.execution_0000.hlo_unoptimized_snapshot.pb"
    choice = choose_replay_input([(unoptimized, decode_dump_name(unoptimized)), (text, None)], read=lambda p: HLO)
    assert (choice.path, choice.input_kind) == (text, "text-large-constants")


HLO = b"""HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

ENTRY %main (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  ROOT %n = f32[2]{0} negate(f32[2]{0} %p)
}
"""


def make_run(store: LocalStore, files: dict[str, bytes]) -> str:
    run_id, staging = store.begin_run()
    for rel, data in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": '{"name": "t", "status": "succeeded"}'})
    return run_id


def test_the_index_lists_a_tied_snapshot_under_its_module_and_replay_picks_it(tmp_path):
    store = LocalStore.open(tmp_path / "store")
    run_id = make_run(store, {f"dump/module_0000.{TF_NAME}.before_optimizations.txt": HLO, f"dump/{TF_SNAPSHOT}": b"\x0a\x00",
                              "dump/module_0001.jit_h.before_optimizations.txt": HLO.replace(b"HloModule m", b"HloModule jit_h"),
                              "dump/module_0003.jit_h.before_optimizations.txt": HLO,
                              "dump/module_jit_h.execution_0000.hlo_snapshot.pb": b"\x0a\x00"})  # fmt: skip
    module = store.index.module(run_id, 0)
    assert TF_SNAPSHOT in [f.path for f in module.files]
    assert next(f for f in module.files if f.path == TF_SNAPSHOT).kind == "snapshot"
    assert module.n_files == 2
    choice = choose_replay_input([(f.path, f) for f in module.files], read=lambda p: store.read_file(run_id, p))
    assert (choice.path, choice.input_kind) == (TF_SNAPSHOT, "snapshot")
    # two modules named jit_h: the snapshot belongs to neither, and the run still lists it
    for module_id in (1, 3):
        assert "module_jit_h.execution_0000.hlo_snapshot.pb" not in [f.path for f in store.index.module(run_id, module_id).files]
    row = store.index.conn.execute(
        "SELECT module_id FROM files WHERE run_id=? AND path=?", (run_id, "module_jit_h.execution_0000.hlo_snapshot.pb")
    ).fetchone()
    assert row is not None and row[0] is None


TF_JOB = """
import tensorflow as tf

@tf.function(jit_compile=True)
def f(x, y):
    return tf.reduce_sum(tf.sin(x) @ y + 1.0)

x = tf.reshape(tf.range(64, dtype=tf.float32) / 64.0, (8, 8))
print(float(f(x, x)))
"""


def _capture_tf_and_replay_its_snapshot(cli, folder, python_line: str, dump_line: str) -> None:
    spec = write_spec(
        folder,
        f"name: tf-snapshot\nscript: job.py\nframework: tensorflow\n{python_line}timeout: 5m\n"
        f"dump:\n  formats: [text, proto]\n  snapshots: true\n{dump_line}logging:\n  min_log_level: 1\n",
        TF_JOB,
    )
    store_root = folder / "store"
    captured = cli("capture", spec, "--store", store_root)
    assert captured.exit_code == 0, captured.output
    store = LocalStore.open(store_root)
    (run_id,) = store.index.conn.execute("SELECT run_id FROM runs").fetchone()
    rows = store.index.conn.execute("SELECT path, module_id FROM files WHERE run_id=? AND kind='snapshot'", (run_id,)).fetchall()
    assert len(rows) == 1, rows
    ((snapshot, module_id),) = rows
    assert snapshot.startswith("module_a_inference_f_") and ".execution_0000." in snapshot and module_id is not None
    module = store.index.module(run_id, module_id)
    assert snapshot == f"module_{module.name}.execution_0000.hlo_snapshot.pb"  # tied by its whole dotted name

    shown = cli("show", f"module_{module_id:04d}", "--store", store_root, "--json")
    assert shown.exit_code == 0 and snapshot in [f["path"] for f in json.loads(shown.stdout)["files"]]
    replayed = cli("replay", f"module_{module_id:04d}", "--store", store_root, "--json")
    result = json.loads(replayed.stdout)
    assert (result["input_kind"], result["arguments"], result["verdict"]) == ("snapshot", "snapshot", "match"), result
    assert result["source"].endswith(snapshot)


@pytest.mark.slow
@pytest.mark.tf
def test_a_real_tf_221_snapshot_is_listed_under_its_module_and_replayed_with_its_arguments(tmp_path, cli):
    """TF2 jit_compile with dump.snapshots, captured for real with the project venv's TensorFlow 2.21. Its XLA
    segfaults in DumpArguments (HloProto::MergeImpl on an executable without its HLO proto) unless the executable
    keeps its HLO, which xlarun asks for with --xla_embed_ir_in_executable (checked 2026-11-23)."""
    pytest.importorskip("tensorflow")
    _capture_tf_and_replay_its_snapshot(cli, tmp_path / "job", "", "")


@pytest.mark.slow
@pytest.mark.tf
def test_a_real_tf_216_snapshot_is_listed_under_its_module_and_replayed_with_its_arguments(tmp_path, cli):
    """The same with tensorflow-cpu 2.16.2 (the compat venv), which dumps snapshots without help but lacks
    --xla_dump_large_constants (hence large_constants: false)."""
    python = require_compat("tf-2.16.2")
    _capture_tf_and_replay_its_snapshot(cli, tmp_path / "job", f"python: {python}\n", "  large_constants: false\n")
