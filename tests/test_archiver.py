"""Archiving while the job runs: settled files go early, changed ones again, raw files only at the end."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import xlarun.store.archive as archiver
from xlarun.store.facade import LocalStore
from xlarun.store.packs import content_digest


@pytest.fixture(autouse=True)
def _fast_polling(monkeypatch):
    monkeypatch.setattr(archiver, "POLL_S", 0.05)
    monkeypatch.setattr(archiver, "SETTLE_S", 0.1)


def _wait_until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _pass(step: int) -> bytes:
    return ("HloModule m\n" + "".join(f"  %x.{i} = f32[] add(%a, %b)\n" for i in range(step * 10, step * 10 + 400))).encode()


def test_settled_files_are_archived_while_the_job_runs(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    work = store.archiver(staging)
    work.start()
    early = staging / "dump" / "module_0000.m.0001.p.after_a.before_b.txt"
    early.write_bytes(_pass(1))
    # archived once settled; its pack is written at the first scan that finds nothing new in the series
    _wait_until(lambda: store.blobs.has(content_digest(_pass(1))))
    assert store.blobs.get(content_digest(_pass(1))) == _pass(1)
    assert early.exists()  # raw files stay until the end
    early.write_bytes(_pass(9))  # rewritten after it was archived
    os.utime(early, ns=(time.time_ns(), time.time_ns()))
    late = staging / "dump" / "module_0000.m.0002.p.after_b.before_c.txt"
    late.write_bytes(_pass(2))
    files = work.finish()
    assert [f.path for f in files] == [early.name, late.name]
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    assert store.read_file(run_id, early.name) == _pass(9) and store.read_file(run_id, late.name) == _pass(2)
    assert not (tmp_path / "s" / "runs" / run_id / "dump").exists()


def test_a_failure_while_the_job_runs_keeps_every_raw_file(tmp_path, monkeypatch):
    store = LocalStore.open(tmp_path / "s")
    _run_id, staging = store.begin_run()

    def disk_full(self, target, payload):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(store.blobs), "_write", disk_full)
    work = store.archiver(staging)
    work.start()
    (staging / "dump" / "module_0000.m.before_optimizations.txt").write_bytes(_pass(0))
    time.sleep(0.5)
    with pytest.raises(OSError, match="No space left"):
        work.finish()
    assert (staging / "dump" / "module_0000.m.before_optimizations.txt").read_bytes() == _pass(0)


def test_abandon_stops_and_keeps_the_raw_files(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    _run_id, staging = store.begin_run()
    work = store.archiver(staging)
    work.start()
    (staging / "dump" / "a.txt").write_bytes(b"a")
    work.abandon()
    assert (staging / "dump" / "a.txt").exists()
    with store.lock(exclusive=True):  # the shared lock was released
        pass


def test_a_file_renamed_while_it_is_read_is_archived_under_its_new_name(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    _run_id, staging = store.begin_run()
    work = store.archiver(staging)
    (staging / "dump" / "keep.txt").write_bytes(b"keep")
    temporary = staging / "dump" / "module_0000.m.before_optimizations.txt.tmp"
    temporary.write_bytes(b"soon renamed")
    real_read = work._read_into

    def renamed_meanwhile(packer, path):
        if path == str(temporary):
            temporary.rename(staging / "dump" / "renamed.txt")
        return real_read(packer, path)

    work._read_into = renamed_meanwhile
    assert [f.path for f in work.finish()] == ["keep.txt", "renamed.txt"]


# --- whatever a dump folder holds ------------------------------------------------------------------


def _archive(tmp_path, fill) -> tuple[LocalStore, str, list, list]:
    """Archive a staging folder ``fill(dump_folder)`` made; commit it; (store, run id, files, notes)."""
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    fill(staging / "dump")
    work = store.archiver(staging)
    files = work.finish()
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    return store, run_id, files, work.notes


def test_a_zero_byte_file_is_archived(tmp_path):
    # was: TypeError: memoryview: a bytes-like object is required, not 'NoneType' (exit 4, the run lost)
    def fill(dump):
        (dump / "module_0097.jit_f.before_optimizations.hlo.pb").write_bytes(b"")
        (dump / "module_0097.jit_f.before_optimizations.txt").write_bytes(_pass(1))

    store, run_id, files, notes = _archive(tmp_path, fill)
    assert {f.path: f.size for f in files} == {
        "module_0097.jit_f.before_optimizations.hlo.pb": 0,
        "module_0097.jit_f.before_optimizations.txt": len(_pass(1)),
    }
    assert store.read_file(run_id, "module_0097.jit_f.before_optimizations.hlo.pb") == b"" and notes == []


def test_symlinks_fifos_and_sockets_are_listed_never_read(tmp_path):
    import socket

    def fill(dump):
        (dump / "a.txt").write_bytes(b"a")
        os.symlink("/etc/shadow", dump / "shadow.txt")
        os.mkfifo(dump / "pipe.pb")  # opening it for reading would block: the archive must finish anyway
        here = os.getcwd()
        os.chdir(dump)
        try:
            socket.socket(socket.AF_UNIX).bind("s.sock")
        finally:
            os.chdir(here)

    started = time.monotonic()
    _store, _run_id, files, notes = _archive(tmp_path, fill)
    assert time.monotonic() - started < 120  # a read of the FIFO would block forever; a loaded machine must pass
    assert [f.path for f in files] == ["a.txt"]
    why = {n.path: (n.archived, n.why) for n in notes}
    assert why["shadow.txt"] == (False, "a symbolic link (to '/etc/shadow'): skipped, its target is never read")
    assert why["pipe.pb"][0] is False and "FIFO" in why["pipe.pb"][1]
    assert why["s.sock"] == (False, "a socket: not archived")


def test_a_name_that_is_not_utf8_is_archived_escaped_and_noted(tmp_path):
    def fill(dump):
        with open(os.path.join(os.fsencode(dump), b"bad\xffname.txt"), "wb") as out:
            out.write(b"bytes")

    store, run_id, files, notes = _archive(tmp_path, fill)
    assert [f.path for f in files] == ["bad\\xffname.txt"] and store.read_file(run_id, "bad\\xffname.txt") == b"bytes"
    assert [(n.path, n.archived) for n in notes] == [("bad\\xffname.txt", True)] and "not UTF-8" in notes[0].why
    store.ingest(run_id)  # text everywhere: the index takes it
    assert [f.path for f in store.index.run_files(run_id)] == ["bad\\xffname.txt"]


UNREADABLE_AS_NOBODY = r"""
import json, os, sys
from xlarun.store.facade import LocalStore
import xlarun.hlo.names, xlarun.store.summaries, xlarun.store.archive, concurrent.futures.thread  # imported while the interpreter's files are readable
if os.geteuid() == 0:  # chmod 000 stops anyone but root
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
store = LocalStore.open(sys.argv[1])
run_id, staging = store.begin_run()
(staging / "dump" / "ok.txt").write_bytes(b"ok")
(staging / "dump" / "secret.txt").write_bytes(b"secret")
os.chmod(staging / "dump" / "secret.txt", 0)
work = store.archiver(staging)
files = work.finish()
store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
print(json.dumps({"files": [f.path for f in files], "notes": [n.to_json() for n in work.notes], "uid": os.getuid()}))
"""


def test_an_unreadable_file_is_listed_with_why(tmp_path):
    """chmod 000 stops anyone but root: as root, the archive drops to nobody (uid 65534) to see it."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="xlarun-unreadable-", dir="/tmp"))  # pytest's tmp_path is root's alone
    try:
        if os.geteuid() == 0:
            os.chown(folder, 65534, 65534)
        done = subprocess.run(
            [sys.executable, "-c", UNREADABLE_AS_NOBODY, str(folder / "s")],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=folder,
            # coverage's subprocess patch would make nobody write its data where it may not: not measured
            env={**{k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}, "HOME": str(folder)},
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["uid"] != 0
        assert result["files"] == ["ok.txt"]
        assert result["notes"] == [{"path": "secret.txt", "archived": False, "why": "cannot be read: Permission denied"}]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


BIG_SPARSE = r"""
import json, os, resource, sys
from blake3 import blake3
from xlarun.store.facade import LocalStore
size = int(sys.argv[2]) << 20
store = LocalStore.open(sys.argv[1])
run_id, staging = store.begin_run()
(staging / "dump" / "small.txt").write_bytes(b"warm up")
store.archiver(staging).finish()  # imports, buffers and connections: part of the baseline
run_id, staging = store.begin_run()
big = staging / "dump" / "big.bin"
with open(big, "wb") as out:  # a sparse file with data here and there
    out.truncate(size)
    for at in range(0, size, 64 << 20):
        out.seek(at)
        out.write(os.urandom(1 << 20))
expected = blake3()
with open(big, "rb") as handle:
    while chunk := handle.read(8 << 20):
        expected.update(chunk)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
files = store.archiver(staging).finish()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
print(json.dumps({"files": [(f.path, f.digest, f.size) for f in files], "expected": expected.hexdigest(),
                  "peak_growth_mb": (after - before) / 1024, "peak_mb": after / 1024, "problem": store.blobs.verify(files[0].digest)}))
"""


@pytest.mark.slow
def test_a_large_file_is_streamed_with_bounded_memory(tmp_path):
    import json
    import subprocess
    import sys

    size_mb = 384
    done = subprocess.run(
        [sys.executable, "-c", BIG_SPARSE, str(tmp_path / "s"), str(size_mb)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [(path, digest, size)] = result["files"]
    assert (path, size, digest) == ("big.bin", size_mb << 20, result["expected"])
    assert result["problem"] is None  # reads back and hashes to its name
    print(
        f"archiving a {size_mb} MB file: peak RSS {result['peak_mb']:.0f} MB, {result['peak_growth_mb']:.1f} MB above the baseline"
    )
    assert result["peak_growth_mb"] < 96  # was the whole file (a buffer of its size)


def test_a_file_still_written_after_the_job_ends_is_archived_as_read(tmp_path):
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    growing = staging / "dump" / "growing.log"
    growing.write_bytes(b"start\n")
    work = store.archiver(staging)
    real_read = work._read_into

    def appended_meanwhile(packer, path):  # a writer the job left behind appends while each round reads
        stored = real_read(packer, path)
        with open(growing, "ab") as out:
            out.write(b"more\n")
        return stored

    work._read_into = appended_meanwhile
    files = work.finish()
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    [_stored] = files
    assert store.read_file(run_id, "growing.log").startswith(b"start\n")
    [note] = work.notes
    assert note.path == "growing.log" and note.archived and "still being written when the job ended" in note.why


def _series_dump(dump: Path, modules: int, passes: int, pad: int = 0) -> dict[str, bytes]:
    """``modules`` series of ``passes`` pass dumps each (and a log beside them), written; returns name -> bytes."""
    written = {}
    for m in range(modules):
        for step in range(passes):
            name = f"module_{m:04d}.jit_f{m}.cpu.{step:04d}.pass{step}.after_pipeline.txt"
            written[name] = _pass(step) + f"// module {m}\n".encode() + os.urandom(pad).hex().encode()
    written["xla.log"] = b"compiled\n"
    for name, content in written.items():
        (dump / name).write_bytes(content)
    return written


def _packs(store: LocalStore) -> list[Path]:
    return sorted((store.root / "blobs" / "packs").glob("*.zst"))


def test_a_small_dumps_series_share_one_pack_and_read_back(tmp_path):
    """Each module's series in a pack of its own left tiny runs 8 packs of ~350 bytes: 8 blocks of disk each."""
    written: dict[str, bytes] = {}
    store, run_id, files, notes = _archive(tmp_path, lambda dump: written.update(_series_dump(dump, 4, 3)))
    assert len(_packs(store)) == 1 and notes == []
    assert {f.path for f in files} == set(written)
    assert all(store.read_file(run_id, name) == content for name, content in written.items())


def test_a_big_dump_keeps_a_pack_per_series(tmp_path):
    """Above SMALL_DUMP_BYTES each series keeps its own pack, so reading one dump decodes only its module's."""
    per_file = archiver.SMALL_DUMP_BYTES // 8  # 3 modules x 3 passes of this: over the bound
    written: dict[str, bytes] = {}
    store, run_id, _files, _notes = _archive(tmp_path, lambda dump: written.update(_series_dump(dump, 3, 3, per_file // 2)))
    assert len(_packs(store)) == 4  # 3 series and the log stored alone
    assert all(store.read_file(run_id, name) == content for name, content in written.items())


def test_the_pool_takes_text_series_then_the_costliest_first(tmp_path, monkeypatch):
    """Longest first by bytes, not by file count: a series of few large dumps ordered after many small ones ran
    alone at the end of the large benchmark dump (0.27 s of 0.76 s). Many tiny files alone cost by their count. A
    module's HLO text series goes before all: it holds the stage dumps parsed beside the archive for the index."""
    taken: list[str] = []
    store_series = archiver.OutputArchiver._store_series

    def recording(self, key, *args):
        taken.append("alone" if key is None else f"module {key[1]}")
        return store_series(self, key, *args)

    monkeypatch.setattr(archiver.OutputArchiver, "_store_series", recording)
    store = LocalStore.open(tmp_path / "s")
    run_id, staging = store.begin_run()
    dump = staging / "dump"
    written: dict[str, bytes] = {}
    for module, count, pad in ((0, 3, 200_000), (1, 6, 500)):  # module 0: 3 graphs of 400 kB; module 1: 6 of 2 kB
        for step in range(count):
            name = f"module_{module:04d}.jit_g{module}.cpu.{step:04d}.pass{step}.after_pipeline.dot"
            written[name] = _pass(step) + os.urandom(pad).hex().encode()
    written["module_0002.jit_h.before_optimizations.txt"] = _pass(1)  # module 2's text: a few hundred bytes
    for i in range(40):  # 40 logs of a few bytes, stored alone: 40 opens cost more than module 0's bytes
        written[f"log{i}.txt"] = f"line {i}\n".encode()
    for name, content in written.items():
        (dump / name).write_bytes(content)
    work = store.archiver(staging, workers=1)  # one worker: the pool runs the series in the order given
    files = work.finish()
    store.commit_run(run_id, staging, files, {"manifest.json": "{}"})
    assert taken == ["module 2", "alone", "module 0", "module 1"]
    assert all(store.read_file(run_id, name) == content for name, content in written.items())
