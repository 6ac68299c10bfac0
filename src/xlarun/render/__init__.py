"""Render dumps as graphs: HLO modules (xlarun's own HLO-to-DOT), XLA's ``.dot`` files as they are,
and TensorFlow GraphDefs with their XLA clusters coloured.

From Python::

    from xlarun.render import RenderOptions, render_stored_file
    from xlarun.navigate.select import select_file
    module = resolve_module(store.index, "train_step")
    graph = render_stored_file(store, module.run_id, select_file(module, purpose="graph"), RenderOptions(format="svg"))
    Path("g.svg").write_bytes(graph.data)

Big graphs: an HLO module over ``RenderOptions.overview_above`` nodes (or ``limit``, if fewer) is drawn as its
overview, condensed to fit when need be (render/overview.py, render/condense.py); with ``full``, above ``limit`` nodes a
graph is refused (:class:`GraphTooBig`, with the ``--around`` suggestion) rather than handed to dot, and dot runs under
a time limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.declared_options import RENDER_OPTIONS, take
from xlarun.errors import InputError
from xlarun.hlo import gunzip, load_hlo, looks_like_hlo_text
from xlarun.render.error_colours import ValueErrors, colour_by_error
from xlarun.render.graph import DEFAULT_NODE_LIMIT, Graph, GraphTooBig, check_node_limit, neighbourhood, to_dot
from xlarun.render.graphdef import graphdef_graph
from xlarun.render.hlo_graph import hlo_graph, hlo_neighbourhood
from xlarun.render.layout import DEFAULT_TIMEOUT_S, FORMATS, LayoutTimeout, count_dot_nodes, layout, layout_with_notes
from xlarun.render.memory import refuse_too_big_for_memory
from xlarun.render.overview import FAST_LAYOUT, OVERVIEW_ABOVE, OVERVIEW_MAX_NODES, hlo_overview, without_wide_inputs
from xlarun.render.time_colours import colour_by_time

if TYPE_CHECKING:
    from xlarun.store.rows import FileInfo
    from xlarun.store.runs import RunStore

__all__ = [
    "DEFAULT_NODE_LIMIT", "DEFAULT_TIMEOUT_S", "FORMATS", "Graph", "GraphTooBig", "LayoutTimeout", "RenderOptions",
    "RenderedGraph", "content_kind", "graph_of", "hlo_graph", "layout", "load_hlo", "render_bytes", "render_options",
    "render_path", "render_stored_file", "to_dot",
]  # fmt: skip


#: Above this many nodes a drawing is laid out with less effort from dot (render/overview.py's FAST_LAYOUT) and, unless
#: ``full``, edges from an input read by many nodes are left out (each reader names it).
FAST_LAYOUT_ABOVE = 200


@dataclass
class RenderOptions:
    """How to draw: output format, neighbourhood, node limit, fusions to open, dot's time limit."""

    format: str = "svg"
    around: str | None = None
    depth: int = 3
    limit: int | None = DEFAULT_NODE_LIMIT
    expand: tuple[str, ...] = ()
    expand_all: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: Above ``limit`` nodes (or ``overview_above``, if fewer) an HLO module is drawn as its overview
    #: (render/overview.py) unless ``full``; with ``full``, a module over ``limit`` is refused.
    full: bool = False
    #: Colour an HLO module by its values' errors (a bisection's instruction search) instead of by opcode.
    errors: ValueErrors | None = None
    #: Colour an HLO module by each op's measured time (instruction name -> its own time, ns) instead of by opcode.
    times: dict[str, float] | None = None
    overview_above: int = OVERVIEW_ABOVE


def render_options(format: str = "svg", **given: Any) -> RenderOptions:
    """:class:`RenderOptions` from ``xlarun render``'s drawing options and ``Module.render``'s keywords alike, as
    :data:`~xlarun.declared_options.RENDER_OPTIONS` declares them (``limit=0``: no limit)."""
    o = take(RENDER_OPTIONS, given, "render")
    return RenderOptions(
        format=format,
        around=o["around"],
        depth=o["depth"],
        limit=o["limit"] or None,
        expand=tuple(o["expand"] or ()),
        expand_all=o["expand_fusions"],
        timeout_s=o["timeout_s"],
        full=o["full"],
    )


@dataclass
class RenderedGraph:
    """A rendered graph: the bytes in ``format``, what it was drawn from and how many nodes it has."""

    data: bytes
    format: str
    source: str
    #: "hlo" (xlarun's drawing of an HLO module), "xla-dot" (XLA's own .dot) or "graphdef".
    kind: str
    nodes: int
    notes: list[str] = field(default_factory=list)


def content_kind(name: str, data: bytes) -> str:
    """What a file holds, by name then content: 'dot', 'graphdef', 'hlo-text' or 'hlo-proto'."""
    base = name.removesuffix(".gz")
    if base.endswith(".dot"):
        return "dot"
    if base.endswith(".pbtxt"):
        return "graphdef"
    if base.endswith(".pb"):
        return "hlo-proto"
    data = gunzip(data, name)
    head = data[:4096].lstrip()
    if head.startswith((b"digraph", b"strict digraph", b"graph")):
        return "dot"
    if looks_like_hlo_text(data):
        return "hlo-text"
    if head.startswith(b"node {") or b"\nnode {" in head:
        return "graphdef"
    if base.endswith((".txt", ".hlo")):
        raise InputError(
            f"{name} is not an HLO module", "render draws HLO modules, XLA's .dot files and TF GraphDef .pbtxt files"
        )
    raise InputError(
        f"cannot tell what {name} holds", "render draws HLO text (.txt), HLO protos (.pb), .dot files and GraphDef .pbtxt files"
    )


def graph_of(data: bytes, name: str, options: RenderOptions, title: str | None = None) -> Graph:
    """The drawable graph of an HLO module or a GraphDef (the neighbourhood when ``options.around``)."""
    data = gunzip(data, name)
    kind = content_kind(name, data)
    title = title or name
    if kind == "graphdef":
        graph = graphdef_graph(data, title=title)
        if options.around:
            if options.around not in graph.nodes:
                raise InputError(f"the graph has no node {options.around!r}", "node names are the GraphDef's `name:` fields")
            graph = neighbourhood(graph, options.around, options.depth)
        return graph
    if kind == "dot":
        raise InputError(f"{name} is already DOT", "use render_bytes to lay it out as it is")
    refuse_too_big_for_memory(len(data), name)
    module = load_hlo(data, name)
    if options.around:
        graph = hlo_neighbourhood(module, options.around, options.depth, expand=options.expand, title=title)
    else:
        graph = hlo_graph(module, expand=options.expand, expand_all=options.expand_all, title=title)
        above = min(options.limit, options.overview_above) if options.limit else None  # --limit 0: no limit, no overview
        if above and len(graph.nodes) > above and not options.full:
            # a big module: what it computes, condensed to fit if need be, in seconds
            max_nodes = min(options.limit or OVERVIEW_MAX_NODES, OVERVIEW_MAX_NODES)
            graph = hlo_overview(module, title=title, max_nodes=max_nodes)
        elif len(graph.nodes) > FAST_LAYOUT_ABOVE:  # dot's effort cut (4x less CPU on a 315-node drawing with 9 clusters)
            graph.attributes.update(FAST_LAYOUT)
            if not options.full:
                graph = without_wide_inputs(graph)
    if options.errors is not None:
        colour_by_error(graph, options.errors, module.entry.name)
    if options.times is not None:
        colour_by_time(graph, options.times)
    return graph


def render_bytes(data: bytes, name: str, options: RenderOptions | None = None, title: str | None = None) -> RenderedGraph:
    """Render one file's bytes; ``name`` (its dump file name) tells what they are."""
    options = options or RenderOptions()
    if content_kind(name, data) == "dot":
        if options.around or options.expand or options.expand_all:
            raise InputError(
                "--around and --expand work on HLO modules, not on XLA's .dot files",
                "drop --xla-dot to draw the module with xlarun's renderer",
            )
        source = gunzip(data, name).decode("utf-8", errors="replace")
        nodes = count_dot_nodes(source)
        if options.limit and nodes > options.limit:
            raise GraphTooBig(
                f"{name} has about {nodes} nodes, more than the limit of {options.limit}",
                "draw the module with xlarun's renderer (drop --xla-dot) and --around NAME, or raise --limit",
            )
        return RenderedGraph(layout(source, options.format, options.timeout_s), options.format, name, "xla-dot", nodes)
    graph = graph_of(data, name, options, title)
    what = f"the neighbourhood of {options.around} (depth {options.depth})" if options.around else name
    check_node_limit(graph, options.limit, what, neighbourhood_of=options.around)
    kind = "graphdef" if content_kind(name, data) == "graphdef" else "hlo"
    drawn, layout_notes = layout_with_notes(to_dot(graph), options.format, options.timeout_s)
    return RenderedGraph(drawn, options.format, name, kind, len(graph.nodes), graph.notes + layout_notes)


def render_path(path: str | Path, options: RenderOptions | None = None) -> RenderedGraph:
    """Render a file on disk (not in a store)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return render_bytes(data, path.name, options)


def render_stored_file(store: RunStore, run_id: str, file: FileInfo, options: RenderOptions | None = None) -> RenderedGraph:
    """Render one archived file of a run (``file`` is an index FileInfo)."""
    rendered = render_bytes(store.blobs.get(file.digest), file.path, options)
    rendered.source = f"{run_id}/{file.path}"
    return rendered
