"""recover.py: what a killed capture left becomes a run marked incomplete (more in tests/test_store.py)."""

from __future__ import annotations

import json

from xlarun.archiver import write_archived_list
from xlarun.blobs import content_digest
from xlarun.recover import recover_runs
from xlarun.store import Store, StoredFile


def test_a_listed_file_whose_blob_is_missing_is_left_out_with_a_note(tmp_path):
    """It used to vanish from the run without a note: the list was filtered before the notes were made from it."""
    store = Store.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    (staging / "spec.resolved.json").write_text(json.dumps({"spec": {"name": "killed"}, "script": "/x/job.py"}))
    (staging / "dump" / "kept.txt").write_bytes(b"kept")
    kept = store.archive_outputs(staging)
    store.wait_for_discards()
    lost = StoredFile("lost.txt", content_digest(b"never stored"), 12)  # listed, but the store lacks its bytes
    write_archived_list(staging, [*kept, lost], [])
    (staging / "owner.pid").write_text("999999999")  # the capturing process is gone

    [made] = recover_runs(Store.open(store.root))
    assert made.error is None and made.status == "incomplete" and made.files == 1
    assert [(n.path, n.archived, n.why) for n in made.notes] == [
        ("lost.txt", False, "listed as archived by the killed capture, but its blob is missing"),
    ]
    fresh = Store.open(store.root)
    assert [f.path for f in fresh.stored_files(run_id)] == ["kept.txt"] and fresh.read_file(run_id, "kept.txt") == b"kept"
    manifest = fresh.manifest(run_id)
    assert manifest["files"] == 1 and {"path": "lost.txt", "archived": False, "why": made.notes[0].why} in manifest["file_notes"]
