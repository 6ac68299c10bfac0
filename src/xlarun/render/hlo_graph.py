"""An HLO module as a :class:`~xlarun.render.graph.Graph`: xlarun's own HLO-to-DOT.

What is drawn: the entry computation and every computation reachable from it through control
flow (``while`` bodies and conditions, ``conditional`` branches, ``call``, async and custom-call
callees), each as a cluster nested in the computation that calls it. Fusions are one node
(their fused computation summarised in the label) unless expanded; reducers (``to_apply`` of
reduce, sort, scatter, all-reduce ...) are named in the caller's label, not drawn. Edges carry the
operand's shape; nodes are coloured by opcode category; the tooltip holds the ``op_name`` and
source line from the instruction's metadata.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from xlarun.errors import InputError
from xlarun.hlo import HloComputation, HloInstruction, HloModule, strip_layouts
from xlarun.render.graph import Cluster, Edge, Graph, Node, neighbourhood

#: Opcode category -> (fill colour, opcodes). The rest are elementwise (white).
CATEGORIES: dict[str, tuple[str, frozenset[str]]] = {
    "parameter": ("#fff2b3", frozenset({"parameter"})),
    "constant": ("#eeeeee", frozenset({"constant", "iota", "rng", "rng-bit-generator", "rng-get-and-update-state"})),
    "compute": (
        "#9fc5f8",
        frozenset({"dot", "convolution", "custom-call", "fft", "triangular-solve", "cholesky", "ragged-dot", "scaled-dot"}),
    ),
    "reduction": (
        "#b6e3a8",
        frozenset({"reduce", "reduce-window", "select-and-scatter", "sort", "scatter", "map", "reduce-precision"}),
    ),
    "collective": (
        "#f4b6b6",
        frozenset(
            {
                "all-reduce",
                "all-reduce-start",
                "all-reduce-done",
                "all-gather",
                "all-gather-start",
                "all-gather-done",
                "reduce-scatter",
                "all-to-all",
                "collective-permute",
                "collective-permute-start",
                "collective-permute-done",
                "collective-broadcast",
                "send",
                "send-done",
                "recv",
                "recv-done",
                "partition-id",
                "replica-id",
            }
        ),
    ),
    "data movement": (
        "#dfe7f2",
        frozenset(
            {
                "broadcast",
                "reshape",
                "transpose",
                "bitcast",
                "bitcast-convert",
                "copy",
                "copy-start",
                "copy-done",
                "slice",
                "dynamic-slice",
                "dynamic-update-slice",
                "concatenate",
                "pad",
                "gather",
                "reverse",
                "dynamic-reshape",
            }
        ),
    ),
    "tuple": ("#f5f5f5", frozenset({"tuple", "get-tuple-element", "opt-barrier", "add-dependency", "after-all"})),
    "control flow": ("#dccff0", frozenset({"while", "conditional", "call", "async-start", "async-update", "async-done"})),
    "fusion": ("#fbd5a6", frozenset({"fusion"})),
}
_CATEGORY_OF = {op: name for name, (_fill, ops) in CATEGORIES.items() for op in ops}
ELEMENTWISE_FILL = "#ffffff"
#: Attributes whose computations are drawn as clusters (control flow); other called computations are named in labels.
DRAWN_CALL_KEYS = (
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
    "calls",
    "called_computations",
)
_EDGE_LABEL_MAX = 48
#: Called computations are drawn as clusters down to this depth; deeper ones are named in their caller's label
#: (a 100,000-deep chain of calls would otherwise exhaust the stack here, and graphviz's at any rate).
MAX_NESTING = 24


def opcode_fill(opcode: str) -> str:
    category = _CATEGORY_OF.get(opcode)
    return CATEGORIES[category][0] if category else ELEMENTWISE_FILL


def hlo_graph(module: HloModule, expand: Iterable[str] = (), expand_all: bool = False, title: str | None = None) -> Graph:
    """The drawable graph of ``module``; fusions named in ``expand`` (or all, with ``expand_all``) are drawn open."""
    return _Builder(module, set(expand), expand_all, title).build()


def hlo_neighbourhood(module: HloModule, center: str, depth: int, expand: Iterable[str] = (), title: str | None = None) -> Graph:
    """The instructions within ``depth`` edges of ``center``; the fusions around it are opened."""
    instruction = module.find_instruction(center)
    if instruction is None:
        raise InputError(f"module {module.name} has no instruction {center!r}", _closest(module, center))
    opened = set(expand) | _fusions_around(module, instruction)
    graph = hlo_graph(module, expand=opened, title=title)
    if instruction.name not in graph.nodes:
        callers = [i.name for i in module.instructions() if instruction.computation in i.called_computations]
        raise InputError(
            f"{instruction.name} is in %{instruction.computation}, a computation not drawn (a reducer, a helper, or nested "
            f"more than {MAX_NESTING} calls deep)",
            f"draw around its caller: --around {callers[0]}" if callers else "choose an instruction of the entry computation",
        )
    return neighbourhood(graph, instruction.name, depth)


def _closest(module: HloModule, name: str) -> str:
    import difflib

    names = [i.name for i in module.instructions()]
    close = difflib.get_close_matches(name.lstrip("%"), names, n=5)
    return f"did you mean {', '.join(close)}?" if close else "`xlarun cat REF` shows the instruction names"


def _fusions_around(module: HloModule, instruction: HloInstruction) -> set[str]:
    """The fusion instructions that (transitively) hold ``instruction``, and ``instruction`` if it is a fusion."""
    callers: dict[str, list[HloInstruction]] = {}
    for candidate in module.instructions():
        if candidate.opcode == "fusion":
            for called in candidate.called_computations:
                callers.setdefault(called, []).append(candidate)
    opened = {instruction.name} if instruction.opcode == "fusion" else set()
    pending = [instruction.computation]
    while pending:
        computation = pending.pop()
        for fusion in callers.get(computation, []):
            if fusion.name not in opened:
                opened.add(fusion.name)
                pending.append(fusion.computation)
    return opened


class _Builder:
    def __init__(self, module: HloModule, expand: set[str], expand_all: bool, title: str | None):
        self.module = module
        self.expand = expand
        self.expand_all = expand_all
        self.graph = Graph(title=title or f"HloModule {module.name}")
        self.ids: dict[tuple[str, str], str] = {}
        self.placed: set[str] = set()  # computations already drawn
        self.collapsed = 0
        self.too_deep = 0  # calls whose callee was nested too deep to draw

    def build(self) -> Graph:
        duplicates = {n for n, c in Counter(i.name for i in self.module.instructions()).items() if c > 1}
        for instruction in self.module.instructions():
            key = (instruction.computation, instruction.name)
            self.ids[key] = (
                f"{instruction.computation}/{instruction.name}" if instruction.name in duplicates else instruction.name
            )
        entry = self.module.entry
        self._draw_computation(entry, parent=None, label=f"ENTRY %{entry.name}", depth=0)
        self.graph.suggested_center = self.ids.get((entry.name, entry.root))
        if self.collapsed:
            self.graph.notes.append(
                f"{self.collapsed} fusions drawn as one node each (--expand NAME or --expand-fusions opens them)"
            )
        if self.too_deep:
            self.graph.notes.append(
                f"computations nested more than {MAX_NESTING} calls deep are not drawn ({self.too_deep} calls name theirs); "
                "--around NAME draws a part"
            )
        return self.graph

    def _draw_computation(self, computation: HloComputation, parent: str | None, label: str, depth: int) -> None:
        self.placed.add(computation.name)
        cluster_id = computation.name
        fill = "#fff7ec" if computation.is_fusion else ("#f7f7f7" if parent is None else "#f1ecf8")
        self.graph.clusters[cluster_id] = Cluster(cluster_id, label, parent=parent, fill=fill, tooltip=label)
        local = {i.name: i for i in computation.instructions}
        for instruction in computation.instructions:
            self._draw_instruction(instruction, computation, cluster_id, depth)
        for instruction in computation.instructions:
            node_id = self.ids[(computation.name, instruction.name)]
            for position, operand in enumerate(instruction.operands):
                if operand in local:
                    shape = _short_shape(local[operand].shape)
                    text = f"{position}: {shape}" if len(instruction.operands) > 1 else shape
                    self.graph.edges.append(Edge(self.ids[(computation.name, operand)], node_id, text))
            for predecessor in _control_predecessors(instruction):
                if predecessor in local:
                    self.graph.edges.append(Edge(self.ids[(computation.name, predecessor)], node_id, kind="control"))

    def _draw_instruction(self, instruction: HloInstruction, computation: HloComputation, cluster_id: str, depth: int) -> None:
        node_id = self.ids[(computation.name, instruction.name)]
        opened = instruction.opcode == "fusion" and (self.expand_all or instruction.name in self.expand)
        collapsed = instruction.opcode == "fusion" and not opened
        label = self._label(instruction, opened)
        callees = [] if collapsed else self._drawn_callees(instruction)
        if callees and depth >= MAX_NESTING:  # named, not drawn: the stack (and dot's) stay bounded
            self.too_deep += 1
            label += "\ncalls " + ", ".join(f"%{c.name}" for _key, c in callees[:3]) + " (not drawn: nested too deep)"
            callees = []
        self.graph.add_node(
            Node(
                node_id,
                label,
                tooltip=_tooltip(instruction),
                fill=opcode_fill(instruction.opcode),
                cluster=cluster_id,
                bold=instruction.is_root,
            )
        )
        if collapsed:
            self.collapsed += 1
        for key, callee in callees:
            if callee.name not in self.placed:
                self._draw_computation(
                    callee, parent=cluster_id, label=f"%{callee.name} ({key} of {instruction.name})", depth=depth + 1
                )
            root_id = self.ids.get((callee.name, callee.root))
            if root_id:
                self.graph.edges.append(Edge(node_id, root_id, key, kind="call", lhead=callee.name))

    def _drawn_callees(self, instruction: HloInstruction) -> list[tuple[str, HloComputation]]:
        """(attribute, computation) of each computation ``instruction`` calls that is drawn as a cluster."""
        keys = DRAWN_CALL_KEYS + (("to_apply",) if instruction.opcode == "call" else ())
        return [
            (key, self.module.computations[name])
            for key in keys
            if key in instruction.attributes
            for name in _names(instruction.attributes[key])
            if name in self.module.computations
        ]

    def _label(self, instruction: HloInstruction, opened: bool) -> str:
        head = instruction.opcode
        attributes = instruction.attributes
        if instruction.opcode == "parameter" and instruction.parameter_number is not None:
            head = f"parameter {instruction.parameter_number}"
        elif instruction.opcode == "fusion":
            head = f"fusion {attributes.get('kind', '').lstrip('k')}".rstrip()
        elif instruction.opcode == "custom-call" and "custom_call_target" in attributes:
            head = f"custom-call {attributes['custom_call_target'].strip(chr(34))}"
        elif instruction.opcode == "get-tuple-element" and "index" in attributes:
            head = f"get-tuple-element {attributes['index']}"
        elif instruction.opcode == "compare" and "direction" in attributes:
            head = f"compare {attributes['direction']}"
        lines = [head]
        if instruction.name != instruction.opcode:
            lines.append(instruction.name)
        reducer = attributes.get("to_apply")
        if reducer and instruction.opcode != "call":
            lines.append(f"to_apply {self._summary_of(_names(reducer))}")
        if instruction.opcode == "fusion" and not opened:
            lines.append(self._summary_of(instruction.called_computations))
        if instruction.opcode == "constant" and instruction.literal is not None and len(instruction.literal) <= 24:
            lines.append(instruction.literal)
        if instruction.opcode in ("parameter", "constant", "iota") or instruction.is_root or not instruction.operands:
            lines.append(_short_shape(instruction.shape))
        return "\n".join(lines)

    def _summary_of(self, computation_names: list[str]) -> str:
        """'add' for a reducer, '7 ops: multiply, add, broadcast' for a fused computation."""
        for name in computation_names:
            computation = self.module.computations.get(name)
            if computation is None:
                continue
            ops = [i.opcode for i in computation.instructions if i.opcode != "parameter"]
            if len(ops) == 1:
                return ops[0]
            distinct = list(dict.fromkeys(ops))
            listed = ", ".join(distinct[:4]) + (", ..." if len(distinct) > 4 else "")
            return f"{len(ops)} ops: {listed}"
        return ", ".join(computation_names)


def _names(value: str) -> list[str]:
    """``%a`` or ``{%a, %b}`` -> ['a', 'b']."""
    return [p.strip().lstrip("%") for p in value.strip("{} ").split(",") if p.strip()]


def _control_predecessors(instruction: HloInstruction) -> list[str]:
    value = instruction.attributes.get("control-predecessors")
    return _names(value) if value else []


def _short_shape(shape: str) -> str:
    text = strip_layouts(shape)
    return text if len(text) <= _EDGE_LABEL_MAX else text[: _EDGE_LABEL_MAX - 1] + "…"


def _tooltip(instruction: HloInstruction) -> str:
    lines = [f"%{instruction.name} = {strip_layouts(instruction.shape)} {instruction.opcode}"]
    if instruction.op_name:
        lines.append(f"op_name: {instruction.op_name}")
    if instruction.op_type:
        lines.append(f"op_type: {instruction.op_type}")
    if instruction.source_file:
        where = f"{instruction.source_file}:{instruction.source_line}" if instruction.source_line else instruction.source_file
        lines.append(f"source: {where}")
    return "\n".join(lines)
