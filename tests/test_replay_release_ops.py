"""replay/release_ops.py: ``xlarun replay REF --jaxlib A,B --profile``, the ops that moved between jaxlib releases,
on the captured MLP step replayed in the compat venvs (jaxlib 0.4.30's CPU client traces no op: said, not failed)."""

from __future__ import annotations

import json

import pytest

from tests.compat_support import require_compat

pytest.importorskip("jax")


@pytest.mark.slow
def test_ops_that_moved_between_releases(jax_run, cli):
    for key in ("jax-0.4.30", "jax-0.7.2"):
        require_compat(key)
    store, _ = jax_run
    result = cli(
        "replay", "train_step", "--store", store.root, "--jaxlib", "0.4.30,0.7.2,current", "-n", "4", "--profile", "--json"
    )
    data = json.loads(result.stdout)
    old, middle, current = data["releases"]
    assert [r["verdict"] for r in data["releases"]] == ["match"] * 3, result.output
    # 0.4.30 ran the step but its profiler timed no op: the others are compared with 0.7.2, and the notes say why
    assert old["op_each_ns"] is None and old["moved_ops"] == [] and data["ops_against"] == "0.7.2"
    assert any(note.startswith("0.4.30 timed no op") for note in data["notes"])
    assert middle["op_each_ns"] and current["op_each_ns"] and middle["moved_ops"] == []
    moves = current["moved_ops"]
    assert 0 < len(moves) <= 10
    a, b = middle["op_each_ns"], current["op_each_ns"]
    paired = [m for m in moves if m["a_ns"] is not None and m["b_ns"] is not None]
    assert paired, moves  # both releases make most of the step's fusions under the same names
    for move in moves:
        assert move["a_ns"] == a.get(move["op"]) and move["b_ns"] == b.get(move["op"])
        if move in paired:
            assert move["ratio"] == pytest.approx(move["b_ns"] / move["a_ns"])
    # paired ops first, by how much their time per execution moved; no other paired op moved more than the last shown
    assert moves[: len(paired)] == paired
    changes = [abs(m["change_ns"]) for m in paired]
    assert changes == sorted(changes, reverse=True)
    left_out = [abs(b[op] - a[op]) for op in set(a) & set(b) if op not in {m["op"] for m in moves}]
    assert all(change <= changes[-1] for change in left_out)

    human = cli("replay", "train_step", "--store", store.root, "--jaxlib", "0.7.2,current", "-n", "3", "--profile", "-q")
    assert human.exit_code == 0, human.output
    assert "ops that moved most from 0.7.2 to " in human.stdout.replace("\n", " ")
    assert "each on 0.7.2" in human.stdout and "ratio" in human.stdout
