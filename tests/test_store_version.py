"""Making a store (xlarun.store.store_version): whole or not at all. A creation a Ctrl-C cut short is finished by
the next command, eight processes making the same new store at once all open it, and a folder that holds anything
else is still refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xlarun.errors import StoreError
from xlarun.store.facade import LocalStore
from xlarun.store.store_version import STORE_VERSION, make_store


@pytest.mark.parametrize(
    "left", [["blobs"], ["blobs", "runs"], ["blobs", "runs", "staging"], ["blobs", "runs", "staging", ".VERSION.tmp-4242"]]
)
def test_a_store_whose_making_was_cut_short_is_finished_by_the_next_command(tmp_path, left):
    root = tmp_path / "s"
    root.mkdir()
    for name in left:
        (root / name).mkdir() if not name.startswith(".") else (root / name).write_text("")
    store = LocalStore.open(root)
    assert (root / "VERSION").read_text() == f"{STORE_VERSION}\n" and store.run_ids() == []
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".VERSION.tmp-")) >= [
        "VERSION",
        "blobs",
        "runs",
        "staging",
    ]


@pytest.mark.parametrize("what", ["a file", "a run in runs", "a file in blobs"])
def test_a_folder_holding_anything_else_is_refused_and_left_as_it_is(tmp_path, what):
    root = tmp_path / "s"
    (root / "runs").mkdir(parents=True)
    target = {"a file": root / "notes.txt", "a run in runs": root / "runs" / "x", "a file in blobs": root / "blobs" / "x"}[what]
    target.parent.mkdir(exist_ok=True)
    target.write_text("mine")
    with pytest.raises(StoreError, match="exists and is not an xlarun store"):
        make_store(root)
    assert not (root / "VERSION").exists() and target.read_text() == "mine"


def test_eight_processes_making_the_same_new_store_at_once_all_open_it(tmp_path):
    root = tmp_path / "new" / "store"
    start = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        "from xlarun.store.facade import LocalStore\n"
        f"while not os.path.exists({str(start)!r}): time.sleep(0.001)\n"
        f"LocalStore.open({str(root)!r}).close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) for _ in range(8)]
    start.touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert (root / "VERSION").read_text() == f"{STORE_VERSION}\n"
    assert sorted(p.name for p in root.iterdir()) == ["VERSION", "blobs", "runs", "staging"]  # no temporary left
