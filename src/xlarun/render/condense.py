"""Condensing an overview still too big to lay out in seconds (an entry computation of thousands of operations that
are not plumbing: a long unrolled chain, a wide fan-out), so that any module renders in seconds.

Three steps, each only while the graph is over its node budget:

1. **alike siblings**: operations of one opcode reading the same values and read by the same ones (a fan-out) are one
   node ("4,999 x negate");
2. **chains**: a run of operations where each feeds only the next, and the next reads nothing else but values that
   come from nowhere (parameters), is cut into segments as long as it takes to fit, each one node ("chain of 12 ops");
3. **bands**: what is left is grouped by opcode within bands of its depth in the graph (distance from the inputs),
   as few bands as it takes to fit the budget.

Edges between merged nodes are kept once. Chains and siblings keep the name of their first instruction as their id, so
``--around`` still finds them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from xlarun.render.graph import Edge, Graph, Node

MIXED_FILL = "#eeeeee"


def condense(graph: Graph, kinds: dict[str, str], max_nodes: int) -> Graph:
    """``graph`` (an overview: no clusters, nodes in def-before-use order) with at most ``max_nodes`` nodes, merging
    as little as it takes. ``kinds`` maps a node id to its opcode (nodes not in it are never merged by step 1 or 2)."""
    if len(graph.nodes) <= max_nodes:
        return graph
    before = len(graph.nodes)
    said: list[str] = []
    groups = _siblings(graph, kinds)
    if any(len(g) > 1 for g in groups):
        said.append(f"{sum(1 for g in groups if len(g) > 1)} groups of alike ops side by side drawn as one node each")
        graph = _merge(graph, groups, kinds, lambda g: f"{len(g)} x {kinds.get(g[0], '?')}")
    if len(graph.nodes) > max_nodes:
        chains = _chains(graph, kinds)
        length = _segment_length(chains, max_nodes)
        groups = [chain[i : i + length] for chain in chains for i in range(0, len(chain), length)]
        if any(len(g) > 1 for g in groups):
            said.append(f"chains of ops cut into segments of up to {length}, one node each")
            graph = _merge(graph, groups, kinds, lambda g: f"chain of {len(g)} ops")
    if len(graph.nodes) > max_nodes:
        groups, bands = _bands(graph, kinds, max_nodes)
        graph = _merge(graph, groups, kinds, lambda g: f"{len(g)} ops", band_ids=True)
        said.append(f"the rest grouped by opcode in {bands} bands of depth")
    graph.notes.append(
        f"condensed to {len(graph.nodes)} nodes from {before} ({'; '.join(said)}) to lay out in seconds; "
        "--around NAME draws any part in full"
    )
    return graph


def _adjacency(graph: Graph) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    preds: dict[str, list[str]] = {n: [] for n in graph.nodes}
    succs: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for edge in graph.edges:
        if edge.src in preds and edge.dst in preds and edge.src != edge.dst:
            succs[edge.src].append(edge.dst)
            preds[edge.dst].append(edge.src)
    return preds, succs


def _chains(graph: Graph, kinds: dict[str, str]) -> list[list[str]]:
    """Every node in one list: the runs that can be merged, in order, and every other node alone."""
    preds, succs = _adjacency(graph)
    sources = {n for n, p in preds.items() if not p}
    only_inner: dict[str, str | None] = {}  # node -> its one predecessor that is not a source, if it has exactly one
    for node, before in preds.items():
        inner = {p for p in before if p not in sources}
        only_inner[node] = inner.pop() if len(inner) == 1 else None

    def mergeable(node: str) -> bool:
        return node in kinds and not graph.nodes[node].bold and node not in sources

    def follows(node: str) -> str | None:
        """The node that continues ``node``'s chain, if any."""
        after = set(succs[node])
        if len(after) != 1 or not mergeable(node):
            return None
        (nxt,) = after
        return nxt if mergeable(nxt) and only_inner[nxt] == node else None

    continues = {nxt for n in graph.nodes if (nxt := follows(n)) is not None}
    groups, placed = [], set()
    for node in graph.nodes:
        if node in placed or node in continues:
            continue
        group = [node]
        while (nxt := follows(group[-1])) is not None and nxt not in placed:
            group.append(nxt)
        placed.update(group)
        groups.append(group)
    groups.extend([n] for n in graph.nodes if n not in placed)  # only on a cycle, which a module does not have
    return groups


def _segment_length(chains: list[list[str]], max_nodes: int) -> int:
    """The shortest segment length that cuts ``chains`` into at most ``max_nodes`` pieces (the longest chain's length
    when none does)."""
    longest = max((len(c) for c in chains), default=1)
    low, high = 1, longest
    while low < high:
        middle = (low + high) // 2
        if sum(-(-len(c) // middle) for c in chains) <= max_nodes:
            high = middle
        else:
            low = middle + 1
    return low


def _siblings(graph: Graph, kinds: dict[str, str]) -> list[list[str]]:
    preds, succs = _adjacency(graph)
    alike: dict[tuple, list[str]] = {}
    groups: list[list[str]] = []
    for node in graph.nodes:
        if node not in kinds or graph.nodes[node].bold:
            groups.append([node])
            continue
        key = (kinds[node], frozenset(preds[node]), frozenset(succs[node]))
        if key not in alike:
            alike[key] = []
            groups.append(alike[key])
        alike[key].append(node)
    return groups


def _bands(graph: Graph, kinds: dict[str, str], max_nodes: int) -> tuple[list[list[str]], int]:
    preds, _succs = _adjacency(graph)
    level: dict[str, int] = {}
    for node in graph.nodes:  # def-before-use order: every predecessor has its level already
        level[node] = 1 + max((level.get(p, 0) for p in preds[node]), default=-1)
    deepest = max(level.values(), default=0) + 1
    kind_of = {n: kinds.get(n, n) for n in graph.nodes}
    bands = min(deepest, max_nodes)
    while bands > 1 and len({(level[n] * bands // deepest, kind_of[n]) for n in graph.nodes}) > max_nodes:
        bands = max(1, bands * 2 // 3)
    key_of = {n: (level[n] * bands // deepest, kind_of[n]) for n in graph.nodes}
    if len(set(key_of.values())) > max_nodes:  # more opcodes than the budget: bands alone
        key_of = {n: (level[n] * max_nodes // deepest, "") for n in graph.nodes}
    grouped: dict[tuple, list[str]] = {}
    for node in graph.nodes:
        grouped.setdefault(key_of[node], []).append(node)
    return list(grouped.values()), bands


def _merge(graph: Graph, groups: list[list[str]], kinds: dict[str, str], head: Any, band_ids: bool = False) -> Graph:
    """A graph with one node per group (groups of one keep their node as it is) and the edges between groups."""
    out = Graph(
        title=graph.title,
        notes=list(graph.notes),
        suggested_center=graph.suggested_center,
        attributes=dict(graph.attributes),
        overview=graph.overview,
    )
    group_of: dict[str, str] = {}
    for index, group in enumerate(groups):
        if len(group) == 1:
            node = graph.nodes[group[0]]
            out.add_node(node)
            group_of[group[0]] = node.id
            continue
        gid = f"group.{index}" if band_ids else group[0]
        members = [graph.nodes[n] for n in group]
        opcodes = Counter(kinds.get(n, "?") for n in group)
        mix = ", ".join(f"{op} x{count}" for op, count in opcodes.most_common(3)) + (", ..." if len(opcodes) > 3 else "")
        label = f"{head(group)}\n{group[0]} ... {group[-1]}\n{mix}"
        fills = {m.fill for m in members}
        tooltip = "\n".join(m.tooltip for m in members[:3] if m.tooltip)
        merged = Node(gid, label, tooltip=tooltip, fill=fills.pop() if len(fills) == 1 else MIXED_FILL)
        merged.bold = any(m.bold for m in members)
        out.add_node(merged)
        kinds[gid] = kinds.get(group[0], "?") if len(opcodes) == 1 else "mixed"
        for n in group:
            group_of[n] = gid
    if out.suggested_center is not None:
        out.suggested_center = group_of.get(out.suggested_center)
    seen: set[tuple[str, str]] = set()
    for edge in graph.edges:
        pair = (group_of.get(edge.src, edge.src), group_of.get(edge.dst, edge.dst))
        if pair[0] != pair[1] and pair not in seen:
            seen.add(pair)
            out.edges.append(Edge(pair[0], pair[1], edge.label, edge.kind))
    return out
