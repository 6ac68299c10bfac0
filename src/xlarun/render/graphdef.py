"""A TensorFlow GraphDef (the ``TF_DUMP_GRAPH_PREFIX`` ``.pbtxt`` dumps) as a drawable graph.

Read with the tolerant :mod:`~xlarun.render.textproto` reader, so dumps that protobuf refuses still
draw. Nodes XLA auto-clustering assigned to a cluster (``_XlaCluster`` in
``mark_for_compilation_annotated.pbtxt``, ``_xla_compile_id`` after encapsulation) are grouped in
one box per cluster and coloured by it; an op that calls a ``cluster_N`` function is coloured as
its cluster too. Control inputs (``^name``) are dotted edges.
"""

from __future__ import annotations

from collections import Counter

from xlarun.render.graph import Cluster, Edge, Graph, Node
from xlarun.render.textproto import TextProto, parse_text_proto

#: Node attributes that name the XLA cluster a node belongs to.
CLUSTER_ATTRIBUTES = ("_XlaCluster", "_xla_compile_id")
#: One fill per cluster, in order of first appearance; unclustered nodes stay white.
CLUSTER_FILLS = ("#fbd5a6", "#9fc5f8", "#b6e3a8", "#f4b6b6", "#dccff0", "#fff2b3", "#b3e5e0", "#f8c8e8", "#d9d9a6", "#c9daf8")
UNCLUSTERED_FILL = "#ffffff"


def _attribute(node: TextProto, key: str) -> TextProto | None:
    for attr in node.messages("attr"):
        if attr.first("key") == key:
            value = attr.first("value")
            return value if isinstance(value, TextProto) else None
    return None


def cluster_of(node: TextProto) -> str | None:
    """The XLA cluster a GraphDef node was assigned to, or None."""
    for key in CLUSTER_ATTRIBUTES:
        value = _attribute(node, key)
        if value is not None:
            scalar = value.first("s") or value.first("i")
            if isinstance(scalar, str) and scalar:
                return scalar
    op = node.first("op", "")
    if isinstance(op, str) and op.startswith("cluster_"):  # the call of an encapsulated cluster function
        return op
    return None


def _dtype(node: TextProto) -> str | None:
    for key in ("T", "dtype"):
        value = _attribute(node, key)
        if value is not None and isinstance(value.first("type"), str):
            return value.first("type").removeprefix("DT_").lower()
    return None


def graphdef_graph(data: str | bytes, title: str = "GraphDef") -> Graph:
    """The drawable graph of a GraphDef in protobuf text format."""
    proto = parse_text_proto(data)
    nodes = proto.messages("node")
    graph = Graph(title=title)
    clusters = [cluster_of(n) for n in nodes]
    order = list(dict.fromkeys(c for c in clusters if c))
    fills = {name: CLUSTER_FILLS[i % len(CLUSTER_FILLS)] for i, name in enumerate(order)}
    sizes = Counter(c for c in clusters if c)
    for name in order:
        graph.clusters[name] = Cluster(
            name, f"XLA {name} ({sizes[name]} nodes)", fill="#fbfbfb", tooltip=f"nodes XLA compiles together as {name}"
        )
    for node, cluster in zip(nodes, clusters, strict=True):
        name, op = str(node.first("name", "?")), str(node.first("op", "?"))
        details = [f"{name} = {op}"]
        if node.first("device"):
            details.append(f"device: {node.first('device')}")
        if (dtype := _dtype(node)) is not None:
            details.append(f"dtype: {dtype}")
        if cluster:
            details.append(f"XLA cluster: {cluster}")
        graph.add_node(
            Node(
                name,
                f"{op}\n{name}",
                tooltip="\n".join(details),
                fill=fills[cluster] if cluster else UNCLUSTERED_FILL,
                cluster=cluster,
            )
        )
    for node in nodes:
        name = str(node.first("name", "?"))
        for raw in node.all("input"):
            if not isinstance(raw, str):
                continue
            control = raw.startswith("^")
            source, _colon, port = raw.lstrip("^").partition(":")
            if source not in graph.nodes:  # an input from a function's argument or a pruned node
                continue
            label = f":{port}" if port and port != "0" else ""
            graph.edges.append(Edge(source, name, label, kind="control" if control else "data"))
    functions = len(proto.first("library").messages("function")) if isinstance(proto.first("library"), TextProto) else 0
    if order:
        graph.notes.append(f"{len(order)} XLA clusters: " + ", ".join(f"{c} ({sizes[c]} nodes)" for c in order))
    else:
        graph.notes.append("no node is assigned to an XLA cluster in this graph")
    if functions:
        graph.notes.append(f"{functions} library functions not drawn")
    if proto.problems:
        graph.notes.append(f"read despite {len(proto.problems)} problems: {proto.problems[0]}")
    degree = Counter(e.src for e in graph.edges) + Counter(e.dst for e in graph.edges)
    graph.suggested_center = degree.most_common(1)[0][0] if degree else next(iter(graph.nodes), None)
    return graph
