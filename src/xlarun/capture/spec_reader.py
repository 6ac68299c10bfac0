"""Reading a run spec within fixed bounds: the file's bytes, then its YAML.

A spec is a few dozen keys, so every reader of one has a limit a real spec never meets and a hostile one
meets at once: the file must be a regular file of at most :data:`MAX_SPEC_BYTES`; its YAML may nest
:data:`MAX_DEPTH` levels and hold :data:`MAX_VALUES` values and :data:`MAX_CHARS` characters, all counted
with aliases expanded (so a "billion laughs" is refused before anything walks it); a recursive alias is
refused. A matrix spec's cells share :data:`MAX_MATRIX_VALUES` values in all. Each limit is named in the
error that meets it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xlarun.bounded_read import FileRefused, read_regular
from xlarun.errors import SpecError

#: The largest spec file read (1 MiB: a real spec is a few KB).
MAX_SPEC_BYTES = 1 << 20
#: The deepest nesting of mappings and lists (a real spec nests four or five levels).
MAX_DEPTH = 32
#: The most values (scalars, lists and mappings) one spec, or one cell of a matrix, may hold with aliases expanded.
MAX_VALUES = 10_000
#: The most characters in a spec's values with aliases expanded: no more than a file could hold without aliases.
MAX_CHARS = MAX_SPEC_BYTES
#: The most values all the cells of a matrix spec may hold together (1,000 cells of a 250-value spec).
MAX_MATRIX_VALUES = 250_000
#: The most characters all the cells of a matrix spec may hold together.
MAX_MATRIX_CHARS = 16 * MAX_CHARS


def read_spec_file(path: Path) -> str:
    """The text of the spec at ``path``: a regular UTF-8 file of at most :data:`MAX_SPEC_BYTES` (never blocks on a FIFO)."""
    try:
        data = read_regular(path, MAX_SPEC_BYTES, follow_links=True)  # a spec may be a link to one
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file", "check the path; `ls configs/` shows the bundled examples") from None
    except FileRefused as exc:
        if exc.kind is None:
            too_big = f"{path}: larger than {MAX_SPEC_BYTES // (1 << 20)} MiB, the most a spec may be"
            raise SpecError(too_big, "a spec is a few keys") from None
        hint = "give the path of a .yaml file" if exc.kind == "a folder" else "a spec is read from a regular .yaml file"
        raise SpecError(f"{path}: is {exc.kind}, not a spec file", hint) from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: cannot open the spec: {_reason(exc)}", "give the path of a readable .yaml file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start})", "save the spec as UTF-8") from None


def _reason(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class Budget:
    """Values and characters left to a reader; :meth:`spend` raises :class:`SpecError` (naming ``what``) when spent."""

    def __init__(self, what: str, values: int = MAX_VALUES, chars: int = MAX_CHARS, parent: Budget | None = None, hint: str = ""):
        self.what, self.values, self.chars, self.parent = what, values, chars, parent
        self.limits, self.hint = (values, chars), hint or _HINT

    def spend(self, values: int = 0, chars: int = 0) -> None:
        if self.parent is not None:
            self.parent.spend(values, chars)
        self.values -= values
        self.chars -= chars
        if self.values < 0:
            raise SpecError(f"{self.what} holds more than {self.limits[0]:,} values", self.hint)
        if self.chars < 0:
            raise SpecError(f"{self.what} holds more than {self.limits[1]:,} characters", self.hint)

    def spend_on(self, value: Any) -> None:
        """Spend one value per string, number, list and mapping in ``value``, and one character per character."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                self.spend(1, len(item))
            elif isinstance(item, dict):
                self.spend(1)
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                self.spend(1)
                stack.extend(item)
            else:
                self.spend(1, 1)


_HINT = "a spec is a few dozen keys: aliases (*name) may not make it larger than a file could be"


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with its composition depth bounded and bad scalars reported at their position."""

    def __init__(self, stream: str, source: str):
        super().__init__(stream)
        self.depth, self.nodes, self.source = 0, 0, source

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        self.nodes += 1  # as written: a file of a million one-character values stops here, not after composing them all
        try:
            if self.depth > MAX_DEPTH:
                where = _at(self.source, self.peek_event().start_mark)
                raise SpecError(f"{where} nested deeper than {MAX_DEPTH} levels", _HINT)
            if self.nodes > MAX_VALUES:
                where = _at(self.source, self.peek_event().start_mark)
                raise SpecError(f"{where} the spec holds more than {MAX_VALUES:,} values", _HINT)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Any, deep: Any = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (
            ValueError,
            OverflowError,
            TypeError,
            AttributeError,
            LookupError,
        ) as exc:  # int('9' * 5000), month 13, !!timestamp 'x'
            if node.tag.endswith(":int"):
                problem = f"a whole number of {len(node.value):,} characters is too long"
            else:
                problem = f"cannot read this value: {exc}"
            raise SpecError(f"{_at(self.source, node.start_mark)} {problem}", "quote it to keep it as text") from None


def _at(source: str, mark: yaml.Mark) -> str:
    return f"{source}:{mark.line + 1}:{mark.column + 1}"


def read_yaml(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """The YAML document in ``text`` as Python data and as its node graph, within the limits above."""
    loader = _BoundedLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _measure(node, source)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _at(source, mark) if mark else source
        raise SpecError(f"{where} YAML syntax error: {exc.problem or exc}", "fix the YAML at that position") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}", "fix the YAML syntax") from None
    finally:
        loader.dispose()


def _measure(root: yaml.Node, source: str) -> None:
    """Refuse a node graph that is recursive, or that expands (aliases followed) past the limits.

    Each node is measured once (its size and height remembered), so a bomb costs its size in the file, not its expansion.
    """
    sizes: dict[int, tuple[int, int, int]] = {}  # id(node) -> (values, chars, height) expanded
    open_nodes: set[int] = set()

    def measure(node: yaml.Node, depth: int) -> tuple[int, int, int]:
        known = sizes.get(id(node))
        if known is None:
            if id(node) in open_nodes:
                raise SpecError(
                    f"{_at(source, node.start_mark)} an alias refers to a value that contains it (a recursive alias)", _HINT
                )
            if depth > MAX_DEPTH:
                raise SpecError(f"{_at(source, node.start_mark)} nested deeper than {MAX_DEPTH} levels (aliases expanded)", _HINT)
            open_nodes.add(id(node))
            values, chars, height = 1, 0, 0
            if isinstance(node, yaml.ScalarNode):
                chars = len(node.value)
            else:
                children = (c for pair in node.value for c in pair) if isinstance(node, yaml.MappingNode) else node.value
                for child in children:
                    v, c, h = measure(child, depth + 1)
                    values, chars, height = values + v, chars + c, max(height, h + 1)
                    if values > MAX_VALUES or chars > MAX_CHARS:
                        break
            open_nodes.discard(id(node))
            known = sizes[id(node)] = (values, chars, height)
        if depth + known[2] > MAX_DEPTH:
            raise SpecError(f"{_at(source, node.start_mark)} nested deeper than {MAX_DEPTH} levels (aliases expanded)", _HINT)
        Budget(f"{_at(source, node.start_mark)} with its aliases expanded, this value").spend(known[0], known[1])
        return known

    measure(root, 0)
