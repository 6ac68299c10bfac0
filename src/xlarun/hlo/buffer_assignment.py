"""XLA's buffer assignment of an optimized module, read from the text files it dumps next to it.

Three files, as jaxlib 0.10 writes them (TensorFlow 2.21's XLA puts all of them in the first):

- ``*-buffer-assignment.txt``: ``allocation N: size S, parameter P, shape |f32[8]| at ShapeIndex {}, maybe-live-out:``
  lines, each followed by the ``value: <id name{index} @pos> (size=..,offset=..): shape`` lines it holds; in TF's
  single file a ``Total bytes used`` line and the used values follow, and older XLA printed a pointer after the colon.
- ``*-live-range.txt``: ``HloLiveRange``: the program order, each buffer's live range and the
  ``Live ranges at N (peak):`` section listing the buffers live at the heap simulator's peak.
- ``*-memory-usage-report.txt``: ``Total bytes: N`` (``Total bytes used: N`` in other releases) and
  allocations by size.

Lines a release adds that this reader does not know are skipped; a line that starts like an allocation, a value
or a peak entry and does not read as one is an error naming the line (a cut or damaged file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from xlarun.errors import InputError

_ALLOCATION = re.compile(r"^allocation (?P<index>\d+):(?: 0x[0-9a-fA-F]+,)? size (?P<size>\d+)(?P<rest>.*?):?\s*$")
_PARAMETER = re.compile(
    r"(?:entry computation )?parameter (?P<number>\d+)(?:, shape \|(?P<shape>[^|]*)\|)?(?: at ShapeIndex (?P<index>\{[\d,]*\}))?"
)
_OUTPUT = re.compile(r"output shape is \|(?P<shape>[^|]*)\|")
_VALUE = re.compile(
    r"^\s*value: <(?P<id>\d+) (?P<name>[^\s{>]+)(?P<index>\{[\d,]*\})?(?P<phi> \(phi\))?(?: @(?P<pos>\d+))?>"
    r"\s*\(size=(?P<size>\d+),\s*offset=(?P<offset>\d+)\)(?::\s*(?P<shape>.*))?$"
)
_TOTAL = re.compile(r"^Total bytes(?: used)?: (?P<bytes>\d+)")
_PEAK_HEADER = re.compile(r"^\s*Live ranges at (?P<position>\d+) \(peak\):\s*$")
_PEAK_ENTRY = re.compile(
    r"^\s*(?P<name>[^\s{:]+)(?P<index>\{[\d,]*\})?: (?P<size>\d+) bytes \(cumulative: (?P<cumulative>\d+) bytes\)"
)
_SEQUENCE_ENTRY = re.compile(r"^\s*(?P<position>\d+):(?P<name>\S+)\s*$")
_RANGE_ENTRY = re.compile(r"^\s*(?P<name>[^\s{:]+)(?P<index>\{[\d,]*\})?:(?P<start>\d+)-(?P<end>\d+)\s*$")


class DumpFormatError(InputError):
    """A buffer-assignment, live-range or memory-usage report that does not read as XLA writes one."""


@dataclass(frozen=True)
class BufferValue:
    """One HLO value an allocation holds: the instruction that defines it, where, and how big."""

    instruction: str
    shape_index: str  # "{}" for the whole result, "{1}" for a tuple's element
    size: int
    offset: int
    shape: str
    phi: bool = False


@dataclass
class Allocation:
    """One buffer XLA allocates for a call of the module, and what lives in it over the program."""

    index: int
    size: int
    parameter: int | None = None  # the entry parameter it holds
    parameter_shape: str | None = None
    output: bool = False  # holds the whole result tuple ("output shape is")
    maybe_live_out: bool = False  # part of the result
    preallocated_temp: bool = False
    thread_local: bool = False
    constant: bool = False
    values: list[BufferValue] = field(default_factory=list)

    @property
    def aliased(self) -> bool:
        """A parameter's buffer that is also (part of) the result: a donated argument reused for an output."""
        return self.parameter is not None and self.maybe_live_out

    @property
    def kind(self) -> str:
        """parameter, donated (a parameter reused for the result), output, constant, thread-local or temporary (a
        preallocated temp or a plain allocation)."""
        if self.aliased:
            return "donated"
        if self.parameter is not None:
            return "parameter"
        if self.maybe_live_out or self.output:
            return "output"
        if self.constant:
            return "constant"
        if self.thread_local:
            return "thread-local"
        return "temporary"


@dataclass
class BufferAssignment:
    """Every allocation of a module, with the sums ``jax``'s ``Compiled.memory_analysis()`` reports."""

    allocations: list[Allocation] = field(default_factory=list)
    total_bytes: int | None = None  # "Total bytes used", where the file prints it
    skipped_lines: int = 0  # lines of a section this reader does not know

    def _sum(self, keep: Any) -> int:
        return sum(a.size for a in self.allocations if keep(a))

    @property
    def parameter_bytes(self) -> int:
        """argument_size_in_bytes: the buffers of the entry parameters."""
        return self._sum(lambda a: a.parameter is not None)

    @property
    def output_bytes(self) -> int:
        """output_size_in_bytes: the buffers of the result (maybe-live-out), donated parameters reused included."""
        return self._sum(lambda a: a.maybe_live_out or a.output)

    @property
    def temporary_bytes(self) -> int:
        """temp_size_in_bytes: buffers neither parameter, result, constant nor thread-local."""
        return self._sum(lambda a: a.kind == "temporary")

    @property
    def aliased_bytes(self) -> int:
        """alias_size_in_bytes: parameter buffers reused for the result (donated arguments)."""
        return self._sum(lambda a: a.aliased)

    @property
    def constant_bytes(self) -> int:
        return self._sum(lambda a: a.kind == "constant")

    @property
    def thread_local_bytes(self) -> int:
        return self._sum(lambda a: a.kind == "thread-local")

    @property
    def peak_bytes(self) -> int:
        """What one call holds at once: parameters + outputs + temporaries - aliased (each allocation lives for the
        whole call; constants are the executable's, thread-local buffers are on the stack)."""
        return self.parameter_bytes + self.output_bytes + self.temporary_bytes - self.aliased_bytes

    def holders(self) -> dict[tuple[str, str], tuple[Allocation, BufferValue]]:
        """The allocation holding each value, by (instruction, shape index), and the value."""
        found: dict[tuple[str, str], tuple[Allocation, BufferValue]] = {}
        for allocation in self.allocations:
            for value in allocation.values:
                found.setdefault((value.instruction, value.shape_index), (allocation, value))
        return found


@dataclass(frozen=True)
class LiveBuffer:
    """A buffer live at the heap simulator's peak: the instruction defining it and its size."""

    instruction: str
    shape_index: str
    size: int


@dataclass
class LiveRanges:
    """XLA's HloLiveRange: program order, each buffer's live range, and the buffers live at the peak."""

    sequence: list[str] = field(default_factory=list)  # the entry's instructions in program order
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # "name{index}" -> (first, last) position
    peak_position: int | None = None
    live_at_peak: list[LiveBuffer] = field(default_factory=list)

    @property
    def peak_bytes(self) -> int | None:
        """The bytes live at the peak (None: the release printed no peak section)."""
        return sum(b.size for b in self.live_at_peak) if self.peak_position is not None else None

    @property
    def peak_instruction(self) -> str | None:
        """The instruction at the peak's position in program order."""
        if self.peak_position is None or not 0 <= self.peak_position < len(self.sequence):
            return None
        return self.sequence[self.peak_position]


def _bad(label: str, number: int, line: str, what: str) -> DumpFormatError:
    return DumpFormatError(
        f"{label}: line {number} does not read as {what}: {line.strip()[:80]!r}",
        "the file is damaged or cut short; `xlarun check` verifies the stored copy against its digest",
    )


def parse_buffer_assignment(text: str, label: str = "buffer assignment") -> BufferAssignment:
    """Read a ``*-buffer-assignment.txt``. Raises :class:`DumpFormatError` for a damaged file, or one with no
    allocation that does not even start as a buffer assignment."""
    found = BufferAssignment()
    current: Allocation | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("allocation "):
            current = _allocation(line, label, number)
            found.allocations.append(current)
        elif line.lstrip().startswith("value: <"):
            match = _VALUE.match(line)
            if not match or current is None:
                raise _bad(label, number, line, "a value of an allocation")
            current.values.append(
                BufferValue(
                    match["name"], match["index"] or "{}", int(match["size"]), int(match["offset"]),
                    (match["shape"] or "").strip(), bool(match["phi"]),
                )
            )  # fmt: skip
        elif total := _TOTAL.match(line):
            found.total_bytes = int(total["bytes"])
            current = None
        elif line.strip() and not line.startswith("BufferAssignment"):
            found.skipped_lines += 1
            current = None if not line.startswith(" ") else current
    if not found.allocations and not text.lstrip().startswith("BufferAssignment"):
        raise _not_buffer_assignment(label)
    return found


_ALLOCATION_LINE = re.compile(r"^allocation [^\n]*", re.M)


def parse_allocations(text: str, label: str = "buffer assignment") -> BufferAssignment:
    """The allocation lines only (no values): enough for the peak and its breakdown, several times faster than
    :func:`parse_buffer_assignment` on a big module. Raises :class:`DumpFormatError` as it does."""
    found = BufferAssignment()
    for match in _ALLOCATION_LINE.finditer(text):
        found.allocations.append(_allocation(match.group(0), label, text.count("\n", 0, match.start()) + 1))
    if not found.allocations and not text.lstrip().startswith("BufferAssignment"):
        raise _not_buffer_assignment(label)
    return found


def _not_buffer_assignment(label: str) -> DumpFormatError:
    return DumpFormatError(
        f"{label} is not a buffer assignment XLA wrote (no 'allocation N: size S' line)",
        "give a *-buffer-assignment.txt file of an optimized module",
    )


def _allocation(line: str, label: str, number: int) -> Allocation:
    match = _ALLOCATION.match(line)
    if not match:
        raise _bad(label, number, line, "an allocation ('allocation N: size S, ...:')")
    rest = match["rest"]
    allocation = Allocation(int(match["index"]), int(match["size"]))
    if parameter := _PARAMETER.search(rest):
        allocation.parameter, allocation.parameter_shape = int(parameter["number"]), parameter["shape"]
        rest = rest.replace(parameter.group(0), "")
    if output := _OUTPUT.search(rest):
        allocation.output = True
        rest = rest.replace(output.group(0), "")
    words = {w.strip() for w in rest.split(",")}
    allocation.maybe_live_out = "maybe-live-out" in words
    allocation.preallocated_temp = bool({"preallocated-temp", "preallocated temp"} & words)
    allocation.thread_local = "thread-local" in words
    allocation.constant = "constant" in words
    return allocation


def has_live_ranges(text: str) -> bool:
    """Whether the text holds an HloLiveRange (a live-range file, or an older release's buffer assignment)."""
    return "HloLiveRange" in text


def parse_live_ranges(text: str, label: str = "live range") -> LiveRanges:
    """Read a ``*-live-range.txt`` (HloLiveRange). Raises :class:`DumpFormatError` for a damaged one."""
    found = LiveRanges()
    section = ""
    start = text.find("HloLiveRange")  # older releases print it after the allocations, in the buffer assignment
    if start < 0:
        raise DumpFormatError(f"{label} is not a live range XLA wrote (no 'HloLiveRange' line)", "give a *-live-range.txt file")
    skipped = text.count("\n", 0, start)
    for number, line in enumerate(text[start:].splitlines(), skipped + 1):
        stripped = line.strip()
        if stripped in ("InstructionSequence:", "BufferLiveRange:"):
            section = stripped
        elif peak := _PEAK_HEADER.match(line):
            section, found.peak_position = "peak", int(peak["position"])
        elif not line.startswith("    "):
            section = "" if stripped and not stripped.startswith("HloLiveRange") else section
        elif section == "InstructionSequence:":
            entry = _SEQUENCE_ENTRY.match(line)
            if not entry:
                raise _bad(label, number, line, "a position in the program ('N:name')")
            found.sequence.append(entry["name"])
        elif section == "BufferLiveRange:" and (ranged := _RANGE_ENTRY.match(line)):
            found.ranges[ranged["name"] + (ranged["index"] or "{}")] = (int(ranged["start"]), int(ranged["end"]))
        elif section == "peak":
            live = _PEAK_ENTRY.match(line)
            if not live:
                raise _bad(label, number, line, "a buffer live at the peak ('name{}: N bytes (cumulative: M bytes)')")
            found.live_at_peak.append(LiveBuffer(live["name"], live["index"] or "{}", int(live["size"])))
    return found


def report_total_bytes(text: str) -> int | None:
    """The ``Total bytes`` a ``*-memory-usage-report.txt`` starts with (None: not printed)."""
    for line in text.splitlines()[:5]:
        if total := _TOTAL.match(line.strip()):
            return int(total["bytes"])
    return None
