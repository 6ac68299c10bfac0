"""Read an HLO module (text dump or proto) into a small summary the other stages work from.

The index, ``find``, the renderer, the pass-diff and the replay need names, opcodes, shapes,
wiring, called computations and source metadata; they do not need literals or layouts
understood. So this is a summary parser, not XLA's: shapes, literals and attribute values are
kept as raw text, and only the structure around them is decoded.

Counting convention: :meth:`HloModule.instruction_count`, :meth:`HloModule.instructions` and
:meth:`HloModule.opcode_histogram` cover every instruction of every computation, parameters,
ROOTs and the bodies of fused, called, while and reduction computations included (so a
fusion counts once as ``fusion`` and once more per instruction of its fused computation).
"""

from __future__ import annotations

import gzip
import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import InputError
from .hlo_scan import LineError, as_xla_prints, split_top_level, strip_comments, strip_layouts, unquote, walk  # noqa: F401 (re-exported)

#: Attributes whose value names computations the instruction calls (``calls=%fused``, ``branch_computations={...}``).
CALLED_COMPUTATION_KEYS = frozenset(
    {"calls", "to_apply", "condition", "body", "branch_computations", "true_computation",
     "false_computation", "called_computations", "select", "scatter"}
)
#: Attributes whose value names other instructions of the same computation.
INSTRUCTION_REF_KEYS = frozenset({"control-predecessors"})
#: Attributes the fingerprint leaves out: they say where an op came from, not what it computes.
PER_RUN_ATTRIBUTES = frozenset({"metadata", "origin", "statistics"})
# GPU scheduling bookkeeping inside backend_config that changes between otherwise equal compiles.
_PER_RUN_BACKEND_KEYS = re.compile(r'"(?:operation_queue_id|wait_on_operation_queues)":(?:"[^"]*"|\[[^\]]*\]),?')

_HINT = "is this an HLO text dump (module_*.txt)? a truncated file or a hand edit can cause this"
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_INSTR_HEAD = re.compile(r'\s*(ROOT\s+)?%?([^\s=%(]+)\s*=\s*')
# an instruction starts "name = " and then a shape; a wrapped attribute line ("calls=%f") does not
_NEW_INSTRUCTION = re.compile(r'\s*(ROOT\s+)?%?[^\s=%(]+\s*=\s*(?:\(|[A-Za-z][A-Za-z0-9]*\[)')
_COMP_HEAD = re.compile(r'\s*(ENTRY\s+)?%?([^\s({]+)')
_ARRAY_SHAPE = re.compile(r'[A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?')
_OPCODE = re.compile(r'\s*([A-Za-z][\w\-]*)\(')
_NAME_REF = re.compile(r'%?([^\s,{}%]+)')
_FIELD = re.compile(r'([\w.]+)=("[^"\\]*(?:\\.[^"\\]*)*"|[^\s}]+)')
_SECTION_ENTRY = re.compile(r'\s*(\d+)\s+(.*?)\s*$')
_SPACES = re.compile(r'[ \t]*')
_MODULE_LINE = re.compile(r"HloModule\s+([^\s,]+)")
# How a computation ends: "}", "} // name" (XLA printed the name until 2025), "}, execution_thread=\"...\"".
_COMPUTATION_END = re.compile(r'\}\s*(?://.*|,\s*execution_thread\s*=\s*"[^"]*"\s*(?://.*)?)?')

#: XLA's opcodes (xla/hlo/ir/hlo_opcode.h). ``<opcode>-start`` of any other is an async pair, for which XLA's
#: parser builds a computation wrapping the one instruction (see :func:`wrap_async_operations`).
OPCODES = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done all-gather-start all-reduce all-reduce-done
all-reduce-start all-to-all and asin asinh async-done async-start async-update atan atan2 atanh batch-norm-grad
batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call cbrt ceil cholesky clamp
count-leading-zeros collective-broadcast collective-permute collective-permute-done collective-permute-start
collective-reduce compare complex concatenate conditional constant convert convolution copy copy-done copy-start
cosine cosh custom-call divide domain dot dynamic-reshape dynamic-slice dynamic-update-slice erf exponential
exponential-minus-one fft floor fusion gather get-dimension-size get-tuple-element imag infeed iota is-finite log
log-plus-one logistic map maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter partition-id
popcnt power ragged-all-to-all ragged-dot real recv recv-done reduce reduce-precision reduce-scatter reduce-window
remainder replica-id reshape reverse rng rng-bit-generator rng-get-and-update-state round-nearest-afz
round-nearest-even rsqrt scaled-dot scan scatter select select-and-scatter send send-done set-dimension-size
shift-left shift-right-arithmetic shift-right-logical shuffle sign sine sinh slice sort sqrt stochastic-convert
subtract tan tanh topk transpose triangular-solve tuple while xor
""".split())


@dataclass
class HloInstruction:
    """One HLO instruction. Names never carry the leading ``%``."""

    name: str
    opcode: str
    shape: str
    operands: list[str] = field(default_factory=list)
    computation: str = ""
    is_root: bool = False
    #: Raw attribute text by key, e.g. ``{"kind": "kLoop", "calls": "%fused_computation"}``.
    attributes: dict[str, str] = field(default_factory=dict)
    called_computations: list[str] = field(default_factory=list)
    op_name: str | None = None
    op_type: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    #: A constant printed as ``{...}`` because the dump was made without --xla_dump_large_constants.
    has_elided_constant: bool = False
    #: Constants: the text inside ``constant(...)``; from a proto, a digest ``sha256:...`` of the literal.
    literal: str | None = None
    parameter_number: int | None = None
    #: ``metadata={... stack_frame_id=N}``: JAX's pointer into the module's StackFrames table.
    stack_frame_id: int | None = None


@dataclass
class HloComputation:
    name: str
    is_entry: bool = False
    #: The name says fused, or a ``fusion`` instruction calls it.
    is_fusion: bool = False
    parameters: list[HloInstruction] = field(default_factory=list)  # by parameter number
    instructions: list[HloInstruction] = field(default_factory=list)  # in file order, parameters included
    root: str = ""


@dataclass
class HloModule:
    name: str
    entry_computation: str
    computations: dict[str, HloComputation]
    #: ``(f32[8,128], f32[128]) -> (f32[8,128])``: parameter and result shapes without layouts.
    entry_signature: str
    #: Raw ``key=value`` text of the ``HloModule`` line (empty for protos).
    header_attributes: dict[str, str] = field(default_factory=dict)
    #: ``"text"`` or ``"proto"``; fingerprints are only comparable between modules read the same way.
    parsed_from: str = "text"
    #: False when read with ``parse_hlo_text(text, summary=True)``: instructions lack operands and
    #: attributes, so there is no canonical form (nor fingerprint, graph or replay) to make from it.
    complete: bool = True

    @property
    def entry(self) -> HloComputation:
        return self.computations[self.entry_computation]

    def instructions(self) -> Iterator[HloInstruction]:
        """Every instruction of every computation, computations in file order."""
        for computation in self.computations.values():
            yield from computation.instructions

    def instruction_count(self) -> int:
        """Instructions in all computations, parameters and fused bodies included."""
        return sum(len(c.instructions) for c in self.computations.values())

    def opcode_histogram(self) -> dict[str, int]:
        """Opcode -> count over :meth:`instructions`, most frequent first (ties by name)."""
        counts = Counter(i.opcode for i in self.instructions())
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def has_elided_constants(self) -> bool:
        """True when some constant was dumped as ``{...}``: replaying this text would use garbage values."""
        return any(i.has_elided_constant for i in self.instructions())

    def find_instruction(self, name: str) -> HloInstruction | None:
        """The instruction called ``name`` (a leading ``%`` is ignored), or None."""
        name = name.lstrip("%")
        return next((i for i in self.instructions() if i.name == name), None)

    def canonical_form(self) -> str:
        """The module with per-run detail removed; see :meth:`fingerprint`."""
        if not self.complete:
            raise ValueError("a summary parse has no canonical form: parse the text in full")
        return "\n".join(_canonical_lines(self))

    def fingerprint(self) -> str:
        """sha256 of :meth:`canonical_form`.

        Metadata (op names, source locations, stack frames), ``origin=`` and GPU queue bookkeeping
        are dropped, and the module, every computation and every instruction are renamed by
        position, so the same program dumped by another process, under another module id or from
        another script path gets the same fingerprint. Opcodes, shapes with layouts, literals,
        parameter numbers, all other attributes and the wiring are kept: changing any of them
        changes it. Text and proto summaries of one module fingerprint differently (the proto
        summary keeps fewer attributes).
        """
        return hashlib.sha256(self.canonical_form().encode("utf-8")).hexdigest()


def format_signature(parameters: list[str], result: str) -> str:
    """``(a, b) -> r`` from parameter and result shapes, layouts dropped, spaces as XLA prints them."""
    return f"({', '.join(_plain_shape(p) for p in parameters)}) -> {_plain_shape(result)}"


def _plain_shape(shape: str) -> str:
    return strip_layouts("".join(shape.split()) if " " in shape or "\n" in shape else shape)


def _signature_from_layout(layout: str) -> str | None:
    """``{(f32[8]{0}, s32[])->f32[8]{0}}`` -> ``(f32[8], s32[]) -> f32[8]``."""
    text = strip_comments(layout.strip())
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    params, arrow, result = text.partition("->")
    if not arrow:
        return None
    params = params.strip()
    if params.startswith("(") and params.endswith(")"):
        params = params[1:-1]
    return format_signature([p for p in split_top_level(params) if p.strip()], result)


# The common shapes of ", key=value" (a token, a string, or braces holding no braces), matched in one step;
# anything else (nested braces, as in backend_config JSON) goes through walk().
_SIMPLE_ATTRIBUTE = re.compile(
    r',[ \t]*([\w.\-]+)=(%?[\w.\-]+|"[^"\\]*(?:\\.[^"\\]*)*"|\{(?:[^{}"]|"[^"\\]*(?:\\.[^"\\]*)*")*\})[ \t]*(?=,|$|/\*)'
)
# An operand list holding no brackets, strings or comments: its closing parenthesis is the first one.
_SIMPLE_OPERANDS = re.compile(r'\(([^()\[\]{}"/]*)\)')
# _INSTR_HEAD, an array shape (_ARRAY_SHAPE) and _OPCODE up to the operands' "(", in one match: all a
# summary parse needs of an instruction line (root, name, shape, opcode).
_SUMMARY_HEAD = re.compile(r'\s*(ROOT\s+)?%?([^\s=%(]+)\s*=\s*([A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?)\s*([A-Za-z][\w\-]*)\(')
# The same, then simple operands.
_SIMPLE_INSTRUCTION = re.compile(_SUMMARY_HEAD.pattern + r'([^()\[\]{}"/]*)\)')


# Strings and innermost bracketed groups, removed over and over by _holds_a_statement.
_INNERMOST = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\([^(){}\[\]"]*\)|\{[^(){}\[\]"]*\}|\[[^(){}\[\]"]*\]')


_STATEMENT_START = re.compile(r"\s(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=")


def _holds_a_statement(value: str) -> bool:
    """True when an attribute value, brackets and strings aside, has ' name =' in it: the next instruction."""
    while True:
        inner = _INNERMOST.sub("", value)
        if inner == value:
            return _STATEMENT_START.search(value) is not None
        value = inner


def _parse_attributes(line: str, pos: int) -> dict[str, str]:
    attributes: dict[str, str] = {}
    length = len(line)
    while True:
        if pos >= length:
            return attributes
        simple = _SIMPLE_ATTRIBUTE.match(line, pos)
        if simple is not None:
            value = simple.group(2)
            attributes[simple.group(1)] = strip_comments(value).strip() if "/*" in value else value
            pos = simple.end()
            continue
        pos = _SPACES.match(line, pos).end()
        if line.startswith("/*", pos) and "*/" in line[pos:]:  # a trailing /* comment */
            pos = line.index("*/", pos) + 2
            continue
        if pos >= len(line):
            return attributes
        if line[pos] != ",":
            raise LineError(f"expected ', key=value' but found {line[pos:pos + 30]!r}")
        end = walk(line, pos + 1, True)
        key, _eq, value = strip_comments(line[pos + 1 : end]).partition("=")
        value = value.strip()
        if _holds_a_statement(value):  # two statements run together on one line
            raise LineError(f"expected ', key=value' but found {value[:30]!r}")
        attributes[key.strip()] = value
        pos = end


def _read_shape(line: str, pos: int) -> tuple[str, int]:
    if line.startswith(("(", "b("), pos):  # a tuple, or a buffer b(f32[2,4])
        end = walk(line, pos, False)
        return strip_comments(line[pos:end]), end
    m = _ARRAY_SHAPE.match(line, pos)
    if m is None:
        raise LineError(f"expected a shape like f32[8,128]{{1,0}} but found {line[pos:pos + 30]!r}")
    return m.group(), m.end()


def _operand_names(inner: str) -> list[str]:
    inner = strip_comments(inner)
    if not inner.strip():
        return []
    pieces = split_top_level(inner) if "[" in inner else inner.split(",")
    # an operand may be printed with its shape: "f32[8]{0} %x"
    names = [p.split()[-1].lstrip("%") for p in pieces if p.strip()]
    if any("(" in n or ")" in n for n in names):
        raise LineError("an instruction written inside another's operands")  # the grammar reader builds it
    return names


def called_computations(attributes: dict[str, str]) -> list[str]:
    """The computations an instruction's attributes name (``calls=%f``, ``branch_computations={%a, %b}``)."""
    return [name for key, value in attributes.items() if key in CALLED_COMPUTATION_KEYS for name in _NAME_REF.findall(value)]


def apply_metadata(instruction: HloInstruction, metadata: str) -> None:
    """Fill op_name, op_type, source_file, source_line and stack_frame_id from ``metadata={...}`` text."""
    for key, value in _FIELD.findall(metadata.strip()[1:-1]):
        if key in ("op_name", "op_type", "source_file"):
            setattr(instruction, key, unquote(value))
        elif key in ("source_line", "stack_frame_id") and value.isdigit():
            setattr(instruction, key, int(value))


def _parse_instruction(line: str, computation: str) -> HloInstruction:
    fast = _SIMPLE_INSTRUCTION.match(line)
    if fast is not None:  # the common shape, in one step; it matches only where the steps below agree
        is_root, name, shape, opcode, inner = fast.groups()
        close = fast.end()
    else:
        head = _INSTR_HEAD.match(line)
        if head is None:
            raise LineError("expected '%name = shape opcode(operands), attributes' or '}'")
        shape, pos = _read_shape(line, head.end())
        op = _OPCODE.match(line, pos)
        if op is None:
            raise LineError(f"expected an opcode and '(' after the shape of %{head.group(2)}")
        simple = _SIMPLE_OPERANDS.match(line, op.end() - 1)
        close = simple.end() if simple is not None else walk(line, op.end() - 1, False)
        is_root, name, opcode, inner = head.group(1), head.group(2), op.group(1), line[op.end() : close - 1]
    instruction = HloInstruction(
        name=name, opcode=opcode, shape=shape, computation=computation,
        is_root=is_root is not None, attributes=_parse_attributes(line, close),
    )
    if instruction.opcode == "constant":
        instruction.literal = inner.strip()
        instruction.has_elided_constant = "{...}" in inner
    elif instruction.opcode == "parameter":
        instruction.parameter_number = int(inner) if inner.strip().isdigit() else None
    elif fast is not None:  # no brackets, strings or comments: a plain comma-separated list
        instruction.operands = [p.split()[-1].lstrip("%") for p in inner.split(",") if p.strip()]
    else:
        instruction.operands = _operand_names(inner)
    instruction.called_computations = called_computations(instruction.attributes)
    if "metadata" in instruction.attributes:
        apply_metadata(instruction, instruction.attributes["metadata"])
    return instruction


_PARAMETER_NUMBER = re.compile(r'\s*(\d+)\s*\)')
_METADATA = re.compile(r',\s*metadata=(\{[^{}"]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^{}"]*)*\})')  # unrolled: linear however it fails


def _summary_instruction(line: str, computation: str) -> HloInstruction | None:
    """Name, opcode, shape, root flag and metadata of a common instruction line, its operands and other
    attributes unread; None where the full parse is needed (tuple shapes, constants, wrapped lines)."""
    head = _SUMMARY_HEAD.match(line)
    if head is None or line.endswith((",", "{", "(", "[")):  # continued on the next line
        return None
    is_root, name, shape, opcode = head.groups()
    if opcode == "constant":
        return None  # the literal tells whether the dump elided it
    opening, closing = line.find("(", head.end()), line.find(")", head.end())
    if opening >= 0 and opening < closing:
        return None  # an operand written as an instruction (or a tuple-shaped operand): the full parse reads it
    if "#" in line[head.end() : closing]:
        return None  # an operand %x#1 stands for a get-tuple-element the full parse builds
    instruction = HloInstruction(name=name, opcode=opcode, shape=shape, computation=computation, is_root=is_root is not None)
    if opcode == "parameter":
        number = _PARAMETER_NUMBER.match(line, head.end())
        instruction.parameter_number = int(number.group(1)) if number else None
    metadata = _METADATA.search(line, head.end())
    if metadata is not None:
        apply_metadata(instruction, metadata.group(1))
    return instruction


class _TextParser:
    """Line-oriented reader of XLA's HloModule::ToString output (hand-written HLO too)."""

    def __init__(self, text: str, summary: bool = False):
        self.summary = summary
        self.lines = text.splitlines()
        self.name: str | None = None
        self.header: dict[str, str] = {}
        self.computations: dict[str, HloComputation] = {}
        self.entry: str | None = None
        self.tables: dict[str, dict[int, str]] = {s: {} for s in _SECTIONS}

    def fail(self, lineno: int, message: str, hint: str = _HINT) -> InputError:
        return InputError(f"HLO text line {lineno}: {message}", hint)

    def parse(self) -> HloModule:
        current: HloComputation | None = None
        section: str | None = None
        index, count = 0, len(self.lines)
        while index < count:
            lineno, line = index + 1, self.lines[index].rstrip()
            index += 1
            stripped = line.strip()
            if not stripped or stripped.startswith("//"):
                section = section if stripped else None  # a blank line ends a FileNames/... table
                continue
            if current is not None:
                if stripped[0] == "}" and _COMPUTATION_END.fullmatch(stripped):  # "} // name" (XLA until 2025), "}, execution_thread=..."
                    current = None
                    continue
                index = self._instruction(line, lineno, index, current)
                continue
            if self.name is None:
                self._module_line(stripped, lineno)
            elif stripped in _SECTIONS:
                section = stripped
            elif section is not None and (entry := _SECTION_ENTRY.match(stripped)):
                self.tables[section][int(entry.group(1))] = entry.group(2)
            elif stripped.endswith("{"):
                current = self._computation_header(stripped, lineno)
            elif stripped.startswith("HloModule"):
                raise self.fail(lineno, "a second HloModule in one file", "split the file into one module per file")
            else:
                raise self.fail(lineno, f"unexpected text outside a computation: {stripped[:60]!r}")
        if current is not None:
            raise self.fail(count, f"computation %{current.name} is not closed with '}}'", "the file is cut short")
        if self.name is None:
            raise InputError("the HLO text is empty", _HINT)
        if not self.computations:
            raise self.fail(count, "the module has no computations", _HINT)
        return assemble_module(self.name, self.computations, self.entry, self.header, self.tables, complete=not self.summary)

    def _module_line(self, line: str, lineno: int) -> None:
        m = _MODULE_LINE.match(line)
        if m is None:
            raise self.fail(
                lineno, f"expected 'HloModule <name>' but found {line[:60]!r}",
                "this is not an HLO module; buffer-assignment, live-range and memory reports are .txt files too",
            )
        self.name = m.group(1)
        try:
            self.header = _parse_attributes(line, m.end())
        except LineError as error:
            raise self.fail(lineno, f"in the HloModule line: {error}") from None

    def _computation_header(self, line: str, lineno: int) -> HloComputation:
        m = _COMP_HEAD.match(line)
        if m is None or _NEW_INSTRUCTION.match(line):
            expected = "expected a computation header '%name (params) -> shape {'"
            raise self.fail(lineno, f"{expected} but found {line[:60]!r}")
        name = m.group(2)
        if name in self.computations:
            raise self.fail(lineno, f"computation %{name} is defined twice")
        computation = HloComputation(name=name, is_entry=m.group(1) is not None)
        if computation.is_entry:
            self.entry = name
        self.computations[name] = computation
        return computation

    def _instruction(self, line: str, lineno: int, index: int, computation: HloComputation) -> int:
        if self.summary and (instruction := _summary_instruction(line, computation.name)) is not None:
            computation.instructions.append(instruction)
            return index
        # an instruction may be wrapped over several lines in hand-written HLO: join until it parses
        while True:
            try:
                if line.rstrip().endswith(",") and index < len(self.lines):
                    raise LineError("line ends with ','")
                computation.instructions.append(_parse_instruction(line, computation.name))
                return index
            except LineError as error:
                nxt = self.lines[index].strip() if index < len(self.lines) else "}"
                if nxt == "}" or not nxt or _NEW_INSTRUCTION.match(nxt) or index - lineno > 200:
                    raise self.fail(lineno, str(error)) from None
                line, index = f"{line} {nxt}", index + 1


def _finish(computation: HloComputation) -> None:
    instructions = computation.instructions
    params = [i for i in instructions if i.opcode == "parameter"]
    computation.parameters = sorted(params, key=lambda i: (i.parameter_number is None, i.parameter_number or 0))
    roots = [i for i in instructions if i.is_root]
    if not roots and instructions:  # XLA takes the last instruction when none is marked ROOT
        instructions[-1].is_root = True
        roots = [instructions[-1]]
    computation.root = roots[-1].name if roots else ""


#: Opcodes whose shape XLA's parser builds from the operands, whatever the text says.
SHAPE_SET_BY_XLA = frozenset({"outfeed", "send", "send-done", "recv", "recv-done"})


def _root_of(computation: HloComputation) -> HloInstruction:
    return next(i for i in reversed(computation.instructions) if i.name == computation.root)


def assemble_module(name: str | None, computations: dict[str, HloComputation], entry: str | None, header: dict[str, str],
                    tables: dict[str, dict[int, str]], complete: bool = True) -> HloModule:
    """The module from parsed computations: the async computations XLA builds added, roots, parameters,
    the entry (the last computation when none is marked ENTRY, as XLA takes it), sources and signature."""
    computations = wrap_async_operations(computations)
    for computation in computations.values():
        expand_tuple_references(computation)
        _finish(computation)
    entry = entry or next(reversed(computations))
    computations[entry].is_entry = True
    if computations[entry].root and _root_of(computations[entry]).opcode in SHAPE_SET_BY_XLA:
        from .hlo_grammar import infer_missing_shapes  # the signature shows the shape XLA gives it

        infer_missing_shapes(computations)
    _resolve_stack_frames(computations.values(), tables)
    module = HloModule(
        name=name if name is not None else f"module_{entry}", entry_computation=entry, computations=computations,
        entry_signature="", header_attributes=header, parsed_from="text", complete=complete,
    )
    mark_fusion_computations(module)
    layout = header.get("entry_computation_layout")
    module.entry_signature = (layout and _signature_from_layout(layout)) or signature_of(module.entry)
    return module


_TUPLE_REFERENCE = re.compile(r"(.+)#(\d+)")


def expand_tuple_references(computation: HloComputation) -> None:
    """Build the get-tuple-elements behind operands written ``%x#1`` (element 1 of tuple-shaped %x), as XLA's
    parser does for the text XLA prints since jax 0.11: one per element used, named ``x_1``, placed after %x."""
    if not any("#" in operand for instruction in computation.instructions for operand in instruction.operands):
        return
    by_name = {i.name: i for i in computation.instructions}
    made: dict[str, HloInstruction] = {}
    for instruction in computation.instructions:
        for position, operand in enumerate(instruction.operands):
            match = _TUPLE_REFERENCE.fullmatch(operand)
            if match is None or operand in by_name:
                continue
            if operand not in made:
                base, index = match.group(1), int(match.group(2))
                name, number = f"{base}_{index}", 0
                while name in by_name:
                    number += 1
                    name = f"{base}_{index}.{number}"
                source = by_name.get(base)
                elements = _tuple_shapes(source.shape) if source is not None else []
                made[operand] = gte = HloInstruction(
                    name=name, opcode="get-tuple-element", shape=elements[index] if index < len(elements) else "",
                    computation=computation.name, operands=[base], attributes={"index": str(index)},
                )
                by_name[name] = gte
            instruction.operands[position] = made[operand].name
    after: dict[str, list[HloInstruction]] = {}
    for operand, gte in sorted(made.items(), key=lambda item: int(item[0].rsplit("#", 1)[1])):
        after.setdefault(gte.operands[0], []).append(gte)
    known = {i.name for i in computation.instructions}
    ordered = [gte for base, gtes in after.items() if base not in known for gte in gtes]  # names no instruction here
    for instruction in computation.instructions:
        ordered.append(instruction)
        ordered += after.get(instruction.name, [])
    computation.instructions = ordered


def _tuple_shapes(shape: str) -> list[str]:
    if not shape.startswith("("):
        return []
    return [strip_comments(p).strip() for p in split_top_level(shape[1:-1]) if strip_comments(p).strip()]


def wrap_async_operations(computations: dict[str, HloComputation]) -> dict[str, HloComputation]:
    """Add the computation XLA's parser builds for each ``<opcode>-start`` of an op without async opcodes
    of its own (``custom-call-start``, ``fusion-start``...): parameters for the operands and the op itself
    as root, named ``async_wrapped`` (uniquified) and placed before the computation that starts it."""
    if not any(i.opcode.endswith("-start") and i.opcode not in OPCODES for c in computations.values() for i in c.instructions):
        return computations
    result: dict[str, HloComputation] = {}
    taken = set(computations)
    for computation in computations.values():
        for instruction in computation.instructions:
            wrapped = instruction.opcode.removesuffix("-start")
            if wrapped == instruction.opcode or instruction.opcode in OPCODES or wrapped not in OPCODES:
                continue
            name, number = "async_wrapped", 0
            while name in taken:
                number += 1
                name = f"async_wrapped.{number}"
            taken.add(name)
            result[name] = _async_wrapped(name, wrapped, instruction)
        result[computation.name] = computation
    return result


def _async_wrapped(name: str, opcode: str, start: HloInstruction) -> HloComputation:
    # the start's shape is ((operand shapes), result shape, state...)
    parts = [strip_comments(p).strip() for p in split_top_level(start.shape[1:-1])] if start.shape.startswith("(") else []
    operand_shapes = [p.strip() for p in split_top_level(parts[0][1:-1]) if p.strip()] if parts and parts[0].startswith("(") else []
    computation = HloComputation(name=name)
    for number, operand in enumerate(start.operands):
        shape = operand_shapes[number] if number < len(operand_shapes) else ""
        parameter_name = "async_param" if number == 0 else f"async_param.{number}"
        computation.instructions.append(HloInstruction(
            name=parameter_name, opcode="parameter", shape=shape, computation=name, parameter_number=number,
        ))
    computation.instructions.append(HloInstruction(
        name="async_op", opcode=opcode, shape=parts[1] if len(parts) > 1 else "", computation=name, is_root=True,
        operands=[p.name for p in computation.instructions], attributes=dict(start.attributes),
        called_computations=list(start.called_computations),
    ))
    return computation


def _resolve_stack_frames(computations, tables: dict[str, dict[int, str]]) -> None:
    """Fill source_file/source_line from JAX's StackFrames table (the innermost frame is the user's line)."""
    where_is = _frame_locator(tables)
    for computation in computations:
        for instruction in computation.instructions:
            if instruction.stack_frame_id is not None and instruction.source_file is None:
                where = where_is(instruction.stack_frame_id)
                if where is not None:
                    instruction.source_file, instruction.source_line = where


def _frame_locator(tables: dict[str, dict[int, str]]):
    """frame id -> (file, line) or None, from the StackFrames, FileLocations and FileNames tables, each frame
    looked up once (many instructions share one). The text printer writes each frame's parent id one too
    high; only file locations are used here."""
    frames, locations, files = tables["StackFrames"], tables["FileLocations"], tables["FileNames"]
    resolved: dict[int, tuple[str, int | None] | None] = {}

    def locate(frame_id: int) -> tuple[str, int | None] | None:
        if frame_id not in resolved:
            frame = dict(_FIELD.findall(frames.get(frame_id, "")))
            location = dict(_FIELD.findall(locations.get(int(frame.get("file_location_id", "0") or 0), "")))
            file_name = files.get(int(location.get("file_name_id", "0") or 0))
            line = location.get("line", "")
            resolved[frame_id] = None if file_name is None else (unquote(file_name), int(line) if line.isdigit() else None)
        return resolved[frame_id]

    return locate


def mark_fusion_computations(module: HloModule) -> None:
    """Flag computations that are fused by name (``fused_*``) or because a fusion instruction calls them."""
    fused = {c for i in module.instructions() if i.opcode == "fusion" for c in i.called_computations}
    for computation in module.computations.values():
        if computation.name in fused or computation.name.startswith("fused_") or ".fused" in computation.name:
            computation.is_fusion = True


def signature_of(computation: HloComputation) -> str:
    """The signature built from a computation's parameters and root."""
    root = next((i for i in computation.instructions if i.name == computation.root), None)
    return format_signature([p.shape for p in computation.parameters], root.shape if root else "()")


def _canonical_lines(module: HloModule) -> Iterator[str]:
    computation_ids = {name: f"c{n}" for n, name in enumerate(module.computations)}

    def calls(m: re.Match) -> str:
        return computation_ids.get(m.group(1), m.group(0))

    header = (f"{k}={v}" for k, v in sorted(module.header_attributes.items()) if k not in PER_RUN_ATTRIBUTES)
    yield "HloModule " + ", ".join(header)
    position = 0
    for computation in module.computations.values():
        local: dict[str, str] = {}
        for instruction in computation.instructions:
            local.setdefault(instruction.name, f"v{position}")
            position += 1

        def wire(m: re.Match) -> str:
            return local.get(m.group(1), m.group(0))

        yield f"{'ENTRY ' if computation.is_entry else ''}{computation_ids[computation.name]} {{"
        for instruction in computation.instructions:
            if instruction.opcode == "constant":
                arguments = instruction.literal or ""
            elif instruction.opcode == "parameter":
                arguments = str(instruction.parameter_number)
            else:
                arguments = ", ".join(local.get(o, o) for o in instruction.operands)
            attributes = []
            for key, value in sorted(instruction.attributes.items()):
                if key in PER_RUN_ATTRIBUTES:
                    continue
                if key in CALLED_COMPUTATION_KEYS:
                    value = _NAME_REF.sub(calls, value)
                elif key in INSTRUCTION_REF_KEYS:
                    value = _NAME_REF.sub(wire, value)
                elif key == "backend_config":
                    value = _PER_RUN_BACKEND_KEYS.sub("", value)
                attributes.append(f", {key}={value}")
            root = "ROOT " if instruction.is_root else ""
            shape = re.sub(r"\s+", "", instruction.shape)
            yield f"  {root}{local[instruction.name]} = {shape} {instruction.opcode}({arguments}){''.join(attributes)}"
        yield "}"


@dataclass
class TextFacts:
    """What the index keeps from one module's text (:func:`scan_hlo_text`); the same values a parse gives."""

    instructions: int
    opcodes: Counter
    names: set[str]
    op_names: set[str]
    #: ``file:line`` (or ``file``) of every instruction that has a source location.
    sources: set[str]
    elided_constants: bool
    entry_signature: str


# An instruction line as XLA prints it, up to its operands' ")": name, then opcode (the shape between is an
# array shape or a tuple, nested at most twice; the operands hold no parenthesis: else the line is left
# unmatched, an operand written as an instruction among others, and the scan declines).
_SCAN_INSTRUCTION = re.compile(
    r'\n  (?:ROOT )?%?([^\s=%(]+) = (?:[^\s(]+|\((?:[^()\n]|\((?:[^()\n]|\([^()\n]*\))*\))*\)) ([A-Za-z][\w\-]*)\(([^()\n]*)\)'
)
# An operand written %x#1: element 1 of tuple-shaped %x, a get-tuple-element XLA's parser builds (named x_1).
_SCAN_TUPLE_REFERENCE = re.compile(r'%?([^\s,%#]+)#(\d+)')
# A line that is none of: an instruction (two-space indent), a computation's header or end, a table's name or
# entry, or blank. Where there is one, the text is not as XLA prints it.
_SCAN_STRANGE_LINE = re.compile(r'\n(?!  \S|\}(?: // [^\n]*)?(?:\n|$)|\n|$|\d+ |(?:FileNames|FunctionNames|FileLocations|StackFrames)\n|(?:ENTRY )?%?[^\s({]+ [^\n]*\{\n)')
_SCAN_TABLE = re.compile(r'\n(FileNames|FunctionNames|FileLocations|StackFrames)\n((?:\d+ [^\n]*\n)*)')
_SCAN_METADATA = re.compile(_METADATA.pattern.replace(r",\s*", ", "))  # a literal start: the search leaps to each one (2x faster)
_SCAN_CONSTANT_LINE = re.compile(r'\n(  [^\n]* constant\([^\n]*)')


_SCAN_LINE_WITH_TWO_EQUALS = re.compile(r"\n[^\n]* = [^\n]* = [^\n]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# "name = " then a shape or an opcode: an instruction starts (backend_config={uplo = 76 : ui8} does not)
_STATEMENT = re.compile(r"%?[A-Za-z_][\w.\-]* = (?:\(|[a-z][a-z0-9]*\[|[a-z][\w\-]*\()")


def _two_statements_on_a_line(text: str) -> bool:
    """A line holding two instructions, strings aside (``a = f32[] x(p), dimensions={0} b = f32[] y(q)``)."""
    return any(len(_STATEMENT.findall(_STRING.sub("", line))) > 1 for line in _SCAN_LINE_WITH_TWO_EQUALS.findall(text))


def scan_hlo_text(data: bytes) -> TextFacts | None:
    """The index's facts of module text as XLA prints it (:func:`as_xla_prints`), read with a few patterns
    over the whole text instead of line by line: 4x faster than ``parse_hlo_text(summary=True)``, with equal
    values. None where the text is laid out otherwise or looks damaged (cut short, stray lines): parse it,
    and the parse says what is wrong."""
    if not as_xla_prints(data):
        return None
    text = data.decode("utf-8", errors="replace")
    if not text[text.rstrip().rfind("\n") + 1 :].startswith("}") or _SCAN_STRANGE_LINE.search(text, text.find("\n")) is not None:
        return None
    heads = _SCAN_INSTRUCTION.findall(text)
    if len(heads) != text.count("\n  ") or (len(heads) != text.count(" = ") and _two_statements_on_a_line(text)):
        return None  # a line the pattern does not read, or two statements on a line: the parse reads them
    opcodes = Counter(opcode for _name, opcode, _operands in heads)
    names = {name for name, _opcode, _operands in heads}
    references = {ref for _n, _o, operands in heads if "#" in operands for ref in _SCAN_TUPLE_REFERENCE.findall(operands)}
    if references:
        built = {f"{base}_{index}" for base, index in references}
        if len(built) != len(references) or built & names:
            return None  # names XLA would make unique: the parse does
        names |= built
        opcodes["get-tuple-element"] += len(references)
    if any(op.endswith("-start") and op not in OPCODES for op in opcodes):
        return None  # an async pair: XLA builds a computation for it, and so does the parse
    header_line = text[: text.find("\n")]
    name = _MODULE_LINE.match(header_line)
    try:
        header = _parse_attributes(header_line, name.end()) if name else {}
    except LineError:
        return None
    layout = header.get("entry_computation_layout")
    signature = layout and _signature_from_layout(layout)
    if not signature:
        return None  # from the entry computation's parameters: the parse finds them
    elided = False
    if "{...}" in text:
        for line in _SCAN_CONSTANT_LINE.findall(text):
            if "{...}" in line:
                try:
                    elided = elided or _parse_instruction(line, "").has_elided_constant
                except LineError:
                    return None
    tables: dict[str, dict[int, str]] = {name: {} for name in _SECTIONS}
    for table, body in _SCAN_TABLE.findall(text):
        for entry in body.splitlines():
            if (m := _SECTION_ENTRY.match(entry)) is not None:
                tables[table][int(m.group(1))] = m.group(2)
    locate = _frame_locator(tables)
    op_names: set[str] = set()
    sources: set[str] = set()
    for metadata in set(_SCAN_METADATA.findall(text)):  # many instructions share one
        facts = HloInstruction(name="", opcode="", shape="")
        apply_metadata(facts, metadata)
        if facts.op_name:
            op_names.add(facts.op_name)
        if facts.source_file is None and facts.stack_frame_id is not None and (where := locate(facts.stack_frame_id)) is not None:
            facts.source_file, facts.source_line = where
        if facts.source_file:
            sources.add(f"{facts.source_file}:{facts.source_line}" if facts.source_line else facts.source_file)
    return TextFacts(
        instructions=len(heads) + len(references), opcodes=opcodes, names=names,
        op_names=op_names, sources=sources, elided_constants=elided, entry_signature=signature,
    )


def parse_hlo_text(text: str, summary: bool = False) -> HloModule:
    """Parse one HLO module printed as text (XLA dump, ``as_hlo_text()``, or hand-written).

    ``summary``: read only what the index keeps (names, opcodes, shapes, roots, parameter numbers,
    metadata, elided constants), about 1.5x faster; operands, attributes and called computations stay
    empty for most instructions, and the module has no fingerprint.

    Text laid out as XLA prints it is read line by line; anything else XLA's own parser accepts (line
    breaks and comments anywhere, no ``HloModule`` line, inline operands...) by :mod:`xlarun.hlo_grammar`.

    Raises :class:`InputError` whose message names the line (``HLO text line N: ...``).
    """
    try:
        return _TextParser(text, summary).parse()
    except InputError as line_error:
        return _parse_any_layout(text, line_error)


_ERROR_LINE = re.compile(r"HLO text line (\d+)")


def _parse_any_layout(text: str, line_error: InputError) -> HloModule:
    """The module read by XLA's grammar; when that fails too, the error of the reader that got further."""
    from .hlo_grammar import GrammarParser, HloSyntaxError, infer_missing_shapes

    try:
        parsed = GrammarParser(text).parse()
    except HloSyntaxError as error:
        at = _ERROR_LINE.match(line_error.message)
        if at is not None and error.lineno > int(at.group(1)):
            raise InputError(f"HLO text line {error.lineno}: {error}", _HINT) from None
        raise line_error from None
    infer_missing_shapes(parsed.computations)
    return assemble_module(parsed.module_name, parsed.computations, parsed.entry, parsed.header, parsed.tables)


# What HLO text starts with, after comments: the HloModule line, or a computation (name, maybe its
# parameters and result, '{', then an instruction), as XLA's parser reads a file without an HloModule line.
_HLO_TEXT_START = re.compile(
    rb"(?:\s|//[^\n]*|/\*.*?\*/)*(?:HloModule\s|(?:ENTRY\s+)?%?[A-Za-z_][\w.\-]*(?:[ \t]*\([^\n=]*?|\s*)"
    rb"\{(?:\s|//[^\n]*|/\*.*?\*/)*(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=)",
    re.S,
)
_GZIP_MAGIC = b"\x1f\x8b"
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_FORMATS_HINT = "xlarun reads HLO text (.txt, .hlo), HLO protos (.pb, .hlo.pb: HloProto, HloModuleProto, HloSnapshot), gzipped or not"


def looks_like_hlo_text(data: bytes) -> bool:
    """The one test of "is this HLO text": after comments and blank lines, an ``HloModule`` line or a
    computation (``[ENTRY] name [(params) -> shape] {`` and an instruction) starts the bytes."""
    return _HLO_TEXT_START.match(data[:65536]) is not None


def looks_like_text(data: bytes) -> bool:
    """No control characters in the first 4 KiB (protos have them); empty data is not text."""
    return bool(data) and _CONTROL.search(data[:4096]) is None


def gunzip(data: bytes, name: str = "the file") -> bytes:
    """``data`` decompressed when it is gzip (``--xla_dump_compress_protos``), else as it is."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError) as error:
        raise InputError(f"{name} is not a valid gzip file: {error}") from None


def load_hlo(data: bytes, name: str = "", kind: str | None = None, summary: bool = False) -> HloModule:
    """An HLO module from a file's bytes: the one loader (render, the index and replay use it).

    Gzipped or not; HLO text (as XLA prints it, hand-written, comments first) or a binary HloProto,
    HloModuleProto or HloSnapshot. ``kind`` (``"text"`` or ``"proto"``) says which when the caller knows;
    else ``name``'s extension (``.txt``/``.hlo``, ``.pb``) does; else the content. ``summary``: see
    :func:`parse_hlo_text`. Raises :class:`InputError` for anything else.
    """
    label = name or "the file"
    data = gunzip(data, label)
    base = name.removesuffix(".gz")
    if kind is None:
        if base.endswith(".pb"):
            kind = "proto"
        elif base.endswith((".txt", ".hlo")) or looks_like_hlo_text(data):
            kind = "text"
        elif looks_like_text(data):
            raise InputError(f"{label} is text but not an HLO module", _FORMATS_HINT)
        else:
            kind = "proto"
    if kind == "text":
        return parse_hlo_text(data.decode("utf-8", errors="replace"), summary=summary)
    from .hloproto import summarize_hlo_proto  # hloproto builds on this module's classes

    return summarize_hlo_proto(data)


def read_hlo_file(path: str | Path) -> HloModule:
    """Read a module from a file (see :func:`load_hlo`); by extension where it says, else by content.

    A ``.pb`` may hold an HloProto (XLA's dump), a bare HloModuleProto or an HloSnapshot.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = "check the path; dumps are named module_NNNN.<name>.<stage>.txt"
        raise InputError(f"no such HLO file: {path}", hint) from None
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    try:
        if not path.name.removesuffix(".gz").endswith((".pb", ".txt", ".hlo")) and not looks_like_hlo_text(gunzip(data)):
            raise InputError(f"cannot tell the format of {path}", _FORMATS_HINT)
        return load_hlo(data, path.name)
    except InputError as error:
        if error.message.startswith("cannot tell the format"):
            raise
        raise InputError(f"{path}: {error.message}", error.hint) from None
