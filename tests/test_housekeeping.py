"""``xlarun check``, ``gc`` and ``reindex`` on a copy of a real capture (the session's stays untouched)."""

from __future__ import annotations

import json
import shutil

import pytest

from xlarun.store.facade import LocalStore


@pytest.fixture
def store_copy(jax_run, tmp_path):
    store, result = jax_run
    store.wait_for_discards()  # the capture's raw files are deleted in the background: not while copying
    store.close()
    root = tmp_path / "store"
    shutil.copytree(store.root, root)
    return LocalStore.open(root), result


@pytest.mark.slow
def test_check_reads_back_every_file_of_a_sound_store(cli, store_copy):
    store, result = store_copy
    out = cli("check", "--store", store.root, "--json")
    assert out.exit_code == 0, out.stdout
    report = json.loads(out.stdout)
    assert report["damaged"] == [] and report["runs"] == 1
    assert report["files"] == len(store.stored_files(result.run_id)) and report["packs"] >= 1
    text = cli("check", "--store", store.root)
    assert text.exit_code == 0 and text.stdout.strip().endswith("all sound")


@pytest.mark.slow
def test_check_names_each_file_a_damaged_pack_held(cli, store_copy):
    store, result = store_copy
    pack = max(store.blobs.pack_names(), key=lambda n: store.blobs.pack_path(n).stat().st_size)
    held = {digest for digest, _offset, _length in store.blobs._table.members_of(pack)}
    raw = bytearray(store.blobs.pack_path(pack).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    store.blobs.pack_path(pack).write_bytes(bytes(raw))
    out = cli("check", "--store", store.root, "--json")
    assert out.exit_code == 1
    damaged = json.loads(out.stdout)["damaged"]
    expected = {f.path for f in store.stored_files(result.run_id) if f.digest in held}
    assert {d["path"] for d in damaged if d["run"]} == expected and expected  # the frame's checksum fails: all of them
    assert any(d["path"] == f"blobs/packs/{pack}.zst" and "does not hash" in d["problem"] for d in damaged)
    text = cli("check", "--store", store.root)
    assert text.exit_code == 1 and f"DAMAGED {result.run_id}/" in text.stdout


def test_reindex_and_gc_keep_a_capture_whole(cli, store_copy):
    store, result = store_copy
    before = {f.path: store.read_file(result.run_id, f.path) for f in store.stored_files(result.run_id)}
    assert cli("reindex", "--store", store.root).stdout.strip() == "reindexed 1 run(s)"
    out = cli("gc", "--store", store.root)
    assert out.exit_code == 0 and "0 unused pack(s)" in out.stdout
    fresh = LocalStore.open(store.root)
    assert {p: fresh.read_file(result.run_id, p) for p in before} == before
    assert cli("check", "--store", store.root).exit_code == 0
