"""The HLO text reader: a module as XLA prints it (dumps, ``as_hlo_text()``) or as people write it.

A summary parser, not XLA's: shapes, literals and attribute values are kept as raw text, and only the
structure around them is decoded. Text it cannot read line by line goes to XLA's grammar
(:mod:`xlarun.hlo.grammar`).
"""

from __future__ import annotations

import re

from xlarun.errors import InputError
from xlarun.hlo.lex import LineError, split_top_level, strip_comments, walk
from xlarun.hlo.model import (
    HloComputation,
    HloInstruction,
    HloModule,
    apply_metadata,
    assemble_module,
    called_computations,
)

_HINT = "is this an HLO text dump (module_*.txt)? a truncated file or a hand edit can cause this"
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_INSTR_HEAD = re.compile(r"\s*(ROOT\s+)?%?([^\s=%(]+)\s*=\s*")
# an instruction starts "name = " and then a shape; a wrapped attribute line ("calls=%f") does not
_NEW_INSTRUCTION = re.compile(r"\s*(ROOT\s+)?%?[^\s=%(]+\s*=\s*(?:\(|[A-Za-z][A-Za-z0-9]*\[)")
_COMP_HEAD = re.compile(r"\s*(ENTRY\s+)?%?([^\s({]+)")
_ARRAY_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?")
_OPCODE = re.compile(r"\s*([A-Za-z][\w\-]*)\(")
_SECTION_ENTRY = re.compile(r"\s*(\d+)\s+(.*?)\s*$")
_SPACES = re.compile(r"[ \t]*")
_MODULE_LINE = re.compile(r"HloModule\s+([^\s,]+)")
# How a computation ends: "}", "} // name" (XLA printed the name until 2025), "}, execution_thread=\"...\"".
_COMPUTATION_END = re.compile(r'\}\s*(?://.*|,\s*execution_thread\s*=\s*"[^"]*"\s*(?://.*)?)?')


# The common shapes of ", key=value" (a token, a string, or braces holding no braces), matched in one step;
# anything else (nested braces, as in backend_config JSON) goes through walk().
_SIMPLE_ATTRIBUTE = re.compile(
    r',[ \t]*([\w.\-]+)=(%?[\w.\-]+|"[^"\\]*(?:\\.[^"\\]*)*"|\{(?:[^{}"]|"[^"\\]*(?:\\.[^"\\]*)*")*\})[ \t]*(?=,|$|/\*)'
)
# An operand list holding no brackets, strings or comments: its closing parenthesis is the first one.
_SIMPLE_OPERANDS = re.compile(r'\(([^()\[\]{}"/]*)\)')
# _INSTR_HEAD, an array shape (_ARRAY_SHAPE) and _OPCODE up to the operands' "(", in one match: all a
# summary parse needs of an instruction line (root, name, shape, opcode).
_SUMMARY_HEAD = re.compile(
    r"\s*(ROOT\s+)?%?([^\s=%(]+)\s*=\s*([A-Za-z][A-Za-z0-9]*\[[^\]]*\](?:\{[^{}]*\})?)\s*([A-Za-z][\w\-]*)\("
)
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
        spaces = _SPACES.match(line, pos)
        assert spaces is not None  # the pattern matches the empty string
        pos = spaces.end()
        if line.startswith("/*", pos) and "*/" in line[pos:]:  # a trailing /* comment */
            pos = line.index("*/", pos) + 2
            continue
        if pos >= len(line):
            return attributes
        if line[pos] != ",":
            raise LineError(f"expected ', key=value' but found {line[pos : pos + 30]!r}")
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
        raise LineError(f"expected a shape like f32[8,128]{{1,0}} but found {line[pos : pos + 30]!r}")
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
        name=name,
        opcode=opcode,
        shape=shape,
        computation=computation,
        is_root=is_root is not None,
        attributes=_parse_attributes(line, close),
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


_PARAMETER_NUMBER = re.compile(r"\s*(\d+)\s*\)")
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
                if stripped[0] == "}" and _COMPUTATION_END.fullmatch(
                    stripped
                ):  # "} // name" (XLA until 2025), "}, execution_thread=..."
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
                lineno,
                f"expected 'HloModule <name>' but found {line[:60]!r}",
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


def parse_hlo_text(text: str, summary: bool = False) -> HloModule:
    """Parse one HLO module printed as text (XLA dump, ``as_hlo_text()``, or hand-written).

    ``summary``: read only what the index keeps (names, opcodes, shapes, roots, parameter numbers,
    metadata, elided constants), about 1.5x faster; operands, attributes and called computations stay
    empty for most instructions, and the module has no fingerprint.

    Text laid out as XLA prints it is read line by line; anything else XLA's own parser accepts (line
    breaks and comments anywhere, no ``HloModule`` line, inline operands...) by :mod:`xlarun.hlo.grammar`.

    Raises :class:`InputError` whose message names the line (``HLO text line N: ...``).
    """
    try:
        return _TextParser(text, summary).parse()
    except InputError as line_error:
        return _parse_any_layout(text, line_error)


_ERROR_LINE = re.compile(r"HLO text line (\d+)")


def _parse_any_layout(text: str, line_error: InputError) -> HloModule:
    """The module read by XLA's grammar; when that fails too, the error of the reader that got further."""
    from xlarun.hlo.grammar import GrammarParser, HloSyntaxError
    from xlarun.hlo.shapes import infer_missing_shapes

    try:
        parsed = GrammarParser(text).parse()
    except HloSyntaxError as error:
        at = _ERROR_LINE.match(line_error.message)
        if at is not None and error.lineno > int(at.group(1)):
            raise InputError(f"HLO text line {error.lineno}: {error}", _HINT) from None
        raise line_error from None
    infer_missing_shapes(parsed.computations)
    return assemble_module(parsed.module_name, parsed.computations, parsed.entry, parsed.header, parsed.tables)
