"""Runs xlarun made for its own purposes (a bisection's reruns, tagged `bisect`) never answer a plain name, 'latest'
or a module REF without a run, and `runs` leaves them out unless --all (issue: after `bisect SPEC --check`, `show NAME`
resolved to a rerun with passes disabled, and `runs` gained 9 rows)."""

from __future__ import annotations

import json

import pytest

import xlarun
from xlarun.errors import RefError
from xlarun.navigate.refs import resolve_module, resolve_run
from xlarun.store.facade import LocalStore

MODULE = """HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY main.3 {
  Arg_0.1 = f32[4]{0} parameter(0)
  ROOT add.2 = f32[4]{0} add(Arg_0.1, Arg_0.1)
}
"""


@pytest.fixture
def store_with_a_rerun(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0000.jit_f.before_optimizations.txt").write_text(MODULE)
    front = xlarun.open_store(tmp_path / "store")
    mine = front.import_dump(dump, name="step").id
    rerun = front.import_dump(dump, name="step").id
    front.close()
    store = LocalStore.open(tmp_path / "store")
    tags = json.dumps({"bisect": "20261125-000000-ab", "bisect_role": "rerun"})
    with store.index.transaction():
        store.index.conn.execute("UPDATE runs SET tags=? WHERE run_id=?", (tags, rerun))
    return store, mine, rerun


def test_plain_names_latest_and_module_refs_resolve_to_the_users_run(store_with_a_rerun):
    store, mine, rerun = store_with_a_rerun
    assert resolve_run(store.index, "step").run_id == mine
    assert resolve_run(store.index, None).run_id == mine
    assert resolve_module(store.index, "jit_f").run_id == mine
    assert resolve_run(store.index, rerun).run_id == rerun  # its id still names it
    assert resolve_run(store.index, rerun).made_by_xlarun == "a bisect rerun"


def test_a_name_that_only_reruns_carry_is_refused_naming_them(store_with_a_rerun):
    store, mine, _rerun = store_with_a_rerun
    with store.index.transaction():
        store.index.conn.execute("UPDATE runs SET name='other' WHERE run_id=?", (mine,))
    with pytest.raises(RefError, match="names only runs xlarun made for its own purposes"):
        resolve_run(store.index, "step")


def test_runs_leaves_reruns_out_unless_all_and_marks_them(store_with_a_rerun, cli):
    store, mine, rerun = store_with_a_rerun
    plain = cli("runs", "--store", store.root)
    listed = plain.stdout.split("\n1 run(s)")[0]
    assert mine in listed and rerun not in listed and "1 run(s) xlarun made for a bisection" in plain.stdout
    everything = cli("runs", "--all", "--store", store.root)
    assert rerun in everything.stdout and "(bisect rerun)" in everything.stdout
