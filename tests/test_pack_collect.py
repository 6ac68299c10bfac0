"""gc and the packs (xlarun.store.pack_collect): small packs merged, unlisted copies removed, every file of every run
reading back the same before and after, a reader that looked a file up just before a merge finding it, and a kill
at each step of a merge losing nothing."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import xlarun.store.pack_collect as pack_collect
from xlarun.store.facade import LocalStore
from xlarun.store.pack_format import pack_members

HLO = """HloModule jit_step{m}, entry_computation_layout={{(f32[8]{{0}})->f32[8]{{0}}}}

ENTRY main.4 {{
  Arg_0.1 = f32[8]{{0}} parameter(0)
  constant.2 = f32[] constant({value})
  ROOT {op}.4 = f32[8]{{0}} {op}(Arg_0.1, constant.2), metadata={{op_name="jit(step{m})/{op}" source_line={line}}}
}}
"""


def tiny_runs(root: Path, count: int, seed: int = 0) -> dict[str, dict[str, bytes]]:
    """``count`` runs of a tiny dump each (two modules, before and after optimizations), committed as a capture
    commits them; returns each run's files."""
    rng = random.Random(seed)
    store = LocalStore.open(root)
    made = {}
    for _ in range(count):
        run_id, staging = store.begin_run()
        (staging / "dump").mkdir(parents=True, exist_ok=True)
        files = {}
        for m in range(2):
            for stage, op in (("before_optimizations", "add"), ("after_optimizations", "multiply")):
                name = f"module_{m:04d}.jit_step{m}.{stage}.txt"
                files[name] = HLO.format(m=m, value=rng.random(), op=op, line=rng.randrange(500)).encode()
                (staging / "dump" / name).write_bytes(files[name])
        manifest = {"run_id": run_id, "name": "tiny", "kind": "capture", "status": "succeeded", "exit_code": 0}
        store.commit_indexed(run_id, staging, store.archive_outputs(staging), {"manifest.json": json.dumps(manifest)})
        made[run_id] = files
    store.close()
    return made


def assert_reads_back(root: Path, runs: dict[str, dict[str, bytes]]) -> None:
    store = LocalStore.open(root)
    try:
        assert store.check().damaged == []
        for run_id, files in runs.items():
            assert {name: store.read_file(run_id, name) for name in files} == files, run_id
    finally:
        store.close()


def disk_of_packs(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in (root / "blobs" / "packs").glob("*.zst"))


def test_gc_merges_the_small_packs_of_tiny_runs_and_every_file_reads_back(tmp_path):
    runs = tiny_runs(tmp_path / "s", 40)
    store = LocalStore.open(tmp_path / "s")
    assert len(store.blobs.pack_names()) == 40  # a pack per tiny run, each taking a block
    before = disk_of_packs(tmp_path / "s")
    done = store.gc()
    assert (done.merged, done.merged_into, done.packs) == (40, 1, 40)
    [merged] = store.blobs.pack_names()
    held = pack_members((store.blobs.pack_path(merged)).read_bytes())
    assert len(held) == len({d for files in runs.values() for d in map(_digest, files.values())})  # each file once
    assert disk_of_packs(tmp_path / "s") <= before / 8
    assert done.freed == before - disk_of_packs(tmp_path / "s")  # disk, not file sizes: 40 blocks for one
    store.close()
    assert_reads_back(tmp_path / "s", runs)
    again = LocalStore.open(tmp_path / "s").gc()  # nothing left to do
    assert (again.packs, again.merged) == (0, 0)


def _digest(data: bytes) -> str:
    from xlarun.store.pack_format import content_digest

    return content_digest(data)


def test_merging_leaves_out_the_files_of_removed_runs(tmp_path):
    runs = tiny_runs(tmp_path / "s", 25)
    store = LocalStore.open(tmp_path / "s")
    gone = sorted(runs)[:5]
    for run_id in gone:
        store.delete_run(run_id)
    done = store.gc()
    assert (done.packs, done.merged, done.merged_into) == (25, 20, 1)  # 5 unused, 20 merged into one
    [merged] = store.blobs.pack_names()
    held = {d for d, _o, _n in pack_members(store.blobs.pack_path(merged).read_bytes())}
    kept = {_digest(data) for run_id, files in runs.items() if run_id not in gone for data in files.values()}
    assert held == kept
    store.close()
    assert_reads_back(tmp_path / "s", {r: f for r, f in runs.items() if r not in gone})


def test_a_few_small_packs_are_left_as_they_are(tmp_path):
    tiny_runs(tmp_path / "s", pack_collect.MIN_SMALL_PACKS - 1)
    store = LocalStore.open(tmp_path / "s")
    names = store.blobs.pack_names()
    assert store.gc() == (0, 0, 0, 0, 0) and store.blobs.pack_names() == names


def test_merged_packs_hold_about_a_megabyte_each(tmp_path, monkeypatch):
    monkeypatch.setattr(pack_collect, "MERGED_BYTES", 4 << 10)  # 4 KiB: a merged pack per three runs or so
    runs = tiny_runs(tmp_path / "s", 30)
    store = LocalStore.open(tmp_path / "s")
    done = store.gc()
    per_run = sum(map(len, next(iter(runs.values())).values()))
    assert (
        done.merged == 30
        and done.merged_into == len(store.blobs.pack_names())
        and 5 <= done.merged_into <= 30 * per_run // (4 << 10) + 1
    )
    for name in store.blobs.pack_names():
        assert sum(n for _d, _o, n in pack_members(store.blobs.pack_path(name).read_bytes())) < (4 << 10) + per_run
    store.close()
    assert_reads_back(tmp_path / "s", runs)


def test_a_damaged_small_pack_is_left_for_check_to_name_and_the_others_are_merged(tmp_path):
    runs = tiny_runs(tmp_path / "s", 20)
    store = LocalStore.open(tmp_path / "s")
    victim_run = sorted(runs)[3]
    [victim] = {store.blobs.pack_of(f.digest) for f in store.stored_files(victim_run)}
    path = store.blobs.pack_path(victim)
    raw = bytearray(path.read_bytes())
    raw[-6] ^= 0xFF  # inside the frame: its checksum fails
    path.write_bytes(bytes(raw))
    done = store.gc()
    assert (done.merged, done.merged_into) == (19, 1)
    assert victim in store.blobs.pack_names()
    store.close()
    damaged = LocalStore.open(tmp_path / "s").check().damaged
    assert {d["run"] for d in damaged if d["run"]} == {victim_run}
    store = LocalStore.open(tmp_path / "s")
    for run_id, files in runs.items():
        if run_id != victim_run:
            assert {name: store.read_file(run_id, name) for name in files} == files


def test_a_reader_that_looked_up_a_file_before_the_merge_reads_it_from_the_merged_pack(tmp_path):
    runs = tiny_runs(tmp_path / "s", 20)
    run_id = sorted(runs)[7]
    name, data = next(iter(runs[run_id].items()))
    reader, collector = LocalStore.open(tmp_path / "s"), LocalStore.open(tmp_path / "s")
    old = reader.blobs.pack_of(_digest(data))
    slice_of = reader.blobs._pack_slice
    calls = []

    def gc_in_between(pack, offset, length, use_cache):  # the lookup is done: gc merges before the pack is opened
        calls.append(pack)
        if len(calls) == 1:
            assert collector.gc().merged == 20
        return slice_of(pack, offset, length, use_cache)

    reader.blobs._pack_slice = gc_in_between
    assert reader.read_file(run_id, name) == data
    assert calls[0] == old and calls[1] != old and not reader.blobs.pack_path(old).exists()


@pytest.mark.slow
@pytest.mark.parametrize("step", ["merge-written", "merge-listed"])
def test_a_kill_at_each_step_of_a_merge_loses_nothing_and_the_next_gc_finishes_it(tmp_path, step):
    runs = tiny_runs(tmp_path / "s", 24)
    env = dict(os.environ, XLARUN_STORE=str(tmp_path / "s"), XLARUN_KILL_AT=step)
    killed = subprocess.run(
        [sys.executable, "-m", "xlarun", "gc", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    packs = LocalStore.open(tmp_path / "s").blobs.pack_names()
    assert len(packs) == 25  # the 24 small packs and the merged one: one of the two sides is an unlisted copy
    assert_reads_back(tmp_path / "s", runs)
    env.pop("XLARUN_KILL_AT")
    finished = subprocess.run(
        [sys.executable, "-m", "xlarun", "gc", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert len(LocalStore.open(tmp_path / "s").blobs.pack_names()) == 1
    # killed before the table moved: the merged pack is the unlisted copy and goes, then the 24 are merged again;
    # killed after: the 24 are the unlisted copies and go, and nothing is left to merge
    assert (report["packs"], report["merged"]) == ((25, 24) if step == "merge-written" else (24, 0))
    assert_reads_back(tmp_path / "s", runs)


def test_gc_removes_a_copy_of_a_pack_no_row_names(tmp_path):
    runs = tiny_runs(tmp_path / "s", 2)
    store = LocalStore.open(tmp_path / "s")
    first = min(runs)
    [pack] = {store.blobs.pack_of(f.digest) for f in store.stored_files(first)}
    copy_of = store.blobs.decoded_pack(pack)
    members = pack_members(store.blobs.pack_path(pack).read_bytes())
    packer = (
        store.blobs.packer()
    )  # the same files packed again (in another order), as a second capture packing them at once would
    for _d, offset, length in reversed(members):
        packer.add(copy_of[offset : offset + length])
    flushed = store.blobs._table.existing  # the store holds them already: force them into a pack of their own
    store.blobs._table.existing = lambda digests: set()
    packer.close()
    store.blobs._table.existing = flushed
    assert len(store.blobs.pack_names()) == 3
    done = store.gc()
    assert (done.packs, done.merged) == (1, 0) and len(store.blobs.pack_names()) == 2
    store.close()
    assert_reads_back(tmp_path / "s", runs)


def test_a_full_disk_while_writing_the_merged_pack_is_one_line_and_loses_nothing(tmp_path):
    import errno

    from xlarun.errors import StoreError

    runs = tiny_runs(tmp_path / "s", 20)
    store = LocalStore.open(tmp_path / "s")
    names = store.blobs.pack_names()

    def full(_target, _payload):
        raise OSError(errno.ENOSPC, "No space left on device")

    store.blobs._write = full
    with pytest.raises(StoreError, match=r"could not merge small packs: .*No space left on device") as error:
        store.gc()
    assert "free space" in error.value.hint
    assert store.blobs.pack_names() == names and not list((tmp_path / "s" / "blobs" / "packs").glob(".tmp-*"))
    store.close()
    assert_reads_back(tmp_path / "s", runs)
