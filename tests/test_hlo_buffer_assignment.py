"""Reading XLA's buffer assignment and live ranges (hlo/buffer_assignment.py) from files real captures wrote.

The numbers are held against a second source, not against themselves: the optimized module beside each file (its
entry parameters' shapes, its ``input_output_alias``), and the live ranges' own positions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xlarun.hlo import load_hlo
from xlarun.hlo.buffer_assignment import (
    DumpFormatError,
    parse_allocations,
    parse_buffer_assignment,
    parse_live_ranges,
    report_total_bytes,
)
from xlarun.hlo.sharding import shape_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "memory"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def _entry_parameter_bytes(program: str) -> list[int]:
    module = load_hlo((FIXTURES / f"{program}.after.txt").read_bytes(), f"{program}.after.txt")
    return [shape_bytes(p.shape) for p in module.entry.parameters]


def _donated_parameters(program: str) -> list[int]:
    header = _read(f"{program}.after.txt").splitlines()[0]
    return [int(n) for n in re.findall(r"\{[\d,]*\}: \((\d+), \{[\d,]*\}, may-alias\)", header)]


@pytest.mark.parametrize("program", ["mlp_train_step", "donated_step"])
def test_parameters_are_the_entry_parameters_of_the_optimized_module(program):
    found = parse_buffer_assignment(_read(f"{program}.buffer-assignment.txt"))
    sizes = _entry_parameter_bytes(program)
    assert found.parameter_bytes == sum(sizes)
    by_number = {a.parameter: a.size for a in found.allocations if a.parameter is not None}
    assert by_number == dict(enumerate(sizes))


@pytest.mark.parametrize("program", ["mlp_train_step", "donated_step"])
def test_aliased_bytes_are_the_donated_parameters(program):
    found = parse_buffer_assignment(_read(f"{program}.buffer-assignment.txt"))
    sizes = _entry_parameter_bytes(program)
    donated = _donated_parameters(program)
    assert found.aliased_bytes == sum(sizes[n] for n in donated)
    assert (found.aliased_bytes > 0) is (program == "donated_step")
    assert {a.parameter for a in found.allocations if a.kind == "donated"} == set(donated)


def test_the_peak_is_parameters_outputs_and_temporaries_less_what_is_aliased():
    found = parse_buffer_assignment(_read("mlp_train_step.buffer-assignment.txt"))
    temp = [a for a in found.allocations if a.preallocated_temp]
    assert len(temp) == 1 and found.temporary_bytes == temp[0].size
    # the result: every maybe-live-out buffer, the output tuple's own (a table of pointers) among them
    assert any(a.output for a in found.allocations)
    assert found.peak_bytes == found.parameter_bytes + found.output_bytes + found.temporary_bytes - found.aliased_bytes
    assert found.peak_bytes < sum(a.size for a in found.allocations)  # constants and thread-local ones are not in it


@pytest.mark.parametrize("program", ["mlp_train_step", "donated_step"])
def test_every_value_lies_inside_its_allocation(program):
    found = parse_buffer_assignment(_read(f"{program}.buffer-assignment.txt"))
    values = [(a, v) for a in found.allocations for v in a.values]
    assert len(values) >= len(found.allocations)
    assert all(v.offset + v.size <= a.size for a, v in values)


def test_the_allocation_lines_alone_give_the_same_sums():
    text = _read("mlp_train_step.buffer-assignment.txt")
    full, quick = parse_buffer_assignment(text), parse_allocations(text)
    assert [(a.index, a.size, a.kind) for a in quick.allocations] == [(a.index, a.size, a.kind) for a in full.allocations]
    assert quick.peak_bytes == full.peak_bytes and not quick.allocations[0].values


def test_the_buffers_live_at_the_peak_are_live_at_its_position():
    live = parse_live_ranges(_read("mlp_train_step.live-range.txt"))
    module = load_hlo((FIXTURES / "mlp_train_step.after.txt").read_bytes(), "after.txt")
    assert all(module.find_instruction(name) is not None for name in live.sequence)
    assert live.peak_instruction == live.sequence[live.peak_position]
    assert module.find_instruction(live.peak_instruction) is not None
    for buffer in live.live_at_peak:
        first, last = live.ranges[buffer.instruction + buffer.shape_index]
        assert first <= live.peak_position <= last
    assert live.peak_bytes == sum(b.size for b in live.live_at_peak)


def test_lines_a_release_adds_are_skipped_and_counted():
    text = _read("donated_step.buffer-assignment.txt")
    lines = text.splitlines()
    newer = "\n".join([lines[0], "Memory Space: default (color=0)", *lines[1:], "", "SomethingNew:", " with: details"])
    plain, more = parse_buffer_assignment(text), parse_buffer_assignment(newer)
    assert more.skipped_lines == 3 and plain.skipped_lines == 0
    assert (more.peak_bytes, more.aliased_bytes, len(more.allocations)) == (
        plain.peak_bytes,
        plain.aliased_bytes,
        len(plain.allocations),
    )


def test_an_older_releases_layout_reads_the_same():
    """Older XLA printed a pointer after each allocation's colon and values without a position, and ended with the
    total and the stats, the live ranges following in the same file."""
    text = _read("donated_step.buffer-assignment.txt")
    older = re.sub(r"^(allocation \d+:) ", r"\1 0x55d0c0ffee00, ", text, flags=re.M)
    older = re.sub(r" @0>", ">", older)
    older += "\nTotal bytes used: 620 (620B)\n\nBufferAssignment stats:\n  parameter allocation: 240B\n\n"
    older += _read("donated_step.live-range.txt")
    plain, found = parse_buffer_assignment(text), parse_buffer_assignment(older)
    assert found.total_bytes == 620
    assert [(a.size, a.kind) for a in found.allocations] == [(a.size, a.kind) for a in plain.allocations]
    assert [v for a in found.allocations for v in a.values] == [v for a in plain.allocations for v in a.values]
    live = parse_live_ranges(older)
    assert live.peak_position == parse_live_ranges(_read("donated_step.live-range.txt")).peak_position


@pytest.mark.parametrize(
    ("cut", "line"),
    [
        (lambda t: t.replace("allocation 3: size 16,", "allocation 3: si"), 9),
        (lambda t: t.replace("(size=96,offset=0)", "(size=9"), 6),
    ],
)
def test_a_damaged_file_is_an_error_naming_the_line(cut, line):
    text = cut(_read("donated_step.buffer-assignment.txt"))
    with pytest.raises(DumpFormatError, match=rf"ba.txt: line {line} does not read as"):
        parse_buffer_assignment(text, "ba.txt")


def test_a_file_that_is_no_buffer_assignment_is_an_error():
    with pytest.raises(DumpFormatError, match="is not a buffer assignment"):
        parse_buffer_assignment(_read("donated_step.after.txt"), "after.txt")
    with pytest.raises(DumpFormatError, match="is not a live range"):
        parse_live_ranges(_read("donated_step.buffer-assignment.txt"))


def test_the_memory_usage_reports_total():
    assert report_total_bytes("Memory Space: default (color=0)\nTotal bytes: 269032 (262.7KiB)\n") == 269032
    assert report_total_bytes("Total bytes used: 224494040 (214.09MiB)\nAllocations sorted by size:\n") == 224494040
    assert report_total_bytes("nothing here") is None


def test_tensorflows_single_file_holds_allocations_total_and_live_ranges():
    """TF 2.21's XLA writes no live-range file: the allocations, the total it prints and the live ranges are in one."""
    text = _read("tf_train_step.buffer-assignment.txt")
    found = parse_buffer_assignment(text)
    assert found.total_bytes == sum(a.size for a in found.allocations)  # XLA's own total against the lines read
    assert found.parameter_bytes == sum(map(shape_bytes, ["f32[32,10]", "f32[10]", "f32[16,32]", "f32[16,10]"]))
    live = parse_live_ranges(text)
    assert live.peak_instruction in live.sequence and live.live_at_peak
    assert {b.instruction for b in live.live_at_peak} >= {
        v.instruction for a in found.allocations if a.parameter is not None for v in a.values
    }
