"""The run store: content addressing, atomic commit, export, gc, and survival of kills."""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from xlarun.errors import InputError, StoreError
from xlarun.store import Store, new_run_id


def make_run(store: Store, files: dict[str, bytes], manifest: str = '{"name": "t", "status": "succeeded"}') -> str:
    run_id, staging = store.begin_run()
    for rel, data in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    stored = store.archive_outputs(staging)
    store.commit_run(run_id, staging, stored, {"manifest.json": manifest})
    return run_id


def test_run_ids_sort_by_time():
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id())


def test_identical_files_are_stored_once_across_runs(tmp_path):
    store = Store.open(tmp_path / "s")
    same = b"HloModule m\n" * 1000
    first = make_run(store, {"dump/module_0000.a.txt": same, "dump/module_0001.b.txt": b"other"})
    second = make_run(store, {"dump/module_0000.a.txt": same})
    assert len(store.blobs.pack_names()) == 1  # the second run added nothing
    assert store.read_file(first, "module_0000.a.txt") == same
    assert store.read_file(second, "module_0000.a.txt") == same
    assert sum(store.blobs.pack_path(n).stat().st_size for n in store.blobs.pack_names()) < len(same) // 10  # zstd on repetitive HLO text


def test_logical_paths_keep_output_folders(tmp_path):
    store = Store.open(tmp_path / "s")
    run_id = make_run(store, {"dump/x.txt": b"1", "tf_graphs/mark_for_compilation.pbtxt": b"2", "dump/sub/module.mlir": b"3"})
    assert sorted(f.path for f in store.stored_files(run_id)) == ["sub/module.mlir", "tf_graphs/mark_for_compilation.pbtxt", "x.txt"]


def test_export_gives_back_exact_bytes_and_names(tmp_path):
    store = Store.open(tmp_path / "s")
    payload = {f"dump/module_{i:04d}.jit_f.before_optimizations.txt": os.urandom(1000 + i) for i in range(20)}
    payload["tf_graphs/before_mark_for_compilation_1.pbtxt"] = b"node {}\n"
    run_id = make_run(store, payload)
    count = store.export(run_id, tmp_path / "out", with_logs=False)
    assert count == 21
    for rel, data in payload.items():
        target = tmp_path / "out" / rel.removeprefix("dump/")
        assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_export_refuses_a_non_empty_folder(tmp_path):
    store = Store.open(tmp_path / "s")
    run_id = make_run(store, {"dump/a.txt": b"a"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        store.export(run_id, tmp_path / "out")


def test_a_staging_run_is_invisible_until_committed(tmp_path):
    store = Store.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    (staging / "dump" / "a.txt").write_bytes(b"a")
    assert store.run_ids() == []
    store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": "{}"})
    assert store.run_ids() == [run_id]
    assert not staging.exists()


def test_gc_removes_abandoned_staging_and_unused_blobs(tmp_path):
    store = Store.open(tmp_path / "s")
    keep = make_run(store, {"dump/a.txt": b"keep me"})
    doomed = make_run(store, {"dump/b.txt": b"delete me"})
    store.delete_run(doomed)
    _, abandoned = store.begin_run()
    (abandoned / "owner.pid").write_text("999999999")  # a capture killed with -9
    folders, blobs, freed = store.gc()
    assert (folders, blobs) == (1, 1) and freed > 0
    assert store.run_ids() == [keep]
    assert store.read_file(keep, "a.txt") == b"keep me"


def test_opening_something_else_is_refused(tmp_path):
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "file").write_text("x")
    with pytest.raises(StoreError, match="not an xlarun store"):
        Store.open(tmp_path / "notastore")
    with pytest.raises(StoreError, match="no xlarun store"):
        Store.open(tmp_path / "absent", create=False)


def test_missing_blob_is_a_clear_error(tmp_path):
    store = Store.open(tmp_path / "s")
    run_id = make_run(store, {"dump/a.txt": b"a"})
    for blob in (tmp_path / "s" / "blobs").glob("*/*.zst"):  # plain blobs and packs
        blob.unlink()
    with pytest.raises(StoreError, match="missing from the store"):
        store.read_file(run_id, "a.txt")


def test_raw_files_are_deleted_in_the_background_and_gc_clears_what_a_killed_deletion_left(tmp_path):
    store = Store.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    for i in range(50):
        (staging / "dump" / f"module_{i:04d}.m.before_optimizations.txt").write_bytes(b"HloModule m\n" * (i + 1))
    files = store.archive_outputs(staging)
    assert not (staging / "dump").exists()  # moved aside at once
    store.wait_for_discards()
    assert not list(store.staging_dir.glob(".trash-*"))
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    leftover = store.staging_dir / ".trash-1-abc"  # as an rm killed halfway leaves it
    (leftover / "0-dump").mkdir(parents=True)
    (leftover / "0-dump" / "x.txt").write_text("x")
    assert store.stale_staging() == []  # not a capture's leftover
    store.gc()
    assert not leftover.exists() and store.read_file(run_id, "module_0003.m.before_optimizations.txt") == b"HloModule m\n" * 4
