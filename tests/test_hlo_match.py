"""Instructions matched by structure (hlo/match.py, used by `xlarun diff`): renumbering and reordering are not
changes, and a change made on purpose is found and nothing else. Fixtures: tests/fixtures/hlo/structdiff/make.py
(a real JAX step, and the same step with one op inserted), made by our own script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xlarun.hlo import parse_hlo_text
from xlarun.hlo.match import StructureHashes, match_by_structure
from xlarun.see.diff import structural_summary

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hlo" / "structdiff"


def _module(name: str):
    return parse_hlo_text((FIXTURES / name).read_text())


def _renumbered(text: str) -> str:
    """Every constant.N, broadcast.N and multiply.N given another number, as a capture of an edited program does."""
    names = sorted(set(re.findall(r"\b((?:constant|broadcast|multiply)\.\d+)\b", text)))
    shuffled = names[1:] + names[:1]
    table = {old: f"{old.split('.')[0]}.{900 + i}" for i, old in enumerate(shuffled)}
    return re.sub(r"\b((?:constant|broadcast|multiply)\.\d+)\b", lambda m: table[m.group(1)], text)


def test_the_one_op_inserted_on_purpose_is_all_that_differs():
    summary = structural_summary(_module("a.hlo"), _module("b.hlo"), by_position=True)
    assert summary.added == {"multiply": 2, "constant": 1, "broadcast": 1}  # `* 2.0` forward and in the gradient
    assert summary.removed == {} and summary.changed == {}
    assert summary.matched_by_position == 0
    # only the direct users of the new op take other operands
    assert 0 < sum(summary.rewired.values()) <= 12


def test_after_optimization_the_change_is_one_fusion():
    summary = structural_summary(_module("a_opt.hlo"), _module("b_opt.hlo"), by_position=True)
    assert summary.removed == {} and summary.changed == {"fusion": 1}
    assert summary.added["multiply"] == 2


def test_renumbered_instructions_are_not_changes():
    text = (FIXTURES / "a.hlo").read_text()
    summary = structural_summary(parse_hlo_text(text), parse_hlo_text(_renumbered(text)), by_position=True)
    assert summary.unchanged, summary.lines()


def test_reordered_independent_instructions_are_not_changes():
    text = (FIXTURES / "a.hlo").read_text()
    lines = text.splitlines()
    constants = [i for i, line in enumerate(lines) if re.match(r"\s*constant\.\d+ = ", line)]
    assert len(constants) >= 2
    first, second = constants[0], constants[1]
    lines[first], lines[second] = lines[second], lines[first]
    summary = structural_summary(parse_hlo_text(text), parse_hlo_text("\n".join(lines)), by_position=True)
    assert summary.unchanged, summary.lines()


def test_names_alone_mislead_where_structure_does_not():
    """The same renumbering, matched by name (what diff did before): constants of other values paired up."""
    text = (FIXTURES / "a.hlo").read_text()
    before, after = parse_hlo_text(text), parse_hlo_text(_renumbered(text))
    mapping = match_by_structure(StructureHashes(before), StructureHashes(after))
    after_by_name = {i.name: i for i in after.instructions()}
    for instruction in before.instructions():
        other = after_by_name[mapping[instruction.name]]
        assert (other.opcode, other.literal) == (instruction.opcode, instruction.literal)


@pytest.mark.slow
def test_a_chain_100000_deep_is_hashed_without_recursion():
    body = "\n".join(f"  n.{i} = f32[4]{{0}} negate(n.{i - 1})" for i in range(1, 100_000))
    text = (
        f"HloModule deep\n\nENTRY main {{\n  n.0 = f32[4]{{0}} parameter(0)\n{body}\n  ROOT r = f32[4]{{0}} negate(n.99999)\n}}\n"
    )
    module = parse_hlo_text(text)
    hashes = StructureHashes(module)
    assert len(hashes.full) == 100_001 and hashes.full["n.5"] != hashes.full["n.6"]
