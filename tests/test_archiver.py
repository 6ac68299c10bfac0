"""Archiving while the job runs: settled files go early, changed ones again, raw files only at the end."""

from __future__ import annotations

import os
import time

import pytest

import xlarun.archiver as archiver
from xlarun.blobs import content_digest
from xlarun.store import Store


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
    store = Store.open(tmp_path / "s")
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
    store = Store.open(tmp_path / "s")
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
    store = Store.open(tmp_path / "s")
    _run_id, staging = store.begin_run()
    work = store.archiver(staging)
    work.start()
    (staging / "dump" / "a.txt").write_bytes(b"a")
    work.abandon()
    assert (staging / "dump" / "a.txt").exists()
    with store.lock(exclusive=True):  # the shared lock was released
        pass


def test_a_file_renamed_while_it_is_read_is_archived_under_its_new_name(tmp_path):
    store = Store.open(tmp_path / "s")
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
