"""bench/render.py's synthetic modules: the sizes and shapes its figures claim."""

from __future__ import annotations

from collections import Counter

import pytest
from bench.render import _nodes
from bench.render_modules import SHAPES, synthetic_module

from xlarun.hlo import parse_hlo_text


@pytest.mark.parametrize("shape", SHAPES)
def test_a_module_has_about_the_instructions_asked_for(shape):
    module = parse_hlo_text(synthetic_module(1000, shape))
    assert 980 <= module.instruction_count() <= 1010


def test_the_mixed_module_has_fusions_loops_a_chain_and_a_fan_out():
    module = parse_hlo_text(synthetic_module(2000, "mixed"))
    opcodes = Counter(i.opcode for i in module.entry.instructions)
    assert opcodes["fusion"] == 83 and opcodes["while"] == 20  # 500 // 6 fusions, 496 // 24 loops
    readers = Counter(o for i in module.entry.instructions for o in i.operands)
    assert readers.most_common(1)[0][1] >= 500  # the fan-out's source
    with pytest.raises(ValueError, match="unknown shape"):
        synthetic_module(10, "star")


def test_the_node_count_is_read_from_what_render_says():
    assert _nodes("wrote m.svg: 564 nodes, xlarun's drawing of HLO from m.txt\noverview: ...") == 564
    assert _nodes("dot failed") is None
