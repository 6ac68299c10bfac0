"""Blob storage: packs and their table, gc keeping packs, stores of another format refused."""

from __future__ import annotations

import random

import pytest

import xlarun.store.packs as blobs_module
from xlarun.errors import ExitCode, StoreError
from xlarun.store.archive import series_of
from xlarun.store.buffers import DecodedCache
from xlarun.store.facade import LocalStore
from xlarun.store.pack_format import pack_members
from xlarun.store.packs import BlobStore, content_digest
from xlarun.store.store_version import STORE_VERSION


def _pass_dumps(count: int, seed: int = 0, lines: int = 800) -> list[bytes]:
    """HLO-like texts where each differs from the one before by a line or two, as successive passes do."""
    rng = random.Random(seed)
    body = [
        f'  %add.{i} = f32[{rng.randint(1, 512)},128]{{1,0}} add(%p.{i}, %q.{i}), metadata={{op_name="jit(f)/add"}}'
        for i in range(lines)
    ]
    out = []
    for step in range(count):
        body[rng.randrange(len(body))] = f"  %mul.{step} = f32[8]{{0}} multiply(%a, %b)"
        out.append(("HloModule jit_f\n\nENTRY %main {\n" + "\n".join(body) + "\n}\n").encode())
    return out


def _digest(data: bytes) -> str:
    return content_digest(data)


def _pack(blobs: BlobStore, dumps: list[bytes]) -> None:
    packer = blobs.packer()
    for d in dumps:
        packer.add(d)
    packer.flush()


def test_a_pack_reads_back_exactly_and_is_much_smaller(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(20)
    packer = blobs.packer()
    assert [packer.add(d) for d in dumps] == [_digest(d) for d in dumps]
    assert not blobs.has(_digest(dumps[0]))  # nothing is stored before the pack is written
    written = packer.flush()
    assert written < sum(map(len, dumps)) / 50
    packs = {blobs.pack_of(_digest(d)) for d in dumps}
    assert packs == set(blobs.pack_names()) and len(packs) == 1
    assert not list((tmp_path / "blobs").glob("[0-9a-f][0-9a-f]"))  # one pack file, no file per dump
    fresh = BlobStore(tmp_path / "blobs")  # nothing cached
    assert [fresh.get(_digest(d)) for d in reversed(dumps)] == list(reversed(dumps))
    assert all(fresh.verify(_digest(d)) is None for d in dumps) and fresh.verify_pack(packs.pop()) is None


def test_the_pack_table_is_rebuilt_from_the_pack_headers(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(5)
    _pack(blobs, dumps)
    blobs.close()
    for leftover in (tmp_path / "blobs").glob("packs.sqlite*"):
        leftover.unlink()
    fresh = BlobStore(tmp_path / "blobs")
    assert [fresh.get(_digest(d)) for d in dumps] == dumps


def test_two_writers_packing_the_same_file_at_once_leave_a_store_that_checks_clean(tmp_path):
    """Two captures committing at once (a Ray batch's interrupted cells, concurrent captures) each look the
    file up before the other lists it, so both packs hold it and the table lists one: a duplicate, not
    damage (a CI run once reported it as damage)."""
    shared, own_a, own_b = _pass_dumps(3, seed=5)
    a, b = BlobStore(tmp_path / "blobs"), BlobStore(tmp_path / "blobs")  # two processes on one store
    packer_a, packer_b = a.packer(), b.packer()
    for packer, own in ((packer_a, own_a), (packer_b, own_b)):
        packer.add(shared)
        packer.add(own)
    write = b._write

    def other_writer_lists_first(target, payload):  # B has checked the table; A writes and lists its pack now
        packer_a.flush()
        return write(target, payload)

    b._write = other_writer_lists_first
    packer_b.flush()
    assert len(a.pack_names()) == 2
    fresh = BlobStore(tmp_path / "blobs")
    assert [fresh.get(_digest(d)) for d in (shared, own_a, own_b)] == [shared, own_a, own_b]
    assert [fresh.verify_pack(name) for name in fresh.pack_names()] == [None, None]
    done = fresh.collect({_digest(d) for d in (shared, own_a, own_b)})
    assert (done.removed, done.freed) == (0, 0)  # both packs hold a live file listed in them: both stay


def test_a_table_row_pointing_where_the_pack_header_does_not_is_damage(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(3, seed=6)
    _pack(blobs, dumps)
    (pack,) = blobs.pack_names()
    conn = blobs._table._conn()
    conn.execute("UPDATE members SET offset = offset + 7 WHERE sha256 = ?", (_digest(dumps[1]),))
    assert blobs.verify_pack(pack) == f"packs.sqlite places 1 file(s) in pack {pack[:12]} where its header does not"


@pytest.mark.parametrize("keep", [0, 10, 20, 60])
def test_a_pack_cut_short_is_skipped_when_the_table_is_rebuilt(tmp_path, keep):
    """The pack table is rebuilt from headers after packs.sqlite is lost; a pack cut inside its header is damage
    for `xlarun check` to name, never a crash (a CI run once hit a struct.error here)."""
    blobs = BlobStore(tmp_path / "blobs")
    kept, cut = _pass_dumps(3, seed=1), _pass_dumps(3, seed=2)
    _pack(blobs, kept)
    (pack_of_kept,) = blobs.pack_names()
    _pack(blobs, cut)
    (pack_of_cut,) = set(blobs.pack_names()) - {pack_of_kept}
    blobs.close()
    path = blobs.pack_path(pack_of_cut)
    path.write_bytes(path.read_bytes()[:keep])
    for leftover in (tmp_path / "blobs").glob("packs.sqlite*"):
        leftover.unlink()
    fresh = BlobStore(tmp_path / "blobs")
    assert [fresh.get(_digest(d)) for d in kept] == kept
    assert not fresh.has(_digest(cut[0]))
    assert "damaged" in fresh.verify_pack(pack_of_cut) or "hash" in fresh.verify_pack(pack_of_cut)


def test_unchanged_and_already_stored_members_are_not_stored_again(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    first, second, third = _pass_dumps(3)
    earlier = blobs.packer()
    earlier.add(third)
    earlier.flush()
    packer = blobs.packer()
    assert packer.add(first) == _digest(first)
    assert packer.add(second) == packer.add(bytes(second)) == _digest(second)  # the repeat is compared, not added
    assert packer.add(third) == _digest(third)  # in the earlier pack
    assert packer.pending == 3  # what the store holds is taken out when the pack is written
    packer.flush()
    pack = blobs.pack_of(_digest(second))
    assert pack == blobs.pack_of(_digest(first)) != blobs.pack_of(_digest(third))
    assert [digest for digest, _offset, _length in pack_members(blobs.pack_path(pack).read_bytes())] == [
        _digest(first),
        _digest(second),
    ]
    assert [blobs.get(_digest(d)) for d in (first, second, third)] == [first, second, third]


def test_a_pack_of_only_stored_files_is_not_written(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(3)
    _pack(blobs, dumps)
    before = blobs.pack_names()
    packer = blobs.packer()
    for d in dumps:
        packer.add(d)
    assert packer.flush() == 0 and blobs.pack_names() == before


def test_a_full_pack_is_written_and_a_new_one_begun(tmp_path, monkeypatch):
    monkeypatch.setattr(blobs_module, "PACK_BYTES", 200_000)
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(12)
    _pack(blobs, dumps)
    packs: dict[str, list[int]] = {}
    for d in dumps:
        packs.setdefault(blobs.pack_of(_digest(d)), []).append(len(d))
    assert len(packs) > 2
    *full, last = packs.values()
    assert all(sum(sizes) >= 200_000 > sum(sizes[:-1]) for sizes in full) and sum(last) < 200_000 + last[-1]
    assert [BlobStore(tmp_path / "blobs").get(_digest(d)) for d in dumps] == dumps


def test_the_write_buffer_starts_small_and_grows_with_the_pack_keeping_what_it_holds(tmp_path, monkeypatch):
    """A run of one small file never allocates a pack-sized buffer (a fresh 32 MB one cost every capture 12-32 ms
    of CPU and 32 MB of memory); as files come the buffer doubles, the pack's members moved along byte for byte."""
    import xlarun.store.buffers as buffers

    monkeypatch.setattr(buffers, "_FREE_BUFFERS", [])  # no buffer left in the pool by an earlier packer
    blobs = BlobStore(tmp_path / "blobs")
    packer = blobs.packer()
    packer.add(b"HloModule jit_tiny\n" * 20)
    assert len(packer._buffer) == blobs_module.FIRST_BUFFER_BYTES
    sizes = []
    dumps = _pass_dumps(30, seed=3)  # about 50 KB each: the buffer doubles several times
    for d in dumps:
        packer.add(d)
        sizes.append(len(packer._buffer))
    packer.flush()
    assert sizes == sorted(sizes) and len(set(sizes)) >= 3 and sizes[-1] < 4 * sum(map(len, dumps))
    assert len({blobs.pack_of(_digest(d)) for d in dumps}) == 1  # growing never cut the pack short
    assert [BlobStore(tmp_path / "blobs").get(_digest(d)) for d in dumps] == dumps


def test_the_pool_keeps_the_largest_buffers_so_the_next_pack_starts_full_sized(tmp_path, monkeypatch):
    """A pack's buffer grows by doubling and gives each smaller step back to the pool: a pool that kept the first it
    was given filled with those steps and dropped every full-sized buffer, so each series of a big dump zero-filled
    and copied its way up again (0.39 of 1.7 CPU s archiving a 784 MB dump)."""
    import xlarun.store.buffers as buffers

    monkeypatch.setattr(buffers, "_FREE_BUFFERS", [])
    blobs = BlobStore(tmp_path / "blobs")
    first = blobs.packer()
    for d in _pass_dumps(30, seed=5):
        first.add(d)
    grown = len(first._buffer)
    first.close()
    pooled = sorted(map(len, buffers._FREE_BUFFERS))
    assert pooled[-1] == grown and len(pooled) == buffers._MAX_FREE_BUFFERS  # the steps did not push it out
    second = blobs.packer()
    second.add(b"HloModule jit_tiny\n")
    assert len(second._buffer) == grown  # reused whole: no zero-filling, no copying up through the steps
    dumps = _pass_dumps(30, seed=6)
    for d in dumps:
        second.add(d)
    second.close()
    assert [BlobStore(tmp_path / "blobs").get(_digest(d)) for d in dumps] == dumps


def test_a_pack_too_big_to_cache_is_decoded_only_up_to_the_member(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(6)
    _pack(blobs, dumps)
    small = BlobStore(tmp_path / "blobs")
    small._cache = DecodedCache(4 * len(dumps[0]))  # holds one member, not the pack
    assert [small.get(_digest(d)) for d in dumps] == dumps
    assert blobs.pack_of(_digest(dumps[0])) not in small._cache.items


def test_damage_is_found_by_verify_and_reading_says_what_to_do(tmp_path):
    blobs = BlobStore(tmp_path / "blobs")
    dumps = _pass_dumps(3)
    _pack(blobs, dumps)
    pack = blobs.pack_of(_digest(dumps[0]))
    raw = bytearray(blobs.pack_path(pack).read_bytes())
    raw[-5] ^= 0xFF
    blobs.pack_path(pack).write_bytes(bytes(raw))
    fresh = BlobStore(tmp_path / "blobs")
    assert fresh.verify_pack(pack) == f"pack {pack[:12]} does not hash to its name"
    assert fresh.verify(_digest(dumps[1])) is not None
    blobs.pack_path(pack).unlink()
    with pytest.raises(StoreError, match=f"blob {pack[:12]} is missing") as error:
        BlobStore(tmp_path / "blobs").get(_digest(dumps[1]))
    assert "xlarun check" in error.value.hint
    with pytest.raises(StoreError, match=f"blob {_digest(b'never stored')[:12]} is missing"):
        blobs.pack_of(_digest(b"never stored"))


def test_a_module_series_is_in_dump_order():
    paths = [
        "module_0001.jit_f.before_optimizations.txt",
        "module_0001.jit_f.0001.simplification.after_pipeline-start.before_algsimp.txt",
        "module_0001.jit_f.0002.simplification.after_algsimp.before_dce.txt",
        "module_0001.jit_f.cpu_after_optimizations.txt",
    ]
    keys, positions = zip(*(series_of(p) for p in paths), strict=True)
    assert len(set(keys)) == 1 and list(positions) == sorted(positions)
    assert series_of("module_0001.jit_f.before_optimizations.dot")[0] not in (None, keys[0])  # another format, another series
    assert series_of("module_0001.jit_f.cpu_after_optimizations-buffer-assignment.txt") == (None, 0)


def test_an_archived_series_is_packed_with_exact_bytes(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    dumps = _pass_dumps(40)
    run_id, staging = store.begin_run()
    for step, data in enumerate(dumps):
        (staging / "dump" / f"module_0000.jit_f.{step:04d}.simplification.after_p{step}.before_p{step + 1}.txt").write_bytes(data)
    files = store.archive_outputs(staging)
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    fresh = LocalStore.open(tmp_path / "s")
    assert [fresh.read_file(run_id, f.path) for f in sorted(files, key=lambda f: f.path)] == dumps
    assert {fresh.blobs.pack_of(f.digest) for f in files} == set(fresh.blobs.pack_names()) and len(fresh.blobs.pack_names()) == 1
    assert fresh.blobs.pack_path(fresh.blobs.pack_names()[0]).stat().st_size < sum(map(len, dumps)) / 50


def test_gc_keeps_packs_still_pointed_into_and_removes_the_rest(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    first, second = _pass_dumps(2)
    names = ["module_0000.jit_f.0001.p.after_a.before_b.txt", "module_0000.jit_f.0002.p.after_b.before_c.txt"]

    def run(files: dict[str, bytes]) -> str:
        run_id, staging = store.begin_run()
        for name, data in files.items():
            (staging / "dump" / name).write_bytes(data)
        store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": "{}"})
        return run_id

    both = run(dict(zip(names, (first, second), strict=True)))
    only_second = run({names[1]: second})  # the same bytes: stored once, inside the first run's pack
    store.delete_run(both)
    removed = store.gc().packs
    assert removed == 0  # the pack stays for the second dump
    assert LocalStore.open(tmp_path / "s").read_file(only_second, names[1]) == second
    store.delete_run(only_second)
    removed = store.gc().packs
    assert removed == 1 and store.blobs.pack_names() == []
    assert not store.blobs.has(_digest(second))


@pytest.mark.parametrize("old", ["1", "2", "3"])
def test_a_store_of_an_older_format_is_refused_in_one_line(tmp_path, cli, old, monkeypatch):
    """Formats 1 to 3 were written only by development versions: refused with a message saying so, never a crash."""
    store = LocalStore.open(tmp_path / "s")
    store.close()
    (tmp_path / "s" / "VERSION").write_text(f"{old}\n")
    with pytest.raises(
        StoreError, match=f"has format {old}, which this xlarun no longer reads \\(it reads format 4 only\\)"
    ) as error:
        LocalStore.open(tmp_path / "s")
    assert STORE_VERSION == 4 and "capture the runs again" in error.value.hint
    monkeypatch.chdir(tmp_path)  # a short path: the line is not wrapped at the console's width
    out = cli("runs", "--store", "s")
    assert out.exit_code == ExitCode.ENVIRONMENT == 3
    assert f"has format {old}, which this xlarun no longer reads" in out.stderr and "Traceback" not in out.stderr + out.stdout
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_store_of_a_newer_format_is_refused(tmp_path):
    LocalStore.open(tmp_path / "s").close()
    (tmp_path / "s" / "VERSION").write_text("5\n")
    with pytest.raises(StoreError, match="has format '5'; this xlarun reads format 4 only") as error:
        LocalStore.open(tmp_path / "s")
    assert error.value.hint == "use the xlarun version that wrote it"
