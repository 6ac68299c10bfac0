"""A drawn HLO module coloured by the error of its values, as a bisection's instruction search measured it.

Each node is filled by how far its value moved from its counterpart before the culprit step (identical, moved a
little, near the tolerance, past it); a node standing for several instructions (the overview folds plumbing into
its consumers) takes its worst member's colour. The worst values get a thick dark border and their rank in the
label, the first value to move and the first past the tolerance are named in theirs, and every node's tooltip
gives its numbers. Nodes whose value was not compared (new in the step, a parameter or constant, inside a called
computation) stay grey.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xlarun.hlo import HloModule
from xlarun.render.graph import DEFAULT_NODE_LIMIT, Graph, Node
from xlarun.render.hlo_graph import hlo_graph
from xlarun.render.overview import hlo_overview

#: (fill, short name, meaning) from no error to past the tolerance; a level is an index into this.
LEVELS = (
    ("#ffffff", "identical", "identical to the value before the step"),
    ("#fee8c8", "moved slightly", "moved, by under a tenth of the tolerance"),
    ("#fdbb84", "moved within", "moved, within the tolerance"),
    ("#e34a33", "past", "past the tolerance"),
)
REWRITTEN = (
    "#e5dcf2",
    "rewritten",
    "differs only because the pass changed what its name computes: what reads it is identical",
)
NOT_COMPARED = ("#eeeeee", "not compared (new in the step, a parameter or constant, or inside a called computation)")
WORST_BORDER = "#67000d"
FIRST_BORDER = "#2166ac"
#: How many of the worst values are marked.
WORST_MARKED = 5


@dataclass
class ValueErrors:
    """The errors of one module's values: instruction name -> (max abs error, max rel error), and what to mark."""

    errors: dict[str, tuple[float, float]]
    abs_tolerance: float
    rel_tolerance: float
    #: The values past the tolerance (per element, which the two maxima alone cannot tell).
    past: set[str] = field(default_factory=set)
    first_moved: str | None = None
    first_past: str | None = None
    #: Values that differ while what reads them does not (the pass changed what the name computes).
    rewritten: set[str] = field(default_factory=set)

    def severity(self, name: str) -> float:
        """How far past the tolerance a value is (1.0: at it); 0 when identical, -1 when not compared."""
        if name not in self.errors:
            return -1.0
        abs_error, rel_error = self.errors[name]
        if not abs_error and not rel_error:
            return 0.0
        # an element matches when within either bound: the smaller ratio is the one that counts
        return min(_ratio(abs_error, self.abs_tolerance), _ratio(rel_error, self.rel_tolerance))

    def level(self, name: str) -> int | None:
        """Index into :data:`LEVELS`, or None when the value was not compared."""
        severity = self.severity(name)
        if severity < 0:
            return None
        if name in self.past:
            return 3
        if severity == 0:
            return 0
        return 1 if severity < 0.1 else 2

    def look(self, name: str) -> tuple[str, str, str]:
        """(fill, short name, meaning) of a compared value: its level's, or :data:`REWRITTEN`."""
        level = self.level(name)
        if name in self.rewritten:
            return REWRITTEN
        return LEVELS[level] if level is not None else (NOT_COMPARED[0], "not compared", NOT_COMPARED[1])

    def rank(self, name: str) -> tuple[bool, bool, float]:
        """Orders values from the least to the most wrong: rewritten ones first, those past the tolerance last, then
        by severity."""
        return name not in self.rewritten, name in self.past, self.severity(name)

    def worst(self, count: int = WORST_MARKED) -> list[str]:
        """The ``count`` values furthest past the tolerance (those past it first), of those that moved at all and
        were not rewritten."""
        moved = [n for n in self.errors if self.severity(n) > 0 and n not in self.rewritten]
        return sorted(moved, key=self.rank, reverse=True)[:count]


def error_graph(module: HloModule, values: ValueErrors, title: str, limit: int = DEFAULT_NODE_LIMIT) -> Graph:
    """``module`` drawn (its overview above ``limit`` nodes) and coloured by ``values``; its suggested centre is the
    node of the first value to move (else the first past the tolerance, else the worst)."""
    graph = hlo_graph(module, title=title)
    if len(graph.nodes) > limit:
        graph = hlo_overview(module, title=title)
    colour_by_error(graph, values, module.entry.name)
    worst = values.worst(1)
    for focus in (values.first_moved, values.first_past, *worst):
        node = node_standing_for(graph, focus, module.entry.name) if focus else None
        if node is not None:
            graph.suggested_center = node.id
            break
    return graph


def colour_by_error(graph: Graph, values: ValueErrors, entry: str) -> None:
    """Fill, mark and annotate ``graph``'s nodes (drawn from a module whose entry computation is ``entry``) in place.

    A node is filled by its own value's error; one with no value of its own compared (the overview's result, a node
    new in the step) by the worst of the instructions folded into it. Marks (first to move, first past the tolerance,
    the worst) follow an instruction into the node it is folded into, and say so.
    """
    ranks = {name: rank for rank, name in enumerate(values.worst(), 1)}
    for node in graph.nodes.values():
        own = _instruction_of(node.id, entry)
        folded = [n for n in graph.members.get(node.id, ()) if n in values.errors and n != own]
        shown = own if own in values.errors else max(folded, key=values.rank, default=None)
        if shown is None:
            node.fill = NOT_COMPARED[0]
            node.tooltip = f"{node.tooltip or node.label}\nnot compared".strip()
            continue
        node.fill = values.look(shown)[0]
        lines = [node.tooltip or node.label, *_numbers(values, shown, "" if shown == own else f" (of %{shown}, folded in)")]
        worst_folded = max(folded, key=values.rank, default=None)
        if worst_folded and worst_folded != shown and values.severity(worst_folded) > 0:
            lines += _numbers(values, worst_folded, f" of %{worst_folded}, folded into this node's inputs")
        node.tooltip = "\n".join(lines)
        _mark(node, own, [own, *folded], values, ranks)
    graph.notes.extend(legend_lines(values))


def _mark(node: Node, own: str, names: list[str], values: ValueErrors, ranks: dict[str, int]) -> None:
    def which(name: str) -> str:
        return "" if name == own else f" (%{name}, folded in)"

    ranked = sorted((n for n in names if n in ranks), key=ranks.__getitem__)
    marks = [f"worst {ranks[ranked[0]]}: {_short(values.errors[ranked[0]][0])} abs{which(ranked[0])}"] if ranked else []
    marks += [
        f"{what}{which(name)}"
        for what, name in (("first to move", values.first_moved), ("first past the tolerance", values.first_past))
        if name in names
    ]
    if not marks:
        return
    node.label = f"{', '.join(marks)}\n{node.label}"
    node.penwidth = 3.5
    # the first to move is what the search answers: its border says so even when it is among the worst
    first = values.first_moved in names or (values.first_past in names and not ranked)
    node.border = FIRST_BORDER if first else WORST_BORDER


def legend(values: ValueErrors) -> list[tuple[str, str, str]]:
    """("fill" or "border", colour, meaning) of each fill and border the colouring uses, for a legend beside the graph."""
    tolerance = f"abs {values.abs_tolerance:g} or rel {values.rel_tolerance:g}"
    fills = [
        ("fill", colour, meaning.replace("the tolerance", f"the tolerance ({tolerance})", 1)) for colour, _n, meaning in LEVELS
    ]
    return [
        *fills,
        ("fill", REWRITTEN[0], REWRITTEN[2]),
        ("fill", *NOT_COMPARED),
        ("border", FIRST_BORDER, "the first value to move (and the first past the tolerance, when not among the worst)"),
        ("border", WORST_BORDER, f"the {WORST_MARKED} worst values, ranked in their label"),
    ]


def legend_lines(values: ValueErrors) -> list[str]:
    """The legend as notes under the graph's title (for the SVG on its own)."""
    counts = dict.fromkeys([short for _c, short, _m in (*LEVELS, REWRITTEN)], 0)
    for name in values.errors:
        short = values.look(name)[1]
        counts[short] = counts.get(short, 0) + 1
    parts = ", ".join(f"{count} {short}" for short, count in counts.items())
    return [
        f"coloured by error against the step before: white identical, orange moved within the tolerance (abs "
        f"{values.abs_tolerance:g} or rel {values.rel_tolerance:g}), red past it, lilac rewritten, grey not compared",
        f"values compared: {parts}; thick borders: the first to move (blue), the worst (dark red)",
    ]


def _numbers(values: ValueErrors, name: str, whose: str) -> list[str]:
    abs_error, rel_error = values.errors[name]
    return [f"max abs error {_short(abs_error)}, max rel error {_short(rel_error)}{whose}", values.look(name)[2]]


def _instruction_of(node_id: str, entry: str) -> str:
    """The instruction a node draws (a name repeated in several computations is drawn as 'computation/name')."""
    prefix = f"{entry}/"
    return node_id[len(prefix) :] if node_id.startswith(prefix) else node_id


def _ratio(error: float, bound: float) -> float:
    if bound > 0:
        return error / bound
    return math.inf if error else 0.0


def _short(value: float) -> str:
    return f"{value:.3g}"


def node_standing_for(graph: Graph, name: str, entry: str) -> Node | None:
    """The drawn node that is, or folds in, instruction ``name`` of the entry computation."""
    for node in graph.nodes.values():
        if _instruction_of(node.id, entry) == name or name in graph.members.get(node.id, ()):
            return node
    return None
