"""The first instruction whose value moves in a bisection's culprit step (xlarun.bisect.first_move), on the real
pass-by-pass captures of tests/test_bisect.py: algsimp's folded residual and float-normalization-bf16."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_bisect import _bisect_json
from xlarun.bisect.first_move import FirstMove, expose_values, find_first_move

TEXT = """HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[]}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4]{0} parameter(0)
  %three = f32[] constant(3)
  %b3 = f32[4]{0} broadcast(%three), dimensions={}
  %div = f32[4]{0} divide(%x, %b3), metadata={op_name="jit(f)/div" source_file="/u/job.py" source_line=7}
  %zero = f32[] constant(0)
  ROOT %sum = f32[] reduce(%div, %zero), dimensions={0}, to_apply=%add
}
"""


def test_every_array_value_of_the_entry_becomes_an_output_and_xla_compiles_it():
    pytest.importorskip("jax")
    from xlarun.replay import pjrt

    exposed, names = expose_values(TEXT)
    assert names == ["b3", "div", "sum"]  # in the module's order, the parameter and the constants aside
    assert "entry_computation_layout" not in exposed and "ROOT %sum" not in exposed
    assert "ROOT %xlarun.values = (f32[4]{0}, f32[4]{0}, f32[]) tuple(%b3, %div, %sum)" in exposed
    assert pjrt.text_to_module_proto(exposed)  # XLA's own parser takes it


def test_the_first_value_that_differs_is_named_with_its_source_line_and_the_new_operands():
    changed = TEXT.replace(
        "%div = f32[4]{0} divide(%x, %b3)",
        "%third = f32[] constant(0.333)\n  %bt = f32[4]{0} broadcast(%third), dimensions={}\n  %div = f32[4]{0} multiply(%x, %bt)",
    )
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)

    def run(text: str) -> list:  # evaluates the two tiny modules as XLA would, on x
        div = x * np.float32(0.333) if "%bt" in text else x / np.float32(3)
        values = {"three": np.float32(3), "b3": np.full(4, 3, np.float32), "div": div, "zero": np.float32(0), "sum": div.sum()}
        values |= {"third": np.float32(0.333), "bt": np.full(4, 0.333, np.float32)}
        return [values[n] for n in expose_values(text)[1]]

    found = find_first_move(run, TEXT, changed, 1e-5, 1e-5)
    assert found.moved is not None and (found.moved.name, found.moved.opcode) == ("div", "multiply")
    assert found.moved.source == "/u/job.py:7" and found.moved.op_name == "jit(f)/div"
    assert found.moved.new_operands == ["bt"] and found.unpaired == 1
    assert found.moved.max_abs_error == pytest.approx(float(abs(x[3] / 3 - x[3] * np.float32(0.333))), rel=1e-3)
    assert found.visible is not None and found.visible.name == "div"  # 4e-4 is past 1e-5 on every element
    # every paired value's error is kept, the search going on past the first (the report colours the graph by them)
    assert set(found.value_errors) == {"b3", "div", "sum"} and found.value_errors["b3"] == (0.0, 0.0)
    assert found.value_errors["div"] == (found.moved.max_abs_error, found.moved.max_rel_error)
    assert found.past_tolerance == ["div", "sum"] and found.compared == 3
    assert FirstMove.from_dict(json.loads(json.dumps(found.to_dict()))).value_errors["sum"] == list(found.value_errors["sum"])
    same = find_first_move(run, TEXT, TEXT, 1e-5, 1e-5)
    assert same.moved is None and same.compared == 3


REORDER_BEFORE = """HloModule jit_g, entry_computation_layout={(f32[2,3]{1,0})->f32[2,1]{1,0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[2,3]) -> f32[2,1] {
  %x = f32[2,3]{1,0} parameter(0)
  %scaled = f32[2,3]{1,0} multiply(%x, %x)
  %neg.0 = f32[2,3]{1,0} negate(%scaled)
  %zero = f32[] constant(0)
  %reduce_sum.1 = f32[2]{0} reduce(%neg.0, %zero), dimensions={1}, to_apply=%add
  ROOT %reshape.120 = f32[2,1]{1,0} reshape(%reduce_sum.1)
}
"""


def test_a_value_the_pass_rewrote_is_passed_over_when_what_reads_it_is_identical():
    """The benchmark's training step: algsimp turned reduce(negate(x)) into negate(reduce(x)); reduce_sum.1 keeps its
    name but now holds the sum before the negate, so it differs, by its sign, though the reshape reading it does not."""
    after = (
        REORDER_BEFORE.replace("  %neg.0 = f32[2,3]{1,0} negate(%scaled)\n", "")
        .replace("reduce(%neg.0, %zero)", "reduce(%scaled, %zero)")
        .replace("reshape(%reduce_sum.1)", "reshape(%negate)")
        .replace("  ROOT %reshape.120", "  %negate = f32[2]{0} negate(%reduce_sum.1)\n  ROOT %reshape.120")
    )
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)

    def run(text: str) -> list:
        scaled = x * x
        rewritten = "%negate" in text
        total = scaled.sum(axis=1) if rewritten else (-scaled).sum(axis=1)
        values = {"scaled": scaled, "neg.0": -scaled, "reduce_sum.1": total, "negate": -total}
        values["reshape.120"] = (-total if rewritten else total).reshape(2, 1)
        return [values[n] for n in expose_values(text)[1]]

    found = find_first_move(run, REORDER_BEFORE, after, 1e-5, 1e-5)
    assert found.value_errors["reduce_sum.1"][0] > 100 and found.value_errors["reshape.120"] == (0.0, 0.0)
    assert found.rewritten == ["reduce_sum.1"] and found.moved is None and found.visible is None
    assert any("rewritten, not moved (1): reduce_sum.1" in note for note in found.notes)
    # on the transformer step the reshape reading it differs by a rounding: still not where the numbers move
    rounded = find_first_move(
        lambda text: [
            v + np.float32(1e-6) if n == "reshape.120" and "%negate" in text else v
            for n, v in zip(expose_values(text)[1], run(text), strict=True)
        ],
        REORDER_BEFORE,
        after,
        1e-5,
        1e-5,
    )
    assert rounded.rewritten == ["reduce_sum.1"] and rounded.moved.name == "reshape.120" and rounded.visible is None
    # a real move still travels: scale x by 3 after the step and the reduce is the first mover, the reshape visible
    moved = find_first_move(
        lambda text: [v * 3 if n != "scaled" else v for n, v in zip(expose_values(text)[1], run(text), strict=True)],
        REORDER_BEFORE,
        after,
        1e-5,
        1e-5,
        run_before=run,
    )
    assert moved.rewritten == [] and (moved.moved.name, moved.visible.name) == ("reduce_sum.1", "reduce_sum.1")


@pytest.mark.slow
def test_algsimp_moves_the_multiply_on_the_programs_line_and_the_sum_shows_it(cli, bisect_store):
    code, data = _bisect_json(cli, "residual", "--store", bisect_store)
    assert code == 1 and data["culprit_pass"] == "algsimp"
    assert (data["culprit_run"], data["culprit_runs"]) == (1, 2)  # algsimp runs twice in the timeline: the first did it
    found = FirstMove.from_dict(data["first_move"])
    # (x / 3) * 3 became x * (1/3 * 3): the multiply's value moves first, fed by the folded constant's broadcast
    assert (found.moved.name, found.moved.opcode, found.moved.op_name) == ("mul.2", "multiply", "jit(residual)/mul")
    assert found.moved.source.endswith("configs/examples/bisect_algsimp.py:16") and found.moved.new_operands == ["broadcast.2"]
    assert 0 < found.moved.max_abs_error < 1e-5  # the residual is tiny where it starts...
    assert found.visible.name == "mul.3" and found.visible.max_abs_error == pytest.approx(1.56, abs=0.01)  # ...x 1e6


@pytest.mark.slow
def test_float_normalization_moves_the_first_bf16_multiply_now_in_f32(cli, bisect_store):
    code, data = _bisect_json(cli, "bf16_sum", "--store", bisect_store)
    assert code == 1 and data["culprit_pass"] == "float-normalization-bf16"
    found = FirstMove.from_dict(json.loads(json.dumps(data["first_move"])))
    assert (found.moved.name, found.moved.shape) == ("mul.2", "f32[1000]{0}")  # a * b, now in f32
    assert found.moved.source.endswith("configs/examples/bisect_bf16.py:15")
    assert sorted(found.moved.new_operands) == ["convert", "convert.1"] and found.moved.max_rel_error > 1e-3


@pytest.mark.slow
def test_a_stable_program_has_no_first_move_to_report(cli, bisect_store):
    code, data = _bisect_json(cli, "layer", "--store", bisect_store)
    assert code == 0 and data["verdict"] == "no-divergence" and data["first_move"] is None


@pytest.mark.slow
def test_a_pass_that_must_stay_on_is_still_named_when_it_moves_the_numbers(cli, bisect_store):
    """bf16 dots compile on CPU only through float-normalization-bf16, so every replay keeps it on and no step can
    diverge; bisect must still name it, not say "no step diverges", while excess precision moves the result by 0.015."""
    code, data = _bisect_json(cli, "attention", "--store", bisect_store)
    assert data["kept_passes"] == ["float-normalization-bf16"]
    assert code == 1 and data["verdict"] == "diverged" and data["culprit_pass"] == "float-normalization-bf16"
    assert data["error_after"]["max_abs_error"] == pytest.approx(0.0148, abs=0.002)  # 7.8328 -> 7.8475, as the job prints
    assert any("must stay on" in w and "xla_allow_excess_precision=false" in w for w in data["warnings"])
    found = FirstMove.from_dict(data["first_move"])
    assert found.moved is not None and "bisect_bf16_attention.py:" in (found.moved.source or "")
    assert found.against == "the reference with xla_allow_excess_precision=false" and found.unpaired == 0
