"""The drawing model every renderer builds (nodes, edges, nested clusters) and its DOT text.

HLO modules and TF GraphDefs are turned into a :class:`Graph` first; the node limit, the
neighbourhood (``--around``) and the DOT writer work on that model, so they are written once.
"""

from __future__ import annotations

import re
import zlib
from collections import deque
from dataclasses import dataclass, field, replace

import graphviz

from xlarun.declared_options import RENDER_OPTIONS, default_of
from xlarun.errors import InputError

#: Above this many nodes a whole graph is not laid out (dot takes minutes or hangs); --around draws a part.
DEFAULT_NODE_LIMIT: int = default_of(RENDER_OPTIONS, "limit")
#: Above this many nodes edge labels are xlabels, placed after the layout: as labels, dot lays each out as a node of its
#: own (a 278-node optimized training step with 704 labelled edges: more than 90 s of dot's CPU, 7 s with xlabels).
XLABEL_ABOVE = 200
#: Characters of one label or tooltip drawn (a 100,000-deep tuple shape would be one label dot cannot read).
MAX_LABEL_CHARS = 2000


@dataclass
class Node:
    """One box. ``label`` and ``tooltip`` are plain text (newlines break lines); the writer escapes them."""

    id: str
    label: str
    tooltip: str = ""
    fill: str = "#ffffff"
    shape: str = "box"
    cluster: str | None = None
    bold: bool = False  # a computation's root, or the centre of a neighbourhood
    dashed: bool = False  # a neighbourhood's edge: it has neighbours that are not drawn
    #: A border colour and width other than the default (a mark, e.g. the worst error).
    border: str | None = None
    penwidth: float | None = None


@dataclass
class Edge:
    src: str
    dst: str
    label: str = ""
    #: "data" (an operand), "control" (a control dependency) or "call" (an instruction -> the computation it calls).
    kind: str = "data"
    #: For "call" edges: the cluster the edge points at (drawn up to its border).
    lhead: str | None = None


@dataclass
class Cluster:
    id: str
    label: str
    parent: str | None = None
    fill: str = "#f7f7f7"
    tooltip: str = ""


@dataclass
class Graph:
    """A graph ready to be written as DOT. Node and cluster ids are unique."""

    title: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    #: Lines shown under the title (what was collapsed or left out).
    notes: list[str] = field(default_factory=list)
    #: Where a neighbourhood would start when this graph is too big to draw whole.
    suggested_center: str | None = None
    #: Graph attributes for dot beyond the defaults (the overview asks for a faster layout).
    attributes: dict[str, str] = field(default_factory=dict)
    #: Node id -> the instructions it stands for besides its own (the overview folds plumbing into its consumers).
    members: dict[str, list[str]] = field(default_factory=dict)
    #: Whether this is a big module's overview (called computations one node each, plumbing folded), not every node.
    overview: bool = False

    def add_node(self, node: Node) -> Node:
        self.nodes[node.id] = node
        return node

    def neighbours(self) -> dict[str, set[str]]:
        """Node id -> ids it shares an edge with, in either direction."""
        adjacent: dict[str, set[str]] = {n: set() for n in self.nodes}
        for edge in self.edges:
            if edge.src in adjacent and edge.dst in adjacent and edge.src != edge.dst:
                adjacent[edge.src].add(edge.dst)
                adjacent[edge.dst].add(edge.src)
        return adjacent


class GraphTooBig(InputError):
    """The graph has more nodes than the limit: laying it out would take minutes, or forever."""


def check_node_limit(graph: Graph, limit: int | None, what: str, neighbourhood_of: str | None = None) -> None:
    """Raise :class:`GraphTooBig` when ``graph`` has more than ``limit`` nodes (``None`` or 0: no limit)."""
    if not limit or len(graph.nodes) <= limit:
        return
    if neighbourhood_of:
        hint = "draw fewer edges around it with a smaller --depth, or raise --limit"
    else:
        hint = f"draw a neighbourhood with --around {graph.suggested_center or next(iter(graph.nodes), 'NAME')} --depth 3, or raise --limit"
    raise GraphTooBig(
        f"{what} has {len(graph.nodes)} nodes, more than the limit of {limit}: graphviz would take minutes or hang", hint
    )


def neighbourhood(graph: Graph, center: str, depth: int) -> Graph:
    """The part of ``graph`` within ``depth`` edges of ``center`` (edges followed both ways).

    The centre is drawn bold; nodes with neighbours left out are dashed. Clusters left empty are dropped.
    """
    adjacent = graph.neighbours()
    distance = {center: 0}
    queue = deque([center])
    while queue:
        current = queue.popleft()
        if distance[current] >= depth:
            continue
        for other in sorted(adjacent[current]):
            if other not in distance:
                distance[other] = distance[current] + 1
                queue.append(other)
    part = Graph(title=f"{graph.title}, {depth} around {center}", notes=list(graph.notes))
    for node_id in graph.nodes:
        if node_id in distance:
            node = graph.nodes[node_id]
            hidden = len(adjacent[node_id] - distance.keys())
            part.add_node(replace(node, tooltip=_with_hidden(node.tooltip, hidden), bold=node.id == center, dashed=hidden > 0))
            if node_id in graph.members:
                part.members[node_id] = graph.members[node_id]
    part.edges = [e for e in graph.edges if e.src in distance and e.dst in distance]
    used = {n.cluster for n in part.nodes.values() if n.cluster}
    for cluster_id in list(used):  # keep the parents of clusters that hold drawn nodes
        parent = graph.clusters[cluster_id].parent
        while parent and parent not in used:
            used.add(parent)
            parent = graph.clusters[parent].parent
    part.clusters = {k: c for k, c in graph.clusters.items() if k in used}
    for edge in part.edges:
        if edge.lhead and edge.lhead not in part.clusters:
            edge.lhead = None
    left_out = len(graph.nodes) - len(part.nodes)
    part.notes.append(
        f"{len(part.nodes)} of {len(graph.nodes)} nodes: those within {depth} edges of {center}; dashed ones have more neighbours"
    )
    if left_out == 0:
        part.notes[-1] = f"all {len(graph.nodes)} nodes are within {depth} edges of {center}"
    return part


def _with_hidden(tooltip: str, hidden: int) -> str:
    if not hidden:
        return tooltip
    return f"{tooltip}\n({hidden} more neighbours not drawn)".strip()


# --- DOT ------------------------------------------------------------------------------------------

_EDGE_STYLE = {"data": {}, "control": {"style": "dotted", "color": "#888888"}, "call": {"style": "dashed", "color": "#7b5ea7"}}


#: Characters dot cannot take in a quoted string (it reads C strings: a NUL ends one), shown as \\xNN instead.
_UNDRAWABLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _text(value: str) -> str:
    # escape() keeps backslashes and <...> literal: user text never becomes an HTML label or an escape
    return graphviz.escape(_UNDRAWABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", value))


def _label(value: str) -> str:
    """A label or tooltip cut to :data:`MAX_LABEL_CHARS`: dot refuses quoted strings past 16384 characters."""
    return _text(value if len(value) <= MAX_LABEL_CHARS else value[: MAX_LABEL_CHARS - 1] + "…")


def to_dot(graph: Graph) -> str:
    """The graph as DOT source (clusters nested, labels escaped)."""
    dot = graphviz.Digraph(name="G")
    title = "\n".join([graph.title, *graph.notes])
    dot.attr(rankdir="TB", compound="true", labelloc="t", fontsize="16", fontname="Helvetica", label=_label(title), tooltip=" ")
    if graph.attributes:
        dot.attr(**graph.attributes)
    dot.attr(
        "node", shape="box", style="filled,rounded", fontname="Helvetica", fontsize="11", color="#555555", margin="0.08,0.04"
    )
    dot.attr("edge", fontname="Helvetica", fontsize="9", color="#444444", arrowsize="0.7")
    children: dict[str | None, list[Cluster]] = {}
    for cluster in graph.clusters.values():
        children.setdefault(cluster.parent, []).append(cluster)
    members: dict[str | None, list[Node]] = {}
    for node in graph.nodes.values():
        members.setdefault(node.cluster if node.cluster in graph.clusters else None, []).append(node)

    def fill(container: graphviz.Digraph, cluster_id: str | None) -> None:
        for node in members.get(cluster_id, []):
            style = "filled,rounded" + (",dashed" if node.dashed else "") + (",bold" if node.bold else "")
            container.node(
                _text(node.id),
                label=_label(node.label),
                tooltip=_label(node.tooltip or node.label),
                fillcolor=node.fill,
                shape=node.shape,
                style=style,
                penwidth=f"{node.penwidth:g}" if node.penwidth else "2.5" if node.bold else "1",
                **({"color": node.border} if node.border else {}),
            )
        for cluster in children.get(cluster_id, []):
            with container.subgraph(name=f"cluster_{_dot_id(cluster.id)}") as sub:
                sub.attr(
                    label=_label(cluster.label),
                    style="filled,rounded",
                    fillcolor=cluster.fill,
                    color="#999999",
                    tooltip=_label(cluster.tooltip or cluster.label),
                    fontname="Helvetica",
                    fontsize="12",
                )
                fill(sub, cluster.id)

    fill(dot, None)
    label_key = "xlabel" if len(graph.nodes) > XLABEL_ABOVE else "label"
    for edge in graph.edges:
        attrs = dict(_EDGE_STYLE.get(edge.kind, {}))
        if edge.label:
            attrs[label_key] = _label(edge.label)
        if edge.lhead:
            attrs["lhead"] = f"cluster_{_dot_id(edge.lhead)}"
        dot.edge(_text(edge.src), _text(edge.dst), **attrs)
    return dot.source


def _dot_id(cluster_id: str) -> str:
    """A cluster id safe to append to ``cluster_`` (dot needs it as one name)."""
    return "".join(c if c.isalnum() or c in "_." else "_" for c in cluster_id) + f"_{zlib.crc32(cluster_id.encode()):08x}"
