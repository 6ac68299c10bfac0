"""What the front door's verbs return that holds no store, run or module: a diff, a rendered graph, a bisection.
Each prints as the CLI prints it and displays as HTML in Jupyter (see :mod:`xlarun.display`); a find's hits and a
batch are in :mod:`xlarun.api`, a replay in :mod:`xlarun.api.module`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun import display

if TYPE_CHECKING:
    from xlarun.bisect import BisectResult
    from xlarun.navigate.peak_memory import ModuleMemory
    from xlarun.navigate.profile import ModuleProfile, RunTimes
    from xlarun.navigate.time_diff import RunTimeDiff
    from xlarun.see.diff import ModuleDiff

__all__ = ["Bisection", "Diff", "Graph", "Memory", "Profile", "TimeDiff", "Times"]


class Diff(display.Shown):
    """A module diff (``xlarun diff``): ``summary`` (structural), ``unified`` (text lines), ``before``/``after`` labels."""

    def __init__(self, diff: ModuleDiff):
        self.diff = diff

    before = property(lambda self: self.diff.before)
    after = property(lambda self: self.diff.after)
    summary = property(lambda self: self.diff.summary)
    unified = property(lambda self: self.diff.unified)
    notes = property(lambda self: self.diff.notes)

    def to_dict(self) -> dict[str, Any]:
        return self.diff.to_dict()

    def _printed(self) -> display.Printed:
        from xlarun.present.module_diff import print_module_diff

        return display.capture_printed(print_module_diff, self.diff)


class Graph:
    """A rendered graph (``data`` in ``format``); shows itself as SVG in Jupyter."""

    def __init__(self, data: bytes, format: str, source: str, nodes: int, notes: list[str], kind: str = "hlo"):
        self.data, self.format, self.source, self.nodes, self.notes = data, format, source, nodes, notes
        self.kind = kind  # "hlo" (xlarun's drawing), "xla-dot" (XLA's own .dot) or "graphdef"

    def save(self, path: str | Path) -> Path:
        Path(path).write_bytes(self.data)
        return Path(path)

    def _repr_svg_(self) -> str | None:
        if self.format != "svg":
            return None
        from xlarun.report.graphs import safe_inline_svg

        return safe_inline_svg(self.data.decode("utf-8"))

    def __repr__(self) -> str:
        return f"<xlarun.Graph {self.format}: {self.nodes} nodes, from {self.source}>"


class Bisection(display.Shown):
    """A recorded bisection: ``verdict``, ``culprit_pass``, the error at every replayed step (``result``)."""

    def __init__(self, result: BisectResult, bisect_id: str | None):
        self.result, self.bisect_id = result, bisect_id

    verdict = property(lambda self: self.result.verdict)
    culprit_pass = property(lambda self: self.result.culprit_pass)

    def _printed(self) -> display.Printed:
        from xlarun.present.bisection import print_bisection

        return display.capture_printed(print_bisection, self.result, self.bisect_id)


class Times(display.Shown):
    """A profiled run's modules by measured time, most first (``xlarun modules --by time``); ``times.modules``
    holds each module's ``time`` (executions, busy_ns, wall_ns, share_of_run)."""

    def __init__(self, found: RunTimes):
        self.found = found

    run_id = property(lambda self: self.found.run_id)
    modules = property(lambda self: self.found.modules)
    job_wall_s = property(lambda self: self.found.job_wall_s)

    def _printed(self) -> display.Printed:
        from xlarun.present.times import print_run_times

        return display.capture_printed(print_run_times, self.found)


class Profile(display.Shown):
    """One module's ops by measured time (``xlarun profile REF``): ``profile.ops``, each with its ``time``
    (count, total_ns, self_ns, shares), what it holds, its sources, flops, bytes and achieved rates."""

    def __init__(self, found: ModuleProfile, top: int | None = None):
        self.found, self.top = found, top

    ops = property(lambda self: self.found.ops)
    time = property(lambda self: self.found.time)

    def _printed(self) -> display.Printed:
        from xlarun.present.times import DEFAULT_TOP_OPS, print_module_profile

        return display.capture_printed(print_module_profile, self.found, DEFAULT_TOP_OPS if self.top is None else self.top)


class TimeDiff(display.Shown):
    """Two profiled runs compared by measured time (``xlarun diff A B --time``): ``modules`` (each with its
    ``change``: medians, ratio, verdict, and its ``ops``) and ``moved_ops``, the ops that moved most."""

    def __init__(self, found: RunTimeDiff):
        self.found = found

    modules = property(lambda self: self.found.modules)
    moved_ops = property(lambda self: self.found.moved_ops)

    def to_dict(self) -> dict[str, Any]:
        return self.found.to_dict()

    def _printed(self) -> display.Printed:
        from xlarun.present.times import print_time_diff

        return display.capture_printed(print_time_diff, self.found)


class Memory(display.Shown):
    """What fills one module's memory (``xlarun memory REF``): ``peak_bytes`` and its breakdown, and ``buffers``,
    the biggest live at the peak, each with its instruction, shape, size and source lines (``found`` holds all)."""

    def __init__(self, found: ModuleMemory):
        self.found = found

    peak_bytes = property(lambda self: self.found.peak_bytes)
    buffers = property(lambda self: self.found.buffers)

    def _printed(self) -> display.Printed:
        from xlarun.present.memory_table import print_module_memory

        return display.capture_printed(print_module_memory, self.found)
