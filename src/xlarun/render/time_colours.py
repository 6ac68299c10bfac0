"""A drawn HLO module coloured by measured time: a heat map of its profile.

Each node is filled by its share of the module's measured time (the ops' own times from the run's profile, every
execution added up): white for an op that took no measured time, then five shades from pale to dark orange. A node
standing for several instructions (a fusion drawn whole, the overview's folded plumbing) takes the time of all of
them. The ops that took most time carry their share in their label and a thick border; every node's tooltip gives
its time.
"""

from __future__ import annotations

from xlarun.render.graph import Graph

#: (lowest share of the module's time, fill) from the least to the most time.
HEAT = (
    (0.0, "#fff5eb"),
    (0.01, "#fdd0a2"),
    (0.05, "#fdae6b"),
    (0.20, "#f16913"),
    (0.50, "#e6550d"),
)
NOT_TIMED = "#ffffff"
#: How many of the ops that took most time are marked.
HOTTEST_MARKED = 5
HOT_BORDER = "#3f007d"


def colour_by_time(graph: Graph, times_ns: dict[str, float]) -> None:
    """Fill, mark and annotate ``graph``'s nodes in place from ``times_ns``: instruction name -> its own measured
    time (ns) in the module."""
    total = sum(times_ns.values())
    if total <= 0:
        graph.notes.append("coloured by measured time: the profile timed no op of this module")
        return
    shares: dict[str, float] = {}
    for node in graph.nodes.values():
        names = {instruction_of(node.id), *graph.members.get(node.id, ())}
        spent = sum(times_ns.get(name, 0.0) for name in names)
        if spent <= 0:
            node.fill = NOT_TIMED
            continue
        share = spent / total
        shares[node.id] = share
        node.fill = next(fill for floor, fill in reversed(HEAT) if share >= floor)
        node.tooltip = f"{node.tooltip or node.label}\nmeasured: {_human_ns(spent)}, {share:.1%} of the module's time".strip()
    hottest = sorted(shares, key=shares.__getitem__, reverse=True)[:HOTTEST_MARKED]
    for rank, node_id in enumerate(hottest, 1):
        node = graph.nodes[node_id]
        node.label = f"#{rank} by time: {shares[node_id]:.0%}\n{node.label}"
        node.border, node.penwidth = HOT_BORDER, 3.0
    drawn = sum(shares.values())
    graph.notes.append(
        f"coloured by measured time ({_human_ns(total)} in all): white none, pale to dark orange 0-1%, 1-5%, 5-20%, "
        f"20-50%, over 50% of the module's time; thick borders: the {len(hottest)} ops that took most"
        + (f"; {1 - drawn:.0%} of the time is in ops not drawn here" if drawn < 0.995 else "")
    )


def instruction_of(node_id: str) -> str:
    """The instruction a node draws (a name repeated in several computations is drawn as 'computation/name')."""
    return node_id.rsplit("/", 1)[-1]


def _human_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"
