"""recover.py: what a killed capture left becomes a run marked incomplete (more in tests/test_store.py)."""

from __future__ import annotations

import json

from xlarun.capture.recover import recover_runs
from xlarun.store.archive import write_archived_list
from xlarun.store.facade import LocalStore
from xlarun.store.packs import content_digest
from xlarun.store.rows import StoredFile


def test_a_listed_file_whose_blob_is_missing_is_left_out_with_a_note(tmp_path):
    """It is left out of the run with a note naming it, never dropped silently."""
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    (staging / "spec.resolved.json").write_text(json.dumps({"spec": {"name": "killed"}, "script": "/x/job.py"}))
    (staging / "dump" / "kept.txt").write_bytes(b"kept")
    kept = store.archive_outputs(staging)
    store.wait_for_discards()
    lost = StoredFile("lost.txt", content_digest(b"never stored"), 12)  # listed, but the store lacks its bytes
    write_archived_list(staging, [*kept, lost], [])
    (staging / "owner.pid").write_text("999999999")  # the capturing process is gone

    [made] = recover_runs(LocalStore.open(store.root))
    assert made.error is None and made.status == "incomplete" and made.files == 1
    assert [(n.path, n.archived, n.why) for n in made.notes] == [
        ("lost.txt", False, "listed as archived by the killed capture, but its blob is missing"),
    ]
    fresh = LocalStore.open(store.root)
    assert [f.path for f in fresh.stored_files(run_id)] == ["kept.txt"] and fresh.read_file(run_id, "kept.txt") == b"kept"
    manifest = fresh.manifest(run_id)
    assert manifest["files"] == 1 and {"path": "lost.txt", "archived": False, "why": made.notes[0].why} in manifest["file_notes"]


def test_a_finished_capture_keeps_what_the_store_holds_and_notes_what_it_lost(tmp_path):
    """A capture killed just before its commit is never committed listing a file whose blob is missing: the
    file is left out, and the run says so."""
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    (staging / "dump" / "kept.txt").write_bytes(b"kept")
    kept = store.archive_outputs(staging)
    store.wait_for_discards()
    listed = [*kept, StoredFile("lost.txt", content_digest(b"never stored"), 12)]
    (staging / "manifest.json").write_text(
        json.dumps({"run_id": run_id, "name": "whole", "status": "succeeded", "files": 2, "dump_bytes": 16})
    )
    (staging / "files.json").write_text(json.dumps([{"path": f.path, "digest": f.digest, "size": f.size} for f in listed]))
    (staging / "owner.pid").write_text("999999999")

    [made] = recover_runs(LocalStore.open(store.root))
    assert made.error is None and made.status == "succeeded" and made.files == 1
    fresh = LocalStore.open(store.root)
    assert [f.path for f in fresh.stored_files(run_id)] == ["kept.txt"]
    manifest = fresh.manifest(run_id)
    assert (manifest["files"], manifest["dump_bytes"]) == (1, 4)
    assert manifest["file_notes"] == [
        {"path": "lost.txt", "archived": False, "why": "listed as archived by the killed capture, but its blob is missing"}
    ]
    assert fresh.check().damaged == []
