"""Blob storage: plain and delta blobs, skip-delta series, gc keeping bases, format 1 stores."""

from __future__ import annotations

import hashlib
import random

from xlarun.blobs import MAX_DELTA_DEPTH, BlobStore, DeltaBase
from xlarun.archiver import series_of
from xlarun.store import STORE_VERSION, Store


def _pass_dumps(count: int, seed: int = 0) -> list[bytes]:
    """HLO-like texts where each differs from the one before by a line or two, as successive passes do."""
    rng = random.Random(seed)
    lines = [f"  %add.{i} = f32[{rng.randint(1, 512)},128]{{1,0}} add(%p.{i}, %q.{i}), metadata={{op_name=\"jit(f)/add\"}}" for i in range(800)]
    out = []
    for step in range(count):
        lines[rng.randrange(len(lines))] = f"  %mul.{step} = f32[8]{{0}} multiply(%a, %b)"
        out.append(("HloModule jit_f\n\nENTRY %main {\n" + "\n".join(lines) + "\n}\n").encode())
    return out


def _blob_files(root) -> dict[str, bytes]:
    return {p.name[:-4]: p.read_bytes() for p in (root / "blobs").glob("*/*.zst")}


def test_a_delta_blob_reads_back_exactly_and_is_much_smaller(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    first, second = _pass_dumps(2)
    base_sha, base_size, _ = blobs.put(first)
    sha, size, new = blobs.put_delta(second, DeltaBase(base_sha, first))
    assert new and sha == hashlib.sha256(second).hexdigest()
    assert size < base_size / 5
    assert blobs.base_of(sha) == base_sha and blobs.depth(sha) == 1 and blobs.base_of(base_sha) is None
    assert BlobStore(tmp_path / "blobs").get(sha) == second  # a fresh reader, nothing cached


def test_an_unchanged_dump_is_the_base_blob_itself(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    data = _pass_dumps(1)[0]
    sha, _, _ = blobs.put(data)
    assert blobs.put_delta(bytes(data), DeltaBase(sha, data)) == (sha, blobs.path_for(sha).stat().st_size, False)


def test_chains_are_cut_at_the_maximum_depth(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(MAX_DELTA_DEPTH + 3)
    sha = blobs.put(dumps[0])[0]
    for previous, data in zip(dumps, dumps[1:]):
        sha = blobs.put_delta(data, DeltaBase(sha, previous))[0]
        assert blobs.depth(sha) <= MAX_DELTA_DEPTH
    assert any(blobs.depth(hashlib.sha256(d).hexdigest()) == 0 for d in dumps[1:])  # a plain blob restarted the chain
    fresh = BlobStore(tmp_path / "blobs")
    assert [fresh.get(hashlib.sha256(d).hexdigest()) for d in dumps] == dumps


def test_a_module_series_is_in_dump_order():
    paths = [
        "module_0001.jit_f.before_optimizations.txt",
        "module_0001.jit_f.0001.simplification.after_pipeline-start.before_algsimp.txt",
        "module_0001.jit_f.0002.simplification.after_algsimp.before_dce.txt",
        "module_0001.jit_f.cpu_after_optimizations.txt",
    ]
    keys, positions = zip(*(series_of(p) for p in paths))
    assert len(set(keys)) == 1 and list(positions) == sorted(positions)
    assert series_of("module_0001.jit_f.before_optimizations.dot")[0] not in (None, keys[0])  # another format, another series
    assert series_of("module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt") == (None, 0)


def test_archived_series_are_deltas_with_short_chains_and_exact_bytes(tmp_path):
    store = Store.open(tmp_path / "s")
    dumps = _pass_dumps(40)
    run_id, staging = store.begin_run()
    for step, data in enumerate(dumps):
        (staging / "dump" / f"module_0000.jit_f.{step:04d}.simplification.after_p{step}.before_p{step + 1}.txt").write_bytes(data)
    files = store.archive_outputs(staging)
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    fresh = Store.open(tmp_path / "s")
    assert [fresh.read_file(run_id, f.path) for f in sorted(files, key=lambda f: f.path)] == dumps
    depths = [fresh.blobs.depth(f.sha256) for f in files]
    assert max(depths) <= 6 and sum(d > 0 for d in depths) == len(dumps) - 1  # skip-delta: log2(40) bases at most
    assert store.disk_usage() < sum(map(len, dumps)) / 50


def test_gc_keeps_the_bases_of_blobs_still_in_use(tmp_path):
    store = Store.open(tmp_path / "s")
    first, second = _pass_dumps(2)
    names = ["module_0000.jit_f.0001.p.after_a.before_b.txt", "module_0000.jit_f.0002.p.after_b.before_c.txt"]

    def run(files: dict[str, bytes]) -> str:
        run_id, staging = store.begin_run()
        for name, data in files.items():
            (staging / "dump" / name).write_bytes(data)
        store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": "{}"})
        return run_id

    both = run(dict(zip(names, (first, second))))
    only_second = run({names[1]: second})  # the same bytes: stored once, as a delta of the first run's base
    store.delete_run(both)
    _folders, removed, _freed = store.gc()
    assert removed == 0
    assert Store.open(tmp_path / "s").read_file(only_second, names[1]) == second


def test_a_format_1_store_is_read_and_upgraded_on_the_next_archive(tmp_path):
    store = Store.open(tmp_path / "s")
    old_run, staging = store.begin_run()
    (staging / "dump" / "module_0000.a.txt").write_bytes(b"plain")
    store.commit_run(old_run, staging, [store.archive_outputs(staging)[0]], {"manifest.json": "{}"})
    (tmp_path / "s" / "VERSION").write_text("1\n")
    again = Store.open(tmp_path / "s")
    assert again.read_file(old_run, "module_0000.a.txt") == b"plain"
    _run_id, staging = again.begin_run()
    (staging / "dump" / "module_0000.b.txt").write_bytes(b"new")
    again.archive_outputs(staging)
    assert (tmp_path / "s" / "VERSION").read_text().strip() == str(STORE_VERSION)
