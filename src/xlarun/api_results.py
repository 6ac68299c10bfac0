"""What the front door's verbs return: a find's hits, a diff, a rendered graph, a replay, a bisection, a
batch. Each prints as the CLI prints it and displays as HTML in Jupyter (see :mod:`xlarun.display`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun import display
from xlarun.console import LineBlock

if TYPE_CHECKING:
    from xlarun.api import Module, Run, Store
    from xlarun.bisect import BisectResult
    from xlarun.diff import ModuleDiff
    from xlarun.navigate.profile import ModuleProfile, RunTimes
    from xlarun.replay.result import ReplayResult
    from xlarun.store.records import FindHit

__all__ = ["Batch", "Bisection", "Diff", "Found", "Graph", "Profile", "Replay", "Times"]


class Found(display.Shown, Sequence["FindHit"]):
    """What ``find`` found: one hit per module and kind; prints as ``xlarun find``."""

    def __init__(self, store: Store, text: str, hits: list[FindHit]):
        self._store, self.text, self.hits = store, text, hits

    def __getitem__(self, i):
        return self.hits[i]

    def __len__(self) -> int:
        return len(self.hits)

    def modules(self) -> list[Module]:
        """The modules hit, each once."""
        from xlarun.api import Module

        seen = dict.fromkeys((h.run_id, h.module_id) for h in self.hits)
        return [Module(self._store, self._store.store.index.module(r, m)) for r, m in seen]

    def _printed(self) -> display.Printed:
        from xlarun.present import print_found

        if not self.hits:
            return display.Printed(f"no module contains {self.text!r}", [LineBlock(f"no module contains {self.text!r}")])
        return display.capture_printed(print_found, self.hits)


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
        from xlarun.present import print_module_diff

        return display.capture_printed(print_module_diff, self.diff)


class Graph:
    """A rendered graph (``data`` in ``format``); shows itself as SVG in Jupyter."""

    def __init__(self, data: bytes, format: str, source: str, nodes: int, notes: list[str]):
        self.data, self.format, self.source, self.nodes, self.notes = data, format, source, nodes, notes

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


class Replay(display.Shown):
    """A recorded replay: ``verdict`` (match, mismatch, ran, engine-error), ``result`` with errors and timings."""

    def __init__(self, result: ReplayResult, replay_id: str | None, module: Module | None):
        self.result, self.replay_id, self.module = result, replay_id, module

    verdict = property(lambda self: self.result.verdict)
    max_abs_error = property(lambda self: self.result.max_abs_error)
    max_rel_error = property(lambda self: self.result.max_rel_error)

    @property
    def ok(self) -> bool:
        return self.result.verdict in ("match", "ran")

    def _printed(self) -> display.Printed:
        from xlarun.present import print_replay

        return display.capture_printed(print_replay, self.result, self.replay_id, self.module.info if self.module else None)


class Bisection(display.Shown):
    """A recorded bisection: ``verdict``, ``culprit_pass``, the error at every replayed step (``result``)."""

    def __init__(self, result: BisectResult, bisect_id: str | None):
        self.result, self.bisect_id = result, bisect_id

    verdict = property(lambda self: self.result.verdict)
    culprit_pass = property(lambda self: self.result.culprit_pass)

    def _printed(self) -> display.Printed:
        from xlarun.present_bisection import print_bisection

        return display.capture_printed(print_bisection, self.result, self.bisect_id)


class Batch(display.Shown):
    """A batch (``xlarun batch``): ``batch_id``, ``runs``, ``ok``; prints the CLI's comparison of the cells."""

    def __init__(self, store: Store, result: Any):
        self._store, self.result = store, result

    batch_id = property(lambda self: self.result.batch_id)
    ok = property(lambda self: self.result.ok)

    @property
    def runs(self) -> list[Run]:
        return [self._store.run(c.result.run_id) for c in self.result.cells if c.result is not None]

    def _printed(self) -> display.Printed:
        from xlarun.present import print_comparison

        return display.capture_printed(print_comparison, self.result)


class Times(display.Shown):
    """A profiled run's modules by measured time, most first (``xlarun modules --by time``); ``times.modules``
    holds each module's ``time`` (executions, busy_ns, wall_ns, share_of_run)."""

    def __init__(self, found: RunTimes):
        self.found = found

    run_id = property(lambda self: self.found.run_id)
    modules = property(lambda self: self.found.modules)
    job_wall_s = property(lambda self: self.found.job_wall_s)

    def _printed(self) -> display.Printed:
        from xlarun.present_profile import print_run_times

        return display.capture_printed(print_run_times, self.found)


class Profile(display.Shown):
    """One module's ops by measured time (``xlarun profile REF``): ``profile.ops``, each with its ``time``
    (count, total_ns, self_ns, shares), what it holds, its sources, flops, bytes and achieved rates."""

    def __init__(self, found: ModuleProfile, top: int | None = None):
        self.found, self.top = found, top

    ops = property(lambda self: self.found.ops)
    time = property(lambda self: self.found.time)

    def _printed(self) -> display.Printed:
        from xlarun.present_profile import DEFAULT_TOP_OPS, print_module_profile

        return display.capture_printed(print_module_profile, self.found, DEFAULT_TOP_OPS if self.top is None else self.top)
