"""The graphs a report shows: each module's HLO at its stages (whole; a big module as its overview; the
neighbourhood of the root when still too big), and a run's TensorFlow GraphDefs; laid out in parallel and made safe to inline."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from xlarun.errors import XlarunError
from xlarun.hlo import load_hlo
from xlarun.navigate.select import select_file
from xlarun.render import RenderOptions, graph_of, layout, to_dot
from xlarun.render.error_colours import error_graph, legend
from xlarun.render.graph import Graph, neighbourhood

if TYPE_CHECKING:
    from xlarun.bisect.bisect_result import BisectResult
    from xlarun.store.rows import FileInfo, ModuleInfo
    from xlarun.store.runs import RunStore

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)
#: How far around the root a neighbourhood view reaches.
NEIGHBOURHOOD_DEPTH = 3
STAGES = ("before_optimizations", "after_optimizations")


@dataclass
class GraphJob:
    """One graph to draw for the report, and, once laid out, its SVG."""

    key: str  # file-name-safe, unique in the report: 'module_0012.before_optimizations'
    title: str
    source_path: str
    graph: Graph | None = None
    view: str = "whole"  # or 'overview' (a big module, condensed), or 'neighbourhood' (around its root)
    center: str | None = None
    svg: str | None = None
    problem: str | None = None
    notes: list[str] = field(default_factory=list)
    #: ("fill" or "border", colour, meaning) shown beside the graph when its colours mean more than the opcode.
    legend: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return len(self.graph.nodes) if self.graph else 0


def plan_module_graphs(store: RunStore, module: ModuleInfo, limit: int) -> list[GraphJob]:
    """A job per stage of ``module`` that has HLO text or proto; a big module is drawn as its overview (render's),
    and a graph still over ``limit`` becomes the root's neighbourhood."""
    jobs = []
    for stage in STAGES:
        try:
            file = select_file(module, stage, purpose="graph")
        except XlarunError:
            continue
        job = GraphJob(f"module_{module.module_id:04d}.{stage}", stage, file.path)
        _plan(job, partial(_stored_graph, store, file, f"{module.label} {stage}"), limit)
        jobs.append(job)
    return jobs


def plan_graphdef(store: RunStore, file: FileInfo, limit: int) -> GraphJob:
    """A job for one TensorFlow GraphDef ``.pbtxt`` of the run."""
    key = "tf." + "".join(c if c.isalnum() or c in "._-" else "_" for c in file.path.split("/")[-1])
    job = GraphJob(key, file.path, file.path)
    _plan(job, partial(_stored_graph, store, file, None), limit)
    return job


def plan_error_graph(store: RunStore, module: ModuleInfo, result: BisectResult, bisect_id: str, limit: int) -> GraphJob | None:
    """A job drawing the culprit step of a bisection that searched its instructions, coloured by each value's error
    (None when the bisection has no per-value errors: no instruction search, or recorded before they were kept)."""
    from xlarun.bisect.history import culprit_errors

    culprit = culprit_errors(result, module)
    if culprit is None:
        return None
    safe_id = "".join(c if c.isalnum() or c in "-_" else "_" for c in bisect_id)
    job = GraphJob(f"module_{module.module_id:04d}.bisect-{safe_id}", f"{culprit.step}, coloured by error", culprit.path)
    step_file = culprit.file
    if step_file is None:
        job.problem = f"not drawn: the culprit step's dump {culprit.path or '(none named)'} is not among the module's files"
        return job

    def build() -> Graph:
        module_hlo = load_hlo(store.blobs.get(step_file.digest), step_file.path)
        return error_graph(module_hlo, culprit.values, f"{module.label} {culprit.step}")

    _plan(job, build, limit, "the first value to move")
    job.legend = legend(culprit.values)
    return job


def _stored_graph(store: RunStore, file: FileInfo, title: str | None) -> Graph:
    return graph_of(store.blobs.get(file.digest), file.path, RenderOptions(), title=title)


def _plan(job: GraphJob, build: Callable[[], Graph], limit: int, center_is: str = "the root") -> None:
    try:
        graph = build()
    except XlarunError as exc:
        job.problem = f"not drawn: {exc.one_line()}"
        return
    if graph.overview:
        job.view = "overview"
    if len(graph.nodes) > limit and graph.suggested_center:
        job.view, job.center = "neighbourhood", graph.suggested_center
        whole = len(graph.nodes)
        graph = neighbourhood(graph, graph.suggested_center, NEIGHBOURHOOD_DEPTH)
        job.notes.append(
            f"the whole graph has {whole} nodes (over the report's limit of {limit}): this is the neighbourhood of "
            f"{center_is} {job.center}; `xlarun render --around NAME` draws any other part"
        )
        if len(graph.nodes) > limit:
            job.problem = f"not drawn: even the root's neighbourhood has {len(graph.nodes)} nodes"
            return
    job.graph = graph
    job.notes.extend(graph.notes)


def lay_out_all(jobs: list[GraphJob], timeout_s: float, progress: Callable[[str], None] | None = None) -> None:
    """Lay out every planned graph as SVG, several dot processes at a time."""
    todo = [(j, j.graph) for j in jobs if j.graph is not None]

    def one(planned: tuple[GraphJob, Graph]) -> GraphJob:
        job, graph = planned
        try:
            job.svg = safe_inline_svg(layout(to_dot(graph), "svg", timeout_s).decode("utf-8"))
        except XlarunError as exc:
            job.problem = f"not drawn: {exc.one_line()}"
        return job

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        for done, job in enumerate(pool.map(one, todo), 1):
            if progress:
                progress(f"  graph {done}/{len(todo)}: {job.key} ({job.nodes} nodes)")


def safe_inline_svg(svg: str) -> str:
    """Graphviz's SVG without prolog, scripts, event handlers or links, ready to inline in a page.

    Each tooltip becomes an SVG ``<title>`` (browsers show those on hover when the SVG is inline).
    """
    root = ET.fromstring(svg.encode("utf-8"))
    for parent in root.iter():
        for child in list(parent):
            tag = child.tag.rsplit("}", 1)[-1]
            if tag in ("script", "foreignObject", "iframe", "style"):
                parent.remove(child)
    for element in root.iter():
        for name in list(element.attrib):
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on") or (local == "href" and not element.attrib[name].startswith("#")):
                del element.attrib[name]
        tooltip = element.attrib.pop(f"{{{XLINK_NS}}}title", None)
        if tooltip is not None and element.tag == f"{{{SVG_NS}}}a":
            title = ET.Element(f"{{{SVG_NS}}}title")
            title.text = tooltip
            element.insert(0, title)
    return ET.tostring(root, encoding="unicode")
