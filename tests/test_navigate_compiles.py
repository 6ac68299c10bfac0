"""One function compiled more than once in a run, told apart (xlarun.navigate.compiles): on a real capture of a
step compiled four ways (as first called, other shapes, donating its parameters, its batch sharded over 4 devices)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xlarun.navigate.compiles import differences, facts_of_text

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "recompiles" / "spec.yaml"  # docs/navigate.md captures it too


def test_the_same_hlo_compiled_again_is_said_so():
    text = "HloModule jit_f, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n\nENTRY %main (x: f32[2]) -> f32[2] {\n  ROOT %x = f32[2]{0} parameter(0)\n}\n"
    first, again = facts_of_text(1, "(f32[2]) -> f32[2]", "abc", text), facts_of_text(3, "(f32[2]) -> f32[2]", "abc", text)
    assert differences(first, again) == ["the same HLO, compiled again"]
    other = facts_of_text(5, "(f32[2]) -> f32[2]", "def", text)
    assert differences(first, other) == ["other HLO with the same shapes (xlarun diff 1 5)"]


@pytest.mark.slow
def test_four_compiles_of_one_step_are_told_apart(cli, tmp_path):
    pytest.importorskip("jax")
    store = tmp_path / "store"
    assert cli("capture", EXAMPLE, "--store", store, "-q").exit_code == 0
    data = json.loads(cli("modules", "--json", "--store", store).stdout)
    steps = sorted(m["module_id"] for m in data["modules"] if m["name"] == "jit_step")
    told = {r["module_id"]: r["differences"] for r in data["recompiles"] if r["name"] == "jit_step"}
    assert len(steps) == 4 and set(told) == set(steps[1:])  # each later compile, against the first
    assert all(r["first"] == steps[0] for r in data["recompiles"] if r["name"] == "jit_step")
    assert told[steps[1]] == [
        "other shapes: (f32[8,8], f32[32,8]) -> (f32[8,8], f32[]) (was (f32[8,8], f32[16,8]) -> (f32[8,8], f32[]))"
    ]
    assert told[steps[2]] == ["donates parameter(s) 0 (was nothing)"]
    assert told[steps[3]] == ["4 partitions (was 1)", "shards x.1 (parameter 1) {devices=[4,1]<=[4]}"]
    table = cli("modules", "--store", store).stdout
    assert (
        "compiled more than once" in table and f"jit_step module_{steps[2]:04d} against module_{steps[0]:04d}: donates" in table
    )
