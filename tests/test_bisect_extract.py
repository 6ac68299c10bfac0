"""xlarun extract (issue 26, item 5): an instruction and its K-hop operands as a standalone module carrying the
values a real run computed, on the bisect examples' captures (tests/conftest.py's bisect_store)."""

from __future__ import annotations

import json

import pytest

from tests.test_bisect_first_move import TEXT  # the same small module
from xlarun.bisect.extract import extract_instruction


def test_the_operands_within_k_hops_stay_and_the_rest_become_parameters():
    alone = extract_instruction(TEXT, "sum", hops=0)
    assert (alone.kept, alone.parameters) == (["zero", "sum"], ["div"])  # a constant operand always comes along
    assert "ENTRY %extract_sum (div: f32[4]{0}) -> f32[] {" in alone.text and "%add (a: f32[]" in alone.text
    assert "  ROOT %sum = f32[] reduce(%div, %zero)" in alone.text
    two = extract_instruction(TEXT, "%sum", hops=2)
    assert (two.kept, two.parameters) == (["three", "b3", "div", "zero", "sum"], ["x"])  # parameters are never kept


def test_an_unknown_instruction_names_the_near_ones():
    from xlarun.errors import InputError

    with pytest.raises(InputError, match=r"no instruction 'div\.7'") as caught:
        extract_instruction(TEXT, "div.7")
    assert "did you mean: div" in caught.value.one_line()


@pytest.mark.slow
def test_an_extract_replays_to_the_value_the_run_computed(cli, bisect_store, tmp_path):
    out = tmp_path / "repro" / "mul2"
    result = cli("extract", "residual", "mul.2", "-o", out, "--json", "--store", bisect_store)
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["kept"] == ["constant.5", "broadcast.1", "div.1", "mul.2"]
    assert data["parameters"] == ["x.1"] and data["has_values"]
    snapshot = tmp_path / "repro" / "mul2.snapshot.pb"
    assert (
        data["files"] == [str(out) + ".hlo.txt", str(snapshot)] and snapshot.stat().st_size < 40_000
    )  # 4,096 floats in, 4,096 out
    replayed = json.loads(cli("replay", snapshot, "--json", "--store", tmp_path / "none").stdout)
    assert (replayed["verdict"], replayed["compared_with"], replayed["max_abs_error"]) == ("match", ["snapshot result"], 0)


@pytest.mark.slow
def test_an_extract_from_the_culprit_step_holds_what_the_pass_made(cli, bisect_store, tmp_path):
    """algsimp's step 6: mul.2 now multiplies x by the folded constant; hops 0 keeps it with its new operand as a value."""
    result = cli(
        "extract", "residual", "mul.2", "--step", "6", "-k", "0", "-o", tmp_path / "s6", "--json", "--store", bisect_store
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["kept"] == ["mul.2"] and data["parameters"] == ["x.1", "broadcast.2"]
    replayed = json.loads(cli("replay", tmp_path / "s6.snapshot.pb", "--json", "--store", tmp_path / "none").stdout)
    assert replayed["verdict"] == "match" and replayed["arguments"] == "snapshot"
    missing = cli("extract", "residual", "mul.9", "--json", "--store", bisect_store)
    assert missing.exit_code == 2 and "did you mean: mul.2, mul.3" in json.loads(missing.stdout)["hint"]
