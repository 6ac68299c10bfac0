"""The run store: content addressing, atomic commit, export, gc, and survival of kills."""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from xlarun.errors import InputError, StoreError
from xlarun.store.facade import LocalStore
from xlarun.store.runs import new_run_id


def make_run(store: LocalStore, files: dict[str, bytes], manifest: str = '{"name": "t", "status": "succeeded"}') -> str:
    run_id, staging = store.begin_run()
    for rel, data in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    stored = store.archive_outputs(staging)
    store.commit_run(run_id, staging, stored, {"manifest.json": manifest})
    return run_id


def test_run_ids_sort_by_time():
    from datetime import datetime, timezone

    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", new_run_id())
    # within one second too (two imports a test ran back to back listed in either order when the digits were random)
    times = [datetime(2026, 11, 23, 10, 0, 0, us, tzinfo=timezone.utc) for us in (0, 5_000, 250_000, 500_000, 999_999)]
    ids = [new_run_id(t) for t in times]
    assert ids == sorted(ids) and len({i[:-2] for i in ids}) == len(ids)


def test_identical_files_are_stored_once_across_runs(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    same = b"HloModule m\n" * 1000
    first = make_run(store, {"dump/module_0000.a.txt": same, "dump/module_0001.b.txt": b"other"})
    second = make_run(store, {"dump/module_0000.a.txt": same})
    assert len(store.blobs.pack_names()) == 1  # the second run added nothing
    assert store.read_file(first, "module_0000.a.txt") == same
    assert store.read_file(second, "module_0000.a.txt") == same
    assert (
        sum(store.blobs.pack_path(n).stat().st_size for n in store.blobs.pack_names()) < len(same) // 10
    )  # zstd on repetitive HLO text


def test_logical_paths_keep_output_folders(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id = make_run(store, {"dump/x.txt": b"1", "tf_graphs/mark_for_compilation.pbtxt": b"2", "dump/sub/module.mlir": b"3"})
    assert sorted(f.path for f in store.stored_files(run_id)) == [
        "sub/module.mlir",
        "tf_graphs/mark_for_compilation.pbtxt",
        "x.txt",
    ]


def test_export_gives_back_exact_bytes_and_names(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    payload = {f"dump/module_{i:04d}.jit_f.before_optimizations.txt": os.urandom(1000 + i) for i in range(20)}
    payload["tf_graphs/before_mark_for_compilation_1.pbtxt"] = b"node {}\n"
    run_id = make_run(store, payload)
    count = store.export(run_id, tmp_path / "out", with_logs=False)
    assert count == 21
    for rel, data in payload.items():
        target = tmp_path / "out" / rel.removeprefix("dump/")
        assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_export_refuses_a_non_empty_folder(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id = make_run(store, {"dump/a.txt": b"a"})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not empty"):
        store.export(run_id, tmp_path / "out")


def test_a_staging_run_is_invisible_until_committed(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    (staging / "dump" / "a.txt").write_bytes(b"a")
    assert store.run_ids() == []
    store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": "{}"})
    assert store.run_ids() == [run_id]
    assert not staging.exists()


def test_gc_removes_abandoned_staging_and_unused_blobs(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    keep = make_run(store, {"dump/a.txt": b"keep me"})
    doomed = make_run(store, {"dump/b.txt": b"delete me"})
    store.delete_run(doomed)
    _, abandoned = store.begin_run()
    (abandoned / "owner.pid").write_text("999999999")  # a capture killed with -9
    folders, blobs, freed, _merged, _into = store.gc()
    assert (folders, blobs) == (1, 1) and freed > 0
    assert store.run_ids() == [keep]
    assert store.read_file(keep, "a.txt") == b"keep me"


def test_opening_something_else_is_refused(tmp_path):
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "file").write_text("x")
    with pytest.raises(StoreError, match="not an xlarun store"):
        LocalStore.open(tmp_path / "notastore")
    with pytest.raises(StoreError, match="no xlarun store"):
        LocalStore.open(tmp_path / "absent", create=False)


def test_missing_blob_is_a_clear_error(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id = make_run(store, {"dump/a.txt": b"a"})
    for blob in (tmp_path / "s" / "blobs").glob("*/*.zst"):  # plain blobs and packs
        blob.unlink()
    with pytest.raises(StoreError, match="missing from the store"):
        store.read_file(run_id, "a.txt")


def test_raw_files_are_deleted_in_the_background_and_gc_clears_what_a_killed_deletion_left(tmp_path):
    store = LocalStore.open(tmp_path / "s")
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


def test_a_small_dump_is_deleted_at_once_a_large_one_by_a_background_rm(tmp_path):
    """Starting `rm` costs more than unlinking a few files (a capture of one small module): a dump of fewer than 64
    entries goes at once, a larger one in the background, and either way nothing the run archived is lost."""
    store = LocalStore.open(tmp_path / "s")
    for count, in_background in ((3, False), (100, True)):
        run_id, staging = store.begin_run()
        for i in range(count):
            (staging / "dump" / f"module_{i:04d}.m.before_optimizations.txt").write_bytes(b"HloModule m\n" * (i + 1))
        files = store.archive_outputs(staging)
        assert bool(store._discards) == in_background, count
        assert in_background or not list(store.staging_dir.glob(".trash-*"))
        store.wait_for_discards()
        assert not list(store.staging_dir.glob(".trash-*"))
        store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
        assert store.read_file(run_id, f"module_{count - 1:04d}.m.before_optimizations.txt") == b"HloModule m\n" * count


def _killed_capture(store: LocalStore, files: dict[str, bytes], logs: str = "step 1\n") -> tuple[str, os.PathLike]:
    """A staging folder as a capture killed with -9 leaves it: spec, log, raw files, a dead owner."""
    import json

    run_id, staging = store.begin_run()
    (staging / "spec.resolved.json").write_text(
        json.dumps({"spec": {"name": "killed", "args": ["--steps", "3"]}, "script": "/x/job.py", "framework": "jax"})
    )
    (staging / "stdout.log").write_text(logs)
    for rel, data in files.items():
        (staging / rel).write_bytes(data)
    (staging / "owner.pid").write_text("999999999")
    return run_id, staging


def test_gc_keeps_what_a_killed_capture_left_and_says_so(tmp_path, cli):
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = _killed_capture(store, {"dump/a.txt": b"a"})
    _, empty = store.begin_run()
    (empty / "owner.pid").write_text("999999999")  # killed before its job wrote anything
    leftovers = {lo.run_id: lo for lo in store.leftovers()}
    assert leftovers[run_id].recoverable and leftovers[run_id].what == "1 raw file(s), 7 bytes of logs"
    assert not leftovers[empty.name].recoverable
    out = cli("gc", "--store", store.root)
    assert out.exit_code == 0
    assert f"{run_id} (1 raw file(s), 7 bytes of logs); kept: `xlarun recover` makes them runs marked incomplete" in " ".join(
        out.stderr.split()
    )
    assert "removed 1 abandoned staging folder(s)" in out.stdout
    assert staging.exists() and not empty.exists()
    assert cli("gc", "--store", store.root, "--discard-recoverable").exit_code == 0
    assert not staging.exists()


def test_gc_keeps_the_blobs_a_killed_capture_listed_as_archived(tmp_path):
    from xlarun.store.archive import write_archived_list

    store = LocalStore.open(tmp_path / "s")
    _run_id, staging = _killed_capture(store, {"dump/a.txt": b"archived before the kill"})
    files = store.archive_outputs(staging)  # archived, listed, raw files gone: then killed before the commit
    store.wait_for_discards()
    write_archived_list(staging, files, [])
    assert not (staging / "dump").exists()
    blobs = store.gc().packs
    assert blobs == 0 and store.blobs.has(files[0].digest)


def test_recover_makes_an_incomplete_run_from_raw_and_listed_files(tmp_path, cli):
    import json

    from xlarun.store.archive import write_archived_list

    store = LocalStore.open(tmp_path / "s")
    run_id, staging = _killed_capture(store, {"dump/module_0000.jit_f.before_optimizations.txt": b"HloModule jit_f\n"})
    listed = store.archive_outputs(staging)  # the first file got archived and listed...
    store.wait_for_discards()
    write_archived_list(staging, listed, [])
    (staging / "dump").mkdir()
    (staging / "dump" / "late.txt").write_bytes(b"written after")  # ...then the kill left a raw one
    out = cli("recover", "--store", store.root, "--json")
    assert out.exit_code == 0, out.output
    [made] = json.loads(out.stdout)["recovered"]
    assert made["run_id"] == run_id and made["status"] == "incomplete" and made["files"] == 2
    fresh = LocalStore.open(store.root)
    assert fresh.read_file(run_id, "module_0000.jit_f.before_optimizations.txt") == b"HloModule jit_f\n"
    assert fresh.read_file(run_id, "late.txt") == b"written after"
    manifest = fresh.manifest(run_id)
    assert (
        manifest["name"] == "killed" and manifest["command"] == ["/x/job.py", "--steps", "3"] and manifest["recovered"]["found"]
    )
    assert [r.status for r in fresh.index.runs()] == ["incomplete"]
    assert not (fresh.runs_dir / run_id / "archived.json").exists() and not (fresh.runs_dir / run_id / "owner.pid").exists()
    assert fresh.leftovers() == [] and cli("recover", "--store", store.root).stdout.strip() == "nothing to recover"


def test_recover_leaves_a_running_capture_alone(tmp_path, cli):
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()  # owned by this (live) process
    (staging / "dump" / "a.txt").write_bytes(b"a")
    assert store.leftovers() == []
    out = cli("recover", run_id, "--store", store.root)
    assert out.exit_code == 2 and f"not recovered: {run_id}" in out.stderr
    assert staging.exists() and store.run_ids() == []


def test_a_capture_killed_after_its_metadata_is_committed_whole(tmp_path):
    import json

    from xlarun.capture.recover import recover_runs

    store = LocalStore.open(tmp_path / "s")
    run_id, staging = _killed_capture(store, {"dump/a.txt": b"a"})
    files = store.archive_outputs(staging)
    (staging / "manifest.json").write_text(json.dumps({"run_id": run_id, "name": "whole", "status": "succeeded"}))
    (staging / "files.json").write_text(json.dumps([{"path": f.path, "digest": f.digest, "size": f.size} for f in files]))
    [done] = recover_runs(store)
    assert done.status == "succeeded" and store.read_file(run_id, "a.txt") == b"a"
    assert store.manifest(run_id)["recovered"]["found"] == "a finished capture killed just before its commit"


def test_a_capture_killed_between_its_manifest_and_file_list_keeps_its_manifest(tmp_path):
    import json

    from xlarun.capture.recover import recover_runs
    from xlarun.store.archive import write_archived_list

    store = LocalStore.open(tmp_path / "s")
    run_id, staging = _killed_capture(store, {"dump/a.txt": b"a"})
    files = store.archive_outputs(staging)
    store.wait_for_discards()
    write_archived_list(staging, files, [])
    (staging / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "name": "mine",
                "status": "failed",
                "exit_code": 3,
                "started": "2026-11-23T10:00:00+00:00",
                "ended": "2026-11-23T10:00:01+00:00",
                "duration_s": 1.0,
            }
        )
    )
    [done] = recover_runs(store)
    manifest = store.manifest(run_id)
    assert done.status == "failed" and manifest["exit_code"] == 3 and manifest["recovered"] and manifest["files"] == 1


def test_captures_that_draw_the_same_run_id_at_once_each_get_their_own_folder(tmp_path, monkeypatch):
    """Threads of one process (a bisect's reruns, a batch's cells) drawing the same id in the same 4 ms: the
    name is claimed by one atomic rename, the others draw again (a CI run once failed on FileExistsError)."""
    import threading

    import xlarun.store.runs as runstore

    from .conftest import at_once

    store = LocalStore.open(tmp_path / "s")
    draws = iter(["20261123-000000-0000"] * 8 + [f"20261123-000001-{i:04x}" for i in range(100)])
    lock = threading.Lock()

    def drawn(now=None):
        with lock:
            return next(draws)

    monkeypatch.setattr(runstore, "new_run_id", drawn)
    got: list[tuple[str, object]] = []
    at_once(lambda: got.append(store.begin_run()), 8)
    ids = [run_id for run_id, _staging in got]
    assert len(ids) == 8 and len(set(ids)) == 8 and "20261123-000000-0000" in ids
    assert sorted(p.name for p in store.staging_dir.iterdir()) == sorted(ids)  # no draft left behind
    assert all((staging / "owner.pid").read_text() == str(os.getpid()) for _run_id, staging in got)
    with pytest.raises(FileExistsError):
        store.begin_run("20261123-000000-0000")  # a given id (a shipped run) that is taken is not redrawn
