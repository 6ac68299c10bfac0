"""A store that cannot be talked into deleting data (store/integrity.py): a committed run's file list emptied,
deleted or cut short is damage that `check` names, and `gc` deletes nothing while it stands (issue: `gc` removed
every blob of a run whose files.json had been emptied)."""

from __future__ import annotations

import json

import pytest

import xlarun
from xlarun.store.facade import LocalStore

MODULE = """HloModule jit_{name}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}

ENTRY main.3 {{
  Arg_0.1 = f32[4]{{0}} parameter(0)
  ROOT {op}.2 = f32[4]{{0}} {op}(Arg_0.1, Arg_0.1)
}}
"""


@pytest.fixture
def four_runs(tmp_path):
    """Four imported runs, each with modules of its own (so each holds blobs no other run holds)."""
    store = xlarun.open_store(tmp_path / "store")
    ids = []
    for i, op in enumerate(["add", "multiply", "subtract", "maximum"]):
        dump = tmp_path / f"dump{i}"
        dump.mkdir()
        for m in range(5):
            (dump / f"module_{m:04d}.jit_r{i}m{m}.before_optimizations.txt").write_text(MODULE.format(name=f"r{i}m{m}", op=op))
        ids.append(store.import_dump(dump, name=f"run{i}").id)
    store.close()
    return tmp_path / "store", ids


def _packs(root) -> set[str]:
    return {p.name for p in (root / "blobs" / "packs").glob("*.zst")}


def test_damaged_file_lists_are_named_by_check_and_gc_deletes_nothing(four_runs, cli):
    root, (emptied, deleted, cut, sound) = four_runs
    (root / "runs" / emptied / "files.json").write_text("[]")
    (root / "runs" / deleted / "files.json").unlink()
    listing = root / "runs" / cut / "files.json"
    listing.write_text(json.dumps(json.loads(listing.read_text())[:2]))
    packs = _packs(root)

    check = cli("check", "--json", "--store", root)
    assert check.exit_code == 1
    damaged = {d["run"]: d["problem"] for d in json.loads(check.stdout)["damaged"]}
    assert damaged == {
        emptied: "files.json lists 0 file(s), its manifest 5",
        deleted: "files.json is missing",
        cut: "files.json lists 2 file(s), its manifest 5",
    }

    gc = cli("gc", "--store", root)
    assert gc.exit_code == 3 and "gc refuses to run: 3 run(s)" in gc.stderr and "nothing was deleted" in gc.stderr
    assert _packs(root) == packs
    # every module of every run still reads back, damaged runs included (the index still names their blobs)
    store = LocalStore.open(root)
    for run_id in (emptied, deleted, cut, sound):
        for module in store.index.modules(run_id):
            assert b"ENTRY" in store.blobs.get(store.index.module(run_id, module.module_id).files[0].digest)
    store.close()


def test_giving_a_damaged_run_up_lets_gc_free_only_its_own_blobs(four_runs, cli):
    root, (damaged, _b, _c, sound) = four_runs
    (root / "runs" / damaged / "files.json").unlink()
    assert cli("rm", damaged, "--yes", "--store", root).exit_code == 0
    assert cli("gc", "--store", root).exit_code == 0
    assert cli("check", "--store", root).exit_code == 0
    store = LocalStore.open(root)
    assert damaged not in store.run_ids() and len(store.index.modules(sound)) == 5
    store.close()


def test_the_index_keeps_blobs_alive_when_list_and_manifest_were_both_cut(four_runs, cli):
    """Even a list cut short together with its manifest's count: the index still names the files."""
    root, (cut, *_rest) = four_runs
    listing = root / "runs" / cut / "files.json"
    listing.write_text(json.dumps(json.loads(listing.read_text())[:1]))
    manifest = root / "runs" / cut / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"files": 1}))
    check = cli("check", "--json", "--store", root)
    assert check.exit_code == 1 and json.loads(check.stdout)["damaged"][0]["problem"] == "files.json lists 1 file(s), the index 5"
    assert cli("gc", "--store", root).exit_code == 3


def test_gc_reads_the_runs_file_lists_under_its_exclusive_lock_so_a_removal_meanwhile_is_no_damage(four_runs, monkeypatch):
    """gc's check of every run's file list ran before it took its lock: an `rm` between the listing of runs and the
    reading of one made gc refuse ("no run ...") under load. The check now runs under the exclusive lock: a reader
    or a removal (which take the lock) waits; here a second open of the lock file cannot even share it."""
    import fcntl
    import os

    from xlarun.store import integrity

    root, ids = four_runs
    seen: list[bool] = []
    real = integrity.file_list_problems

    def watched(store, index):
        fd = os.open(root / "lock", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            seen.append(False)  # nobody held it exclusively
        except BlockingIOError:
            seen.append(True)
        finally:
            os.close(fd)
        return real(store, index)

    monkeypatch.setattr(integrity, "file_list_problems", watched)
    store = LocalStore(root)
    try:
        store.gc()
    finally:
        store.close()
    assert seen == [True]
    assert len(xlarun.open_store(root).runs()) == len(ids)
