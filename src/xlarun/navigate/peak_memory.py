"""What fills a module's memory: its peak, what makes it up, and the biggest buffers live at the peak.

:func:`module_memory` is ``xlarun memory REF``. It reads XLA's buffer assignment of the optimized module
(:mod:`xlarun.hlo.buffer_assignment`), the live ranges where dumped, and joins each buffer with the instruction
of the optimized module that defines it (its opcode, what it computes and its source lines). The peak column
of ``xlarun modules`` is in the index (:mod:`xlarun.store.memory_index`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xlarun.errors import InputError, XlarunError
from xlarun.hlo.buffer_assignment import (
    BufferAssignment,
    LiveRanges,
    has_live_ranges,
    parse_buffer_assignment,
    parse_live_ranges,
    report_total_bytes,
)
from xlarun.store.memory_index import BUFFER_ASSIGNMENT

if TYPE_CHECKING:
    from xlarun.hlo.cost import OpCost
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import FileInfo, ModuleInfo

LIVE_RANGE = "live-range"
MEMORY_REPORT = "memory-usage-report"


class NoBufferAssignment(InputError):
    """The module's dump holds no buffer assignment (an unoptimized-only dump, a proto-only dump)."""


@dataclass
class PeakBuffer:
    """A buffer of the module: the instruction whose value it holds, its kind, size and where it comes from."""

    instruction: str
    shape_index: str
    size: int
    kind: str  # parameter, donated, output, temporary, constant, thread-local (of the allocation holding it)
    shape: str | None = None
    opcode: str | None = None
    op_name: str | None = None
    sources: list[str] = field(default_factory=list)  # file:line of its metadata and its fused ops'


@dataclass
class ModuleMemory:
    """``xlarun memory REF``: a module's peak, its breakdown, and the biggest buffers at the peak, biggest first.

    ``peak_bytes`` is what one call of the module holds at once, as XLA allocates it: parameters + outputs +
    temporaries - aliased (donated parameters reused for outputs), the sum jax's ``memory_analysis()`` gives.
    ``live_peak_bytes`` is the heap simulator's peak of live values at ``peak_position`` in program order
    (where the live ranges were dumped): the buffers listed are those live there. Without live ranges they are
    the module's biggest values, and ``buffers_at_peak`` is False.
    """

    run_id: str
    module_id: int
    name: str | None
    ref: str
    peak_bytes: int
    parameter_bytes: int
    output_bytes: int
    temporary_bytes: int
    aliased_bytes: int
    constant_bytes: int
    thread_local_bytes: int
    allocations: int
    allocated_bytes: int  # every allocation, constants and thread-local ones included (XLA's "Total bytes")
    live_peak_bytes: int | None = None
    peak_position: int | None = None
    peak_instruction: str | None = None
    buffers_at_peak: bool = False
    buffers: list[PeakBuffer] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _report(module: ModuleInfo, kind: str) -> FileInfo | None:
    return next((f for f in module.files if f.kind == kind and (f.format in (None, "text", "txt"))), None)


def no_buffer_assignment(module: ModuleInfo) -> NoBufferAssignment:
    return NoBufferAssignment(
        f"{module.label} has no buffer assignment in its dump",
        "XLA writes *-buffer-assignment.txt with the optimized module's text dump: capture with dump.formats "
        "including text (XLA_FLAGS=--xla_dump_hlo_as_text) and the module compiled to the end (after_optimizations)",
    )


def read_buffer_assignment(store: LocalStore, module: ModuleInfo) -> BufferAssignment:
    """The module's buffer assignment; :class:`NoBufferAssignment` when it was not dumped."""
    found = _report(module, BUFFER_ASSIGNMENT)
    if found is None:
        raise no_buffer_assignment(module)
    return parse_buffer_assignment(_text(store, module, found), found.path)


def _text(store: LocalStore, module: ModuleInfo, info: FileInfo) -> str:
    return store.read_file(module.run_id, info.path).decode("utf-8", errors="replace")


def module_memory(store: LocalStore, module: ModuleInfo, top: int | None = None) -> ModuleMemory:
    """The module's peak, breakdown and biggest buffers at the peak (``top``: how many; None: all)."""
    chosen = _report(module, BUFFER_ASSIGNMENT)
    if chosen is None:
        raise no_buffer_assignment(module)
    text = _text(store, module, chosen)
    assignment = parse_buffer_assignment(text, chosen.path)
    found = ModuleMemory(
        module.run_id, module.module_id, module.name, module.ref,
        peak_bytes=assignment.peak_bytes, parameter_bytes=assignment.parameter_bytes,
        output_bytes=assignment.output_bytes, temporary_bytes=assignment.temporary_bytes,
        aliased_bytes=assignment.aliased_bytes, constant_bytes=assignment.constant_bytes,
        thread_local_bytes=assignment.thread_local_bytes, allocations=len(assignment.allocations),
        allocated_bytes=sum(a.size for a in assignment.allocations),
        files=[chosen.path],
    )  # fmt: skip
    _check_total(store, module, assignment.total_bytes, found)
    live = _live_ranges(store, module, text, found)
    costs = _costs(store, module, found)
    if live is not None and live.peak_position is not None:
        found.live_peak_bytes, found.peak_position = live.peak_bytes, live.peak_position
        found.peak_instruction, found.buffers_at_peak = live.peak_instruction, True
        buffers = _at_peak(assignment, live)
    else:
        found.notes.append("no live ranges dumped: the buffers listed are the module's biggest, not those live at the peak")
        buffers = _biggest_values(assignment)
    buffers.sort(key=lambda b: (-b.size, b.instruction))
    for buffer in buffers[:top] if top else buffers:
        _describe(buffer, costs.get(buffer.instruction))
        found.buffers.append(buffer)
    return found


def _check_total(store: LocalStore, module: ModuleInfo, printed: int | None, found: ModuleMemory) -> None:
    """XLA prints the total of the allocations (in the buffer assignment, or its memory-usage report): a
    different sum of the lines read means a file was cut or damaged."""
    report = _report(module, MEMORY_REPORT)
    if printed is None and report is not None:
        printed = report_total_bytes(_text(store, module, report))
    if printed is not None and printed != found.allocated_bytes:
        found.notes.append(
            f"XLA's total is {printed:,} B but the allocations read add up to {found.allocated_bytes:,} B: "
            "the buffer assignment may be cut (`xlarun check` verifies the stored files)"
        )


def _live_ranges(store: LocalStore, module: ModuleInfo, assignment_text: str, found: ModuleMemory) -> LiveRanges | None:
    chosen = _report(module, LIVE_RANGE)
    try:
        if chosen is not None:
            found.files.append(chosen.path)
            return parse_live_ranges(_text(store, module, chosen), chosen.path)
        if has_live_ranges(assignment_text):  # older releases print them in the buffer assignment
            return parse_live_ranges(assignment_text, found.files[0])
    except XlarunError as exc:
        found.notes.append(f"live ranges not read: {exc.message}")
    return None


def _at_peak(assignment: BufferAssignment, live: LiveRanges) -> list[PeakBuffer]:
    holders = assignment.holders()
    out = []
    for buffer in live.live_at_peak:
        allocation, value = holders.get((buffer.instruction, buffer.shape_index), (None, None))
        kind = allocation.kind if allocation else "temporary"
        out.append(PeakBuffer(buffer.instruction, buffer.shape_index, buffer.size, kind, value.shape if value else None))
    return out


def _biggest_values(assignment: BufferAssignment) -> list[PeakBuffer]:
    return [
        PeakBuffer(v.instruction, v.shape_index, v.size, a.kind, v.shape)
        for a in assignment.allocations
        if a.kind != "thread-local"
        for v in a.values
    ]


def _costs(store: LocalStore, module: ModuleInfo, found: ModuleMemory) -> dict[str, OpCost]:
    from xlarun.hlo import load_hlo
    from xlarun.hlo.cost import op_costs
    from xlarun.navigate.select import select_file

    try:
        chosen = select_file(module, "after_optimizations", fmt="text")
        return op_costs(load_hlo(store.read_file(module.run_id, chosen.path), chosen.path))
    except XlarunError as exc:
        found.notes.append(f"instructions not described (no optimized module read): {exc.message}")
        return {}


def _describe(buffer: PeakBuffer, cost: OpCost | None) -> None:
    if cost is not None:
        buffer.opcode, buffer.op_name, buffer.sources = cost.opcode, cost.op_name, cost.sources


@dataclass
class MemoryCurve:
    """The bytes of values live at each position of the module's program order (from its live ranges): what the
    report draws as memory over program order, its peak marked."""

    instructions: list[str]  # the instruction at each position
    live_bytes: list[int]
    peak_position: int  # where the most bytes are live (the first such position)

    @property
    def peak_bytes(self) -> int:
        return self.live_bytes[self.peak_position]


def memory_over_program(store: LocalStore, module: ModuleInfo) -> MemoryCurve | None:
    """The module's live bytes at each position of its program order; None when its buffer assignment or live
    ranges were not dumped (or cannot be read: ``xlarun memory`` says why)."""
    chosen = _report(module, BUFFER_ASSIGNMENT)
    if chosen is None:
        return None
    try:
        text = _text(store, module, chosen)
        assignment = parse_buffer_assignment(text, chosen.path)
        ranges_file = _report(module, LIVE_RANGE)
        if ranges_file is not None:
            live = parse_live_ranges(_text(store, module, ranges_file), ranges_file.path)
        elif has_live_ranges(text):
            live = parse_live_ranges(text, chosen.path)
        else:
            return None
    except XlarunError:
        return None
    if not live.sequence:
        return None
    sizes = {
        f"{value.instruction}{value.shape_index}": value.size
        for allocation in assignment.allocations
        for value in allocation.values
    }
    last = len(live.sequence) - 1
    changes = [0] * (last + 2)
    for key, (start, end) in live.ranges.items():
        start, end = max(0, start), min(last, end)
        if start <= end:
            changes[start] += sizes.get(key, 0)
            changes[end + 1] -= sizes.get(key, 0)
    live_bytes, running = [], 0
    for change in changes[:-1]:
        running += change
        live_bytes.append(running)
    return MemoryCurve(live.sequence, live_bytes, live_bytes.index(max(live_bytes)))
