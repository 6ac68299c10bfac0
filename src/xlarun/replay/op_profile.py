"""``xlarun replay --profile``: the replayed module's iterations run under JAX's profiler, and each op's time.

The run stage (:mod:`.run`) wraps its timed iterations in :func:`traced` (``jax.profiler.start_trace`` /
``stop_trace``, in the process that runs the module: the worker's child). The trace is read with
:func:`xlarun.hlo.xspace.read_op_events` and counted as a capture's profile is (:mod:`xlarun.store.profile_index`,
in a throw-away in-memory table), then each op is joined by name with the optimized module XLA compiled for this
replay (what a fusion holds, its source lines, its flops and bytes): the same rows ``xlarun profile`` prints.
The result carries them as plain data (:func:`op_profile_dict`), so the child sends them back as JSON.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xlarun.errors import EngineError


@dataclass
class Trace:
    """What :func:`traced` leaves once its block is done: the XSpace bytes, or why there are none."""

    data: bytes | None = None
    problem: str | None = None
    files: list[str] = field(default_factory=list)


@contextlib.contextmanager
def traced() -> Iterator[Trace]:
    """Run the block under JAX's profiler; the returned :class:`Trace` holds the XSpace when the block ends."""
    import jax

    found = Trace()
    with tempfile.TemporaryDirectory(prefix="xlarun-replay-trace-") as folder:
        try:
            jax.profiler.start_trace(folder)
        except Exception as exc:  # a profiler already running in this process, or none built in
            raise EngineError(f"cannot start JAX's profiler: {exc}", "replay without --profile") from exc
        try:
            yield found
        finally:
            jax.profiler.stop_trace()
            traces = sorted(Path(folder).rglob("*.xplane.pb"))
            found.files = [p.name for p in traces]
            if traces:
                found.data = traces[0].read_bytes()
            else:
                found.problem = "JAX's profiler wrote no trace"


def optimized_text(executable: Any) -> str | None:
    """The optimized HLO XLA compiled for this replay (None where this jaxlib does not say)."""
    try:
        return str(executable.hlo_modules()[0].to_string())
    except Exception:  # an executable without hlo_modules on some jaxlib: the table then lacks what ops hold
        return None


def op_profile_dict(trace: Trace, optimized: str | None, iterations: int) -> tuple[dict | None, str | None]:
    """The replay's op table as JSON-ready data: ``module`` (the timed module's name), ``time`` (a
    :class:`~xlarun.store.profile_index.ModuleTime`), ``ops`` (each a :class:`~xlarun.navigate.profile.ProfiledOp`,
    most self time first), ``hlo_note`` (why ops lack what they hold), ``iterations``; or None and why there is
    none (an older jaxlib's CPU client traces no op)."""
    from xlarun.hlo.xspace import read_op_events
    from xlarun.navigate.profile import profiled_op
    from xlarun.store.profile_index import ensure_profile_tables, module_times, op_times, write_op_times

    if trace.data is None:
        return None, trace.problem
    events = read_op_events(trace.data)
    if not events:
        return None, "the trace names no HLO op (this jaxlib's client does not trace its ops)"
    conn = sqlite3.connect(":memory:")
    try:
        ensure_profile_tables(conn)
        write_op_times(conn, "replay", [(event, None) for event in events])
        modules = module_times(conn, "replay")
        timed = modules[0]  # the replayed module: the only one that ran while the trace was on
        rows = op_times(conn, "replay", None, timed.name)
    finally:
        conn.close()
    costs, note = _costs(optimized)
    ops = [profiled_op(row, costs.get(row.op)) for row in rows]
    return {
        "module": timed.name,
        "iterations": iterations,
        "time": asdict(timed),
        "ops": [asdict(op) for op in ops],
        "other_modules": [m.name for m in modules[1:]],
        "hlo_note": note,
    }, None


def _costs(optimized: str | None) -> tuple[dict, str | None]:
    from xlarun.errors import XlarunError
    from xlarun.hlo import load_hlo
    from xlarun.hlo.cost import op_costs

    if optimized is None:
        return {}, "what each op holds is not shown: this jaxlib does not give the compiled module's HLO"
    try:
        return op_costs(load_hlo(optimized.encode(), "replayed.txt")), None
    except XlarunError as exc:
        return {}, f"what each op holds is not shown: {exc.message}"
