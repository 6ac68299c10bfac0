"""gc merging small packs while other processes read: two readers read every file of every tiny run over and over
(each file looked up, then its pack opened: the window a merge removes packs in) while new tiny runs arrive and gc
merges their packs again and again. No read fails or returns other bytes, and the store is sound at the end."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ..test_pack_collect import tiny_runs
from .support import assert_sound, xlarun

READER = """
import json, sys, time
from pathlib import Path
from xlarun.store.facade import LocalStore
from xlarun.store.pack_format import content_digest
root, stop = Path(sys.argv[1]), Path(sys.argv[2])
reads = errors = 0
first = None
while not stop.exists():
    store = LocalStore.open(root)  # a new process's view each round, as a user's command has
    for run_id in store.run_ids():
        for entry in store.stored_files(run_id):
            try:
                ok = content_digest(store.read_file(run_id, entry.path)) == entry.digest
            except Exception as exc:
                ok, first = False, first or f"{type(exc).__name__}: {exc}"
            reads, errors = reads + 1, errors + (not ok)
    store.close()
print(json.dumps({"reads": reads, "errors": errors, "first": first}))
"""


@pytest.mark.slow
def test_readers_never_miss_a_file_while_gc_merges_small_packs(tmp_path, figures):
    root, stop = tmp_path / "store", tmp_path / "stop"
    runs = tiny_runs(root, 40)
    readers = [
        subprocess.Popen([sys.executable, "-c", READER, str(root), str(stop)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    merged = rounds = 0
    try:
        for seed in range(1, 6):
            time.sleep(0.3)  # the readers are between lookups and reads of the packs about to go
            runs.update(tiny_runs(root, 20, seed=seed))
            gc = xlarun("gc", "--json", store=root)
            out, err = gc.communicate(timeout=300)
            assert gc.returncode == 0, err
            merged += json.loads(out)["merged"]
            rounds += 1
    finally:
        stop.touch()
        answers = [json.loads(reader.communicate(timeout=300)[0]) for reader in readers]
    figures(
        gc_rounds=rounds, packs_merged=merged, reads=sum(a["reads"] for a in answers), errors=sum(a["errors"] for a in answers)
    )
    assert merged >= 40 + 4 * 20  # every round had new small packs to merge
    assert all(a["errors"] == 0 for a in answers), answers
    assert all(a["reads"] > 0 for a in answers)
    state = assert_sound(root)
    assert set(state.runs) == set(runs)
