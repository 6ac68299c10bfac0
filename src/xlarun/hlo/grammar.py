"""HLO text in any layout XLA's own parser accepts, read token by token.

:mod:`xlarun.hlo` reads text laid out as XLA prints it (one instruction a line) with line patterns;
what it cannot read that way comes here: hand-written HLO from XLA's tests and docs, with line
breaks and comments anywhere, several statements on a line, no ``HloModule`` line, instructions
without a shape, and operands written inline (``tuple(s32[] constant(1), %x)``), for which XLA's
parser builds an instruction of their own, as it is done here. Shapes and attribute values are kept
as text, as the line reader keeps them. Both build the same model (:class:`xlarun.hlo.HloModule`).
"""

from __future__ import annotations

import re
from typing import Any

from xlarun.hlo.lex import LineError

# Nested instructions and tuple shapes deeper than this are refused (XLA has a recursion limit too).
MAX_DEPTH = 200
# Whitespace and comments; then one token: a string, '->', '<=', an identifier or number, or one character.
_SKIP = re.compile(r"(?:\s|//[^\n\r]*|/\*.*?\*/)*", re.S)
_TOKEN = re.compile(r"""("[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')|(->|<=)|(%?[A-Za-z_][\w.\-]*|[\w.\-?+]+)|(\S)""")
_PRIMITIVE_TYPE = re.compile(r"pred|token|opaque|bf16|c64|c128|[su](?:1|2|4|8|16|32|64)|f(?:16|32|64)|f\d+e\d+m\d+\w*")
_SPACES = re.compile(r"\s+")
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_OPEN, _CLOSE = "([{", ")]}"
STRING, SYMBOL, WORD, CHAR, EOF = "string", "symbol", "word", "char", "eof"
# Opcodes XLA's parser accepts without a shape (xla/hlo/parser/hlo_parser.cc, CanInferShape).
SHAPE_MAY_BE_LEFT_OUT = frozenset(
    """
abs acos acosh asin asinh add add-dependency after-all atan2 atanh batch-norm-grad batch-norm-inference
batch-norm-training broadcast call ceil cholesky clamp count-leading-zeros compare complex concatenate conditional
convolution copy cosine cosh opt-barrier divide domain dot erf exponential exponential-minus-one fft floor gather
get-dimension-size set-dimension-size get-tuple-element imag is-finite log log-plus-one logistic and not or xor map
maximum minimum multiply negate pad partition-id popcnt power ragged-dot real reduce remainder replica-id reverse
round-nearest-afz round-nearest-even rsqrt scan scaled-dot scatter select shift-left shift-right-arithmetic
shift-right-logical sign sine sinh sqrt cbrt reduce-window select-and-scatter sort subtract tan tanh transpose
triangular-solve tuple while topk
""".split()
)
# Attributes that name one computation, which XLA's parser also accepts written out in place.
INLINE_COMPUTATION_KEYS = frozenset(
    {"calls", "to_apply", "condition", "body", "select", "scatter", "true_computation", "false_computation"}
)


class HloSyntaxError(LineError):
    """Text XLA's grammar does not allow, at ``lineno``."""

    def __init__(self, message: str, lineno: int):
        super().__init__(message)
        self.lineno = lineno


class _Token:
    __slots__ = ("end", "kind", "start", "text")

    def __init__(self, kind: str, text: str, start: int, end: int):
        self.kind, self.text, self.start, self.end = kind, text, start, end

    def is_(self, text: str) -> bool:
        return self.kind != STRING and self.text == text


class GrammarParser:
    """Reads one module; :meth:`parse` returns the pieces :mod:`xlarun.hlo` assembles into a module."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.depth = 0
        self.module_name: str | None = None
        self.header: dict[str, str] = {}
        self.computations: dict = {}
        self.entry: str | None = None
        self.tables: dict[str, dict[int, str]] = {s: {} for s in _SECTIONS}
        self._anonymous: dict[str, int] = {}
        self._named: set[str] = set()

    # --- tokens ---------------------------------------------------------------------------------

    def peek(self, pos: int | None = None) -> _Token:
        skipped = _SKIP.match(self.text, self.pos if pos is None else pos)
        assert skipped is not None  # the pattern matches the empty string
        pos = skipped.end()
        m = _TOKEN.match(self.text, pos)
        if m is None:
            return _Token(EOF, "", len(self.text), len(self.text))
        string, symbol, word, char = m.groups()
        if string is not None:
            return _Token(STRING, string, pos, m.end())
        if symbol is not None:
            return _Token(SYMBOL, symbol, pos, m.end())
        if word is not None:
            return _Token(WORD, word, pos, m.end())
        if char in "\"'":
            raise self.error("unterminated string", pos)
        return _Token(CHAR, char, pos, m.end())

    def take(self) -> _Token:
        token = self.peek()
        self.pos = token.end
        return token

    def name(self) -> _Token:
        """A name token; XLA's lexer takes ``name:`` as a name too."""
        token = self.take()
        if token.kind == WORD and self.text.startswith(":", token.end):
            self.pos += 1
        return token

    def expect(self, text: str, what: str) -> _Token:
        token = self.take()
        if not token.is_(text):
            raise self.error(f"expected {what} but found {self._show(token)}", token.start, after=True)
        return token

    def error(self, message: str, pos: int | None = None, after: bool = False) -> HloSyntaxError:
        """The error at ``pos``; ``after``: about what should have followed, so on the line of the text before it."""
        pos = self.pos if pos is None else pos
        pos = len(self.text[:pos].rstrip()) if after else min(pos, len(self.text.rstrip()))
        return HloSyntaxError(message, self.text.count("\n", 0, pos) + 1)

    def _show(self, token: _Token) -> str:
        return "the end of the text" if token.kind == EOF else repr(self.text[token.start : token.start + 30])

    def skip_balanced(self) -> str:
        """From an opening bracket to its match, iteratively; the raw text."""
        start = self.peek().start
        closers: list[str] = []
        while True:
            token = self.take()
            if token.kind == EOF:
                raise self.error("unbalanced brackets (the text may be cut short)", start)
            if token.kind == CHAR and token.text in _OPEN:
                closers.append(_CLOSE[_OPEN.index(token.text)])
            elif token.kind == CHAR and token.text in _CLOSE:
                if not closers or token.text != closers.pop():
                    raise self.error(f"unbalanced brackets: {token.text!r} closes a different bracket", start)
                if not closers:
                    return self.text[start : token.end]

    # --- module ---------------------------------------------------------------------------------

    def parse(self) -> GrammarParser:
        token = self.peek()
        if token.is_("HloModule"):
            self.take()
            name = self.name()
            if name.kind != WORD:
                raise self.error(f"expected the module's name after HloModule but found {self._show(name)}", name.start)
            self.module_name = name.text.lstrip("%")
            self.header = self.attributes()
        while True:
            token = self.peek()
            if token.kind == EOF:
                break
            if token.kind == WORD and token.text in _SECTIONS:
                self.table(self.take().text)
            elif token.is_("HloModule"):
                raise self.error("a second HloModule in one file", token.start)
            else:
                self.computation()
        if not self.computations:
            raise self.error("the module has no computations", len(self.text))
        return self

    def table(self, section: str) -> None:
        while (token := self.peek()).kind == WORD and token.text.isdigit():
            self.take()
            value = self.peek()
            if value.is_("{"):
                entry = self.skip_balanced()
            elif value.kind == STRING:
                entry = self.take().text
            else:
                raise self.error(f"expected a {section} entry but found {self._show(value)}", value.start)
            self.tables[section][int(token.text)] = entry

    def computation(self) -> None:
        is_entry = self.peek().is_("ENTRY")
        if is_entry:
            self.take()
        name = self.name()
        if name.kind != WORD:
            raise self.error(f"expected a computation's name but found {self._show(name)}", name.start)
        if self.peek().is_("("):
            self.skip_balanced()  # the parameter list: the parameters are read from the body
            if self.peek().is_("->"):
                self.take()
                self.shape()
        computation = self.instruction_list(name.text.lstrip("%"), name.start)
        computation.is_entry = is_entry
        if is_entry:
            self.entry = computation.name
        self.attributes()  # execution_thread="..."

    def instruction_list(self, name: str, at: int) -> Any:
        """``{ instructions }`` as a computation called ``name``, added (as XLA adds it) once it is read."""
        from xlarun.hlo.model import HloComputation

        self.expect("{", "'{' opening the computation's instructions")
        if name in self.computations:
            raise self.error(f"computation %{name} is defined twice", at)
        computation = HloComputation(name=name)
        while not self.peek().is_("}"):
            if self.peek().kind == EOF:
                raise self.error(f"computation %{name} is not closed with '}}'", len(self.text))
            self.instruction(computation)
        self.take()
        self.computations[name] = computation
        return computation

    # --- instructions ---------------------------------------------------------------------------

    def instruction(self, computation: Any) -> None:
        is_root = self.peek().is_("ROOT")
        if is_root:
            self.take()
        name = self.take()
        if name.kind != WORD or not self.peek().is_("="):
            raise self.error("expected '%name = shape opcode(operands), attributes' or '}'", name.start)
        self.take()
        instruction = self.right_hand_side(computation, name.text.lstrip("%"), with_attributes=True)
        instruction.is_root = is_root

    def right_hand_side(self, computation: Any, name: str, with_attributes: bool) -> Any:
        from xlarun.hlo.model import HloInstruction, apply_metadata, called_computations

        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"instructions nested more than {MAX_DEPTH} deep")
        try:
            shape = self.shape() if self.can_be_shape() else ""
            opcode = self.take()
            if opcode.kind != WORD or not self.peek().is_("("):
                raise self.error(f"expected an opcode and '(' but found {self._show(opcode)}", opcode.start, after=True)
            if not shape and opcode.text not in SHAPE_MAY_BE_LEFT_OUT:
                raise self.error(
                    f"expected a shape like f32[8,128]{{1,0}} before {opcode.text}: XLA infers no shape for it", opcode.start
                )
            instruction = HloInstruction(name=name, opcode=opcode.text, shape=shape, computation=computation.name)
            if opcode.text == "constant":
                literal = self.skip_balanced()[1:-1]
                instruction.literal = literal.strip()
                instruction.has_elided_constant = "{...}" in literal
            elif opcode.text == "parameter":
                self.take()
                number = self.take()
                instruction.parameter_number = int(number.text) if number.text.isdigit() else None
                self.expect(")", "')' after the parameter number")
            else:
                instruction.operands = self.operands(computation)
            if not name:
                instruction.name = self.anonymous_name(opcode.text)
            if with_attributes:
                instruction.attributes = self.attributes(instruction.name)
                instruction.called_computations = called_computations(instruction.attributes)
                if "metadata" in instruction.attributes:
                    apply_metadata(instruction, instruction.attributes["metadata"])
            computation.instructions.append(instruction)
            return instruction
        finally:
            self.depth -= 1

    def anonymous_name(self, opcode: str) -> str:
        base = f"{opcode}.anon"
        count = self._anonymous.get(base, 0)
        self._anonymous[base] = count + 1
        return base if count == 0 else f"{base}.{count}"

    def operands(self, computation: Any) -> list[str]:
        self.expect("(", "'('")
        names: list[str] = []
        if self.peek().is_(")"):
            self.take()
            return names
        while True:
            start = self.pos
            named = self.named_operand()
            if named is None:  # an instruction written inline: XLA builds it, and so does this reader
                self.pos = start
                named = self.right_hand_side(computation, "", with_attributes=False).name
            names.append(named)
            token = self.take()
            if token.is_(")"):
                return names
            if not token.is_(","):
                raise self.error(f"expected ',' or ')' between operands but found {self._show(token)}", token.start)

    def named_operand(self) -> str | None:
        """``[shape] name`` followed by ',' or ')'; None where the operand is an inline instruction."""
        if self.can_be_shape():
            self.shape()
        name = self.take()
        if name.kind != WORD:
            if name.kind == EOF:
                raise self.error("unbalanced brackets (the text may be cut short)", name.start)
            return None
        following = self.peek()
        if following.is_("#"):  # %x#1: element 1 of tuple-shaped %x (hlo.expand_tuple_references builds it)
            self.take()
            index = self.take()
            if index.kind != WORD or not index.text.isdigit():
                raise self.error(f"expected a tuple index after '#' but found {self._show(index)}", index.start)
            following = self.peek()
            return f"{name.text.lstrip('%')}#{index.text}" if following.is_(",") or following.is_(")") else None
        return name.text.lstrip("%") if following.is_(",") or following.is_(")") else None

    # --- shapes and attributes ------------------------------------------------------------------

    def can_be_shape(self) -> bool:
        token = self.peek()
        if token.kind == CHAR:
            return token.text == "("
        if token.kind != WORD:
            return False
        if token.text == "b":
            return self.peek(token.end).is_("(")
        return _PRIMITIVE_TYPE.fullmatch(token.text) is not None

    def shape(self) -> str:
        """One shape, as XLA prints it (no spaces but after a tuple's commas)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"shapes nested more than {MAX_DEPTH} deep")
        try:
            token = self.take()
            if token.is_("b"):
                self.expect("(", "'(' after 'b'")
                inner = self.shape()
                self.expect(")", "')' closing a buffer shape")
                return f"b({inner})"
            if token.is_("("):
                parts = []
                if not self.peek().is_(")"):
                    parts.append(self.shape())
                    while self.peek().is_(","):
                        self.take()
                        parts.append(self.shape())
                self.expect(")", "')' closing a tuple shape")
                return f"({', '.join(parts)})"
            if token.kind != WORD or _PRIMITIVE_TYPE.fullmatch(token.text) is None:
                raise self.error(f"expected a shape like f32[8,128]{{1,0}} but found {self._show(token)}", token.start)
            if not self.peek().is_("["):
                raise self.error(f"expected '[' after {token.text}", self.pos)
            text = token.text + _SPACES.sub("", self.skip_balanced())
            brace = self.peek()
            if brace.is_("{"):
                after = self.peek(brace.end)
                if after.is_(":") or (after.kind == WORD and after.text[:1].isdigit()):  # else '{' opens a computation
                    text += _SPACES.sub("", self.skip_balanced())
            return text
        finally:
            self.depth -= 1

    def attributes(self, instruction: str | None = None) -> dict[str, str]:
        """``, key=value`` pairs, values as raw text. A computation written in place of a called one's name
        (``to_apply={ instructions }``) is read as a computation of its own, as XLA reads it."""
        attributes: dict[str, str] = {}
        while self.peek().is_(","):
            self.take()
            key = self.take()
            if key.kind != WORD or not self.peek().is_("="):
                raise self.error(f"expected ', key=value' but found {self._show(key)}", key.start)
            self.take()
            if instruction is not None and key.text in INLINE_COMPUTATION_KEYS and self._inline_computation_follows():
                name = self.unique_computation_name(f"{instruction}.{key.text}")
                attributes[key.text] = "%" + self.instruction_list(name, key.start).name
            elif key.text == "literal" and self.can_be_shape():  # custom-call's literal=s32[2] {1, 2}
                shape = self.shape()
                attributes[key.text] = f"{shape} {self.value()}"
            else:
                attributes[key.text] = self.value()
        return attributes

    def _inline_computation_follows(self) -> bool:
        """'{' then an instruction ('ROOT' or 'name =') rather than a list of computation names."""
        brace = self.peek()
        if not brace.is_("{"):
            return False
        first = self.peek(brace.end)
        return first.is_("ROOT") or (first.kind == WORD and self.peek(first.end).is_("="))

    def unique_computation_name(self, base: str) -> str:
        name, number = base, 0
        while name in self.computations or name in self._named:
            number += 1
            name = f"{base}.{number}"
        self._named.add(name)  # taken now, though added only once read
        return name

    def value(self) -> str:
        """An attribute value: tokens and bracketed groups (``[2,4]<=[4,2]T(1,0)``) up to a ',' or a space."""
        token = self.peek()
        start = token.start
        while token.kind != EOF and not (token.kind == CHAR and token.text in ",)]}"):
            if token.kind == CHAR and token.text in _OPEN:
                self.skip_balanced()
            else:
                self.pos = token.end
            token = self.peek()
            if token.start != self.pos and not (token.kind == SYMBOL or (token.kind == CHAR and token.text in _OPEN)):
                break  # a space ends a value but before a bracket (mesh['x'=2] {'x'}), '<=' or '->'
        if self.pos <= start:
            raise self.error("expected an attribute value", start)
        return self.text[start : self.pos]


# --- shapes XLA infers --------------------------------------------------------------------------------
