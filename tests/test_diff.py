"""diff: what a pass did to a module (real pass-by-pass dumps), and a module across two runs."""

from __future__ import annotations

import json

import pytest

from xlarun.hlo import parse_hlo_text
from xlarun.navigate.refs import resolve_module
from xlarun.see.diff import pass_diff, pass_steps, structural_summary, without_provenance

from .conftest import CONFIGS, write_spec
from .see_support import copy_store

BEFORE = """HloModule m, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

ENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  %add.1 = f32[4]{0} add(%a, %b), metadata={op_name="jit(f)/add" source_file="/home/me/f.py" source_line=3}
  %mul.2 = f32[4]{0} multiply(%add.1, %b)
  ROOT %neg.3 = f32[4]{0} negate(%mul.2)
}
"""
AFTER_FUSION = """HloModule m, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

%fused_computation (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[4]{0} parameter(1)
  %add.1.clone = f32[4]{0} add(%p0, %p1)
  %mul.2.clone = f32[4]{0} multiply(%add.1.clone, %p1)
  ROOT %neg.3.clone = f32[4]{0} negate(%mul.2.clone)
}

ENTRY %main (a: f32[4], b: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  ROOT %neg_fusion = f32[4]{0} fusion(%a, %b), kind=kLoop, calls=%fused_computation
}
"""


def test_structural_summary_of_a_fusion():
    summary = structural_summary(parse_hlo_text(BEFORE), parse_hlo_text(AFTER_FUSION))
    assert (summary.instructions_before, summary.instructions_after) == (5, 8)
    assert summary.added == {"fusion": 1}
    # matched by structure to their clones inside the fusion: moved there, not removed
    assert summary.removed == {}
    assert summary.fused == {"add": 1, "multiply": 1, "negate": 1}
    assert [(f.name, f.kind, f.fused_instructions, f.opcodes) for f in summary.fusions_formed] == [
        ("neg_fusion", "kLoop", 3, ["add", "multiply", "negate"])
    ]
    assert summary.computations_added == ["fused_computation"]
    assert summary.opcode_delta == {"fusion": 1, "parameter": 2}
    lines = summary.lines()
    assert lines[0] == "instructions: 5 -> 8 (+3)"
    assert "fusions formed: 1 (neg_fusion kLoop: add, multiply, negate)" in lines


def test_structural_summary_matches_renamed_instructions_by_position():
    renamed = BEFORE.replace("add.1", "add.7").replace("mul.2", "mul.8").replace("f32[4]", "f32[8]").replace("{0}", "{0}")
    summary = structural_summary(parse_hlo_text(BEFORE), parse_hlo_text(renamed), by_position=True)
    assert summary.matched_by_position == 2
    assert not summary.added and not summary.removed
    assert summary.changed == {"add": 1, "multiply": 1, "negate": 1, "parameter": 2}  # every shape grew
    same = structural_summary(parse_hlo_text(BEFORE), parse_hlo_text(BEFORE))
    assert same.unchanged and same.lines()[-1].startswith("no structural change")


def test_without_provenance_drops_metadata_and_tables():
    text = BEFORE.replace("HloModule m, entry", "HloModule m, entry") + '\nFileNames\n1 "/x.py"\n\n'
    stripped = without_provenance(text)
    assert "metadata" not in stripped and "/home/me" not in stripped and "FileNames" not in stripped
    assert "%add.1 = f32[4]{0} add(%a, %b)\n" in stripped


@pytest.fixture(scope="module")
def passes(jax_passes_run):
    store, _result = jax_passes_run
    module = resolve_module(store.index, "train_step")
    assert module.passes, "the jax-passes capture has no per-pass dumps (is --xla_dump_hlo_pass_re reaching XLA unquoted?)"
    return store, module


def test_fusion_pass_forms_fusions(passes, cli):
    store, _module = passes
    out = cli("diff", "train_step", "--pass", "fusion", "--store", store.root)
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    assert "after fusion" in text and "fusions formed:" in text and "now inside fusions:" in text
    assert "\n+%fused_computation" in text and "\n-  %" in text  # the text diff follows the summary
    data = json.loads(cli("diff", "train_step", "--pass", "fusion", "--json", "--store", store.root).stdout)
    summary = data["summary"]
    assert summary["added"]["fusion"] == len(summary["fusions_formed"]) >= 5
    assert summary["instructions_after"] > summary["instructions_before"]
    assert all(f["kind"].startswith("k") and f["fused_instructions"] >= 1 for f in summary["fusions_formed"])
    assert ".after_fusion." in data["after_path"] and data["unified"][0].startswith("--- ")


def test_pass_diff_compares_with_the_previous_dump(passes):
    store, module = passes
    steps = pass_steps(module)
    fusion = next(s for s in steps if s.after_pass == "fusion")
    previous = max(s.step for s in steps if s.step < fusion.step)
    diff = pass_diff(store, module, "fusion")
    assert diff.before_path == next(s.path for s in steps if s.step == previous)
    assert diff.after_path == fusion.path
    first = pass_diff(store, module, to_step=steps[0].step)
    assert first.before_path.endswith(".before_optimizations.txt")  # the first step is compared with the module as it came in


def test_pass_that_ran_twice_notes_its_other_runs(passes, cli):
    store, module = passes
    algsimp = [s.step for s in pass_steps(module) if s.after_pass == "algsimp"]
    assert len(algsimp) >= 2
    out = cli("diff", "train_step", "--pass", "algsimp", "--summary", "--store", store.root)
    assert out.exit_code == 0
    assert "algsimp also ran at steps" in out.stdout and "--to STEP" in out.stdout
    assert "\n@@" not in out.stdout  # --summary: no text diff


def test_from_to_steps(passes, cli):
    store, module = passes
    steps = [s.step for s in pass_steps(module)]
    out = cli("diff", "train_step", "--from", steps[0], "--to", steps[-1], "--json", "--store", store.root)
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    assert f"step {steps[0]} " in data["before"] and f"step {steps[-1]} " in data["after"]
    assert data["summary"]["instructions_after"] == module.passes[-1].instr_count


def test_unknown_pass_and_missing_choice(passes, cli):
    store, _ = passes
    out = cli("diff", "train_step", "--pass", "fusio", "--store", store.root)
    assert out.exit_code == 2 and "no dump after a pass named 'fusio'" in out.stderr and "did you mean fusion" in out.stderr
    out = cli("diff", "train_step", "--store", store.root)
    assert out.exit_code == 2 and "--pass NAME" in out.stderr


@pytest.fixture(scope="module")
def two_runs(jax_run, tmp_path_factory):
    """The bundled JAX example captured twice into one store: hidden size 128 (jax_run) and 64."""
    store, first = jax_run
    both = copy_store(store, tmp_path_factory.mktemp("two") / "store")
    spec = write_spec(
        tmp_path_factory.mktemp("spec64"),
        (
            f"name: jax-mlp-64\nscript: {CONFIGS / 'examples' / 'jax_mlp.py'}\nargs: ['--hidden', '64', '--steps', '1']\nframework: jax\n"
            "dump:\n  formats: [text]\n"
        ),
    )
    from xlarun.capture.launch import capture

    second = capture(spec, both)
    return both, first.run_id, second.run_id


def test_cross_run_diff(two_runs, cli):
    store, first, second = two_runs
    out = cli("diff", f"{first}/jit_train_step", f"{second}/jit_train_step", "--json", "--store", store.root)
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    summary = data["summary"]
    assert summary["instructions_before"] == summary["instructions_after"]
    assert not summary["added"] and not summary["removed"] and not summary["opcode_delta"]
    assert summary["changed"]["dot"] >= 4 and summary["changed"]["parameter"] >= 4  # 128 -> 64 wide
    assert any("128" in line for line in data["unified"] if line.startswith("-")) and any(
        "64" in line for line in data["unified"] if line.startswith("+")
    )
    assert not any("metadata=" in line for line in data["unified"])
    # the second REF may be a run: the module of the same name there
    text = cli("diff", f"{first}/jit_train_step", second, "--summary", "--store", store.root)
    assert (
        text.exit_code == 0
        and "instructions:" in text.stdout
        and "changed:" in text.stdout
        and "opcode counts" not in text.stdout
    )
    same = cli("diff", f"{first}/jit_train_step", f"{first}/jit_train_step", "--store", store.root)
    assert same.exit_code == 2 and "same module" in same.stderr
