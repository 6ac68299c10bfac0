"""The overview of a module too big to lay out whole: what it computes, in a graph dot draws in seconds.

Only the entry computation is drawn, without clusters (nested clusters are what makes dot slow); a while loop, call
or conditional is one node saying how big the computations it runs are; fusions are one node each, as always; the
plumbing between operations (get-tuple-element, tuple, bitcast, reshape, copy, broadcast, convert, constants) is
folded into the edges, which keep the shapes that flow. With many parameters, they are one node. What the overview
leaves out is said in the graph's notes, with the ways to see it: ``--around NAME`` for a part, ``--full`` for every
node, ``xlarun view`` (Model Explorer) for huge graphs.
"""

from __future__ import annotations

from collections import deque

from xlarun.hlo import HloInstruction, HloModule, strip_layouts
from xlarun.render.condense import condense
from xlarun.render.graph import Edge, Graph, Node
from xlarun.render.hlo_graph import opcode_fill

#: Instructions that move or re-label data without computing: folded into the edges of the overview.
PLUMBING = frozenset(
    {
        "get-tuple-element",
        "tuple",
        "bitcast",
        "reshape",
        "copy",
        "broadcast",
        "convert",
        "constant",
        "opt-barrier",
        "bitcast-convert",
    }
)
#: Above this many nodes a module is drawn as its overview by default: dot's layout of a full drawing (computations as
#: nested clusters) grows much faster than its node count (a 784-node drawing with 21 clusters took more than 48 s of CPU).
OVERVIEW_ABOVE = 500
#: The most nodes an overview has: a bigger one is condensed (render/condense.py) so that dot lays it out in seconds.
OVERVIEW_MAX_NODES = 600
#: An input read by more nodes than this has its edges left out of the overview (see without_wide_inputs).
MAX_INPUT_EDGES = 12
#: Above this many parameters, the overview draws them as one node.
MAX_PARAMETER_NODES = 24
#: dot's effort on the overview: fewer crossing-minimisation and network-simplex iterations (the layout is a little
#: less tidy, and minutes become seconds on thousands of nodes).
FAST_LAYOUT = {"mclimit": "0.3", "nslimit": "2", "nslimit1": "2", "splines": "polyline"}


def hlo_overview(module: HloModule, title: str | None = None, max_nodes: int | None = None) -> Graph:
    """The entry computation of ``module`` with its plumbing folded away (see the module docstring); over
    ``max_nodes`` nodes, condensed to fit (render/condense.py)."""
    entry = module.entry
    graph = Graph(title=f"{title or 'HloModule ' + module.name} (overview)", attributes=dict(FAST_LAYOUT), overview=True)
    by_name = {i.name: i for i in entry.instructions}
    parameters = [i for i in entry.instructions if i.opcode == "parameter"]
    merged_parameters = len(parameters) > MAX_PARAMETER_NODES
    kept = [i for i in entry.instructions if i.opcode not in PLUMBING and not (merged_parameters and i.opcode == "parameter")]
    if merged_parameters:
        graph.add_node(Node("parameters", f"{len(parameters)} parameters", fill=opcode_fill("parameter")))
    for instruction in kept:
        graph.add_node(
            Node(
                instruction.name,
                _label(module, instruction),
                tooltip=_tooltip(instruction),
                fill=opcode_fill(instruction.opcode),
                bold=instruction.is_root,
            )
        )
    drawn = set(graph.nodes)
    sources, folded = _drawn_sources(entry.instructions, by_name, drawn, merged_parameters)
    # what each node stands for besides itself: the plumbing folded into its incoming edges
    graph.members = {name: sorted(folded[name]) for name in drawn if folded.get(name)}
    seen: set[tuple[str, str]] = set()
    for instruction in kept:
        for source in sources.get(instruction.name, ()):
            if (source, instruction.name) not in seen:
                seen.add((source, instruction.name))
                graph.edges.append(Edge(source, instruction.name))
    root = entry.root
    if root and root not in drawn:  # the result is plumbing (a tuple of outputs): one node for it
        graph.add_node(Node("result", f"result\n{_short(by_name[root].shape)}", fill=opcode_fill("tuple"), bold=True))
        graph.members["result"] = sorted(folded[root] | {root})
        for source in sources.get(root, ()):
            graph.edges.append(Edge(source, "result"))
    total = module.instruction_count()
    folded_count = len(entry.instructions) - len(kept) - (1 if merged_parameters else 0)
    graph.notes.append(
        f"overview: {len(graph.nodes)} nodes for {total} instructions in {len(module.computations)} computations "
        f"({folded_count} plumbing instructions of the entry folded into edges; called computations drawn as one node each); "
        "--around NAME draws a part in full, --full every node (slow), `xlarun view` opens it in Model Explorer"
    )
    graph.suggested_center = root if root in drawn else None
    if max_nodes and len(graph.nodes) > max_nodes:
        graph = condense(graph, {i.name: i.opcode for i in kept}, max_nodes)
    return without_wide_inputs(graph)


def without_wide_inputs(graph: Graph) -> Graph:
    """Edges from an input (a node nothing flows into: a parameter, an iota) read by more than
    :data:`MAX_INPUT_EDGES` nodes are not drawn; the input and each reader say so in their labels. Such edges reach
    down every rank of the drawing (a weight read at each step of a chain), and dot routes each through every rank it
    crosses: minutes on a graph it otherwise lays out in seconds."""
    has_input = {e.dst for e in graph.edges}
    readers: dict[str, list[str]] = {}
    for edge in graph.edges:
        if edge.src not in has_input:
            readers.setdefault(edge.src, []).append(edge.dst)
    wide = {source for source, dsts in readers.items() if len(dsts) > MAX_INPUT_EDGES}
    if not wide:
        return graph
    reads: dict[str, list[str]] = {}
    for source in sorted(wide):
        node = graph.nodes[source]
        node.label += f"\nread by {len(readers[source])} nodes (edges not drawn)"
        for reader in readers[source]:
            reads.setdefault(reader, []).append(source)
    for reader, sources in reads.items():
        more = f" +{len(sources) - 2}" if len(sources) > 2 else ""
        graph.nodes[reader].label += "\nreads " + ", ".join(sources[:2]) + more
    graph.edges = [e for e in graph.edges if e.src not in wide]
    graph.notes.append(
        f"edges from {len(wide)} inputs read by more than {MAX_INPUT_EDGES} nodes each are not drawn: "
        "each reader names them ('reads ...')"
    )
    return graph


def _drawn_sources(
    instructions: list[HloInstruction], by_name: dict[str, HloInstruction], drawn: set[str], merged_parameters: bool
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """For each instruction, the drawn instructions whose values reach it through plumbing only, and the plumbing
    folded on the way (file order is def-before-use, so one pass suffices; an explicit walk keeps chains of any depth
    off the stack)."""
    reach: dict[str, set[str]] = {}
    folded: dict[str, set[str]] = {}
    for instruction in instructions:
        found: set[str] = set()
        passed: set[str] = set()
        pending = deque(instruction.operands)
        while pending:
            name = pending.popleft()
            operand = by_name.get(name)
            if operand is None:
                continue
            if name in drawn:
                found.add(name)
            elif operand.opcode == "parameter" and merged_parameters:
                found.add("parameters")
            elif name in reach:
                found |= reach[name]
                passed |= folded[name] | {name}
            else:
                passed.add(name)
                pending.extend(operand.operands)
        reach[instruction.name] = found
        folded[instruction.name] = passed
    return reach, folded


def _tooltip(instruction: HloInstruction) -> str:
    head = f"%{instruction.name} = {strip_layouts(instruction.shape)} {instruction.opcode}"
    return f"{head}\nop_name: {instruction.op_name}" if instruction.op_name else head


def _label(module: HloModule, instruction: HloInstruction) -> str:
    head = instruction.opcode
    called = [module.computations[c] for c in instruction.called_computations if c in module.computations]
    if called and instruction.opcode != "fusion":
        size = sum(_reachable_size(module, c.name) for c in called)
        head = f"{instruction.opcode}: {len(called)} computation(s), {size} instructions"
    elif instruction.opcode == "fusion":
        head = f"fusion {instruction.attributes.get('kind', '')}".rstrip()
    return f"{head}\n{instruction.name}\n{_short(instruction.shape)}"


def _reachable_size(module: HloModule, name: str) -> int:
    """Instructions in a computation and everything it calls (each computation counted once)."""
    seen, stack, total = set(), [name], 0
    while stack:
        current = stack.pop()
        if current in seen or current not in module.computations:
            continue
        seen.add(current)
        computation = module.computations[current]
        total += len(computation.instructions)
        stack.extend(c for i in computation.instructions for c in i.called_computations)
    return total


def _short(shape: str, limit: int = 60) -> str:
    return shape if len(shape) <= limit else shape[: limit - 1] + "…"
