"""Op times from a run's profile (the spec's ``profile:``), in the index: tables, their rows, and queries.

A profiled run archives JAX's trace (``*.xplane.pb``, below ``xlarun-profile/``). :func:`index_profiles` reads
it with :func:`xlarun.hlo.xspace.read_op_events` (no jaxlib needed) and writes, per module and device, how often
it ran and how long its ops kept the machine busy (``module_times``), and per op its count, total and self time
(``op_times``). A trace names a module by ``hlo_module`` and ``program_id``: the run's module with that id and
name, else the one module of that name; a module the dump lacks is kept under its name with no id.
Both tables are additive (created when missing, rows dropped with their run by ``Index.forget_run``).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xlarun.hlo.process_dirs import process_of_dir, run_module_id

if TYPE_CHECKING:  # annotations only: reading times back loads neither the dump names' patterns nor the trace reader
    from xlarun.hlo.names import DumpName
    from xlarun.hlo.xspace import OpEvent
    from xlarun.store.rows import StoredFile
    from xlarun.store.runs import RunStore

PROFILE_SCHEMA = """
CREATE TABLE IF NOT EXISTS module_times (
    run_id TEXT, module_id INTEGER, module_name TEXT, device INTEGER,
    executions INTEGER, busy_ns REAL, wall_ns REAL, events INTEGER, first_ns REAL
);
CREATE INDEX IF NOT EXISTS module_times_run ON module_times(run_id);
CREATE TABLE IF NOT EXISTS op_times (
    run_id TEXT, module_id INTEGER, module_name TEXT, device INTEGER, op TEXT,
    count INTEGER, total_ns REAL, self_ns REAL, first_count INTEGER, first_ns REAL
);
CREATE INDEX IF NOT EXISTS op_times_module ON op_times(run_id, module_id);
"""

#: The end of a profile's file name: JAX's and TensorFlow's profilers write one XSpace per host.
TRACE_SUFFIX = ".xplane.pb"


@dataclass(frozen=True)
class ModuleTime:
    """A module's measured time in a run: how often it ran and how long its ops kept the machine busy."""

    module_id: int | None  # None: the trace names a module the dump lacks
    name: str
    executions: int
    busy_ns: float  # the ops' self times added up (every device)
    wall_ns: float  # first op's start to last op's end, per execution, added up
    events: int
    devices: int
    share_of_run: float  # of every module's busy time
    mean_ns: float  # busy time per execution
    first_ns: float  # the first execution's busy time (it may include one-time set-up)
    steady_mean_ns: float  # busy time per execution after the first (the mean when it ran once)


@dataclass(frozen=True)
class OpTime:
    """One op of a module, timed: how often it ran, its total (with what is nested in it) and self time."""

    op: str
    count: int
    total_ns: float
    self_ns: float
    devices: int
    share_of_module: float  # of the module's busy time (self times)
    share_of_run: float
    mean_ns: float  # total time per execution of the op
    first_count: int  # its executions in the module's first execution (which may carry one-time set-up)
    first_ns: float  # their total time
    steady_mean_ns: float  # total time per execution after the module's first (the mean when that was all)

    @property
    def steady_count(self) -> int:
        return self.count - self.first_count


def ensure_profile_tables(conn: sqlite3.Connection) -> None:
    """Create the profile tables where the index lacks them (an index made before they existed); statement by
    statement: ``executescript`` would commit the caller's transaction."""
    if _columns(conn) and "first_count" not in _columns(conn):  # tables of an earlier xlarun: derived data, made anew
        conn.execute("DROP TABLE module_times")
        conn.execute("DROP TABLE op_times")
    for statement in PROFILE_SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def trace_files(decoded: list[tuple[StoredFile, DumpName]]) -> list[StoredFile]:
    """The run's profiler traces."""
    return [stored for stored, _name in decoded if stored.path.endswith(TRACE_SUFFIX)]


def index_profiles(conn: sqlite3.Connection, store: RunStore, run_id: str, decoded: list[tuple[StoredFile, DumpName]]) -> int:
    """Write the op times of the run's traces (inside the caller's transaction); returns the events read. A trace
    that cannot be read is left out: the run stays indexed, with no times."""
    traces = trace_files(decoded)
    if _has_tables(conn):  # indexed again (reindex): its rows are written anew
        for table in ("module_times", "op_times"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
    if not traces:
        return 0
    modules = {(name.module_id, name.module_name) for _stored, name in decoded if name.module_id is not None and name.module_name}
    ensure_profile_tables(conn)
    events = joined_trace_events(store, run_id, [stored.path for stored in traces], modules)
    write_op_times(conn, run_id, events)
    return len(events)


def joined_trace_events(
    store: RunStore, run_id: str, paths: list[str], modules: set[tuple[int, str]]
) -> list[tuple[OpEvent, int | None]]:
    """The op events of the run's traces at ``paths``, each with the id of the module of ``modules`` (id, name) it
    joins, or None (a module the dump lacks); a trace that cannot be read is left out."""
    from xlarun.hlo.protowire import ProtoDecodeError  # the trace reader: indexing only, not reading times back
    from xlarun.hlo.xspace import read_op_events

    events: list[tuple[OpEvent, int | None]] = []
    for path in paths:
        try:
            read = read_op_events(store.read_file(run_id, path))
        except (ProtoDecodeError, OSError, ValueError):
            continue
        process = next((p for part in path.split("/") if (p := process_of_dir(part)) is not None), None)
        events += [(event, _module_id(event, process, modules)) for event in read]
    return events


def _module_id(event: OpEvent, process: int | None, modules: set[tuple[int, str]]) -> int | None:
    if event.program_id is not None:
        candidate = run_module_id(process or 0, event.program_id)
        if (candidate, event.module) in modules:
            return candidate
    named = [module_id for module_id, name in modules if name == event.module]
    return named[0] if len(named) == 1 else None


def write_op_times(conn: sqlite3.Connection, run_id: str, events: list[tuple[OpEvent, int | None]]) -> None:
    """Write op and module times of ``events`` (each with the module id it joins, or None)."""
    first_run: dict[tuple, tuple[int, int | None]] = {}  # (module, device) -> (start, run id) of its first execution
    for event, module_id in events:
        where = (module_id, event.module, event.device)
        if where not in first_run or event.start_ps < first_run[where][0]:
            first_run[where] = (event.start_ps, event.run_id)
    ops: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0.0])
    spans: dict[tuple, list[float]] = {}  # (module, device, execution) -> [start, end, busy, events]
    for event, module_id in events:
        op = ops[(module_id, event.module, event.device, event.op)]
        op[0] += 1
        op[1] += event.duration_ps / 1000
        op[2] += event.self_ps / 1000
        if first_run[(module_id, event.module, event.device)][1] == event.run_id:
            op[3] += 1
            op[4] += event.duration_ps / 1000
        key = (module_id, event.module, event.device, event.run_id)
        end: float = event.start_ps + event.duration_ps
        span = spans.setdefault(key, [event.start_ps, end, 0.0, 0])
        span[0], span[1] = min(span[0], event.start_ps), max(span[1], end)
        span[2] += event.self_ps / 1000
        span[3] += 1
    per_module: dict[tuple, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, float("inf"), 0.0])
    for (module_id, name, device, _execution), (start, end, busy, count) in spans.items():
        row = per_module[(module_id, name, device)]
        row[0] += 1
        row[1] += busy
        row[2] += (end - start) / 1000
        row[3] += count
        if start < row[4]:  # the first execution so far: its busy time
            row[4], row[5] = start, busy
    conn.executemany(
        "INSERT INTO module_times VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(run_id, *key, int(n), busy, wall, int(count), first) for key, (n, busy, wall, count, _, first) in per_module.items()],
    )
    conn.executemany(
        "INSERT INTO op_times VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(run_id, *key, int(n), total, own, int(n1), first) for key, (n, total, own, n1, first) in ops.items()],
    )


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(op_times)")}


def _has_tables(conn: sqlite3.Connection) -> bool:
    """Whether the index has the profile tables as this version writes them (an earlier one's: `xlarun reindex`)."""
    return "first_count" in _columns(conn)


def module_times(conn: sqlite3.Connection, run_id: str) -> list[ModuleTime]:
    """The run's modules by measured busy time, most first; empty when the run has no profile."""
    if not _has_tables(conn):
        return []
    rows = conn.execute(
        "SELECT module_id, module_name, max(executions), sum(busy_ns), sum(wall_ns), sum(events), count(*), sum(first_ns) "
        "FROM module_times WHERE run_id = ? GROUP BY module_id, module_name ORDER BY sum(busy_ns) DESC, module_name",
        (run_id,),
    ).fetchall()
    run_busy = sum(row[3] for row in rows) or 1.0
    return [_module_time(row, run_busy) for row in rows]


def module_time(conn: sqlite3.Connection, run_id: str, module_id: int) -> ModuleTime | None:
    """One module's measured time in its run (None: the run was not profiled, or the module never ran)."""
    return next((t for t in module_times(conn, run_id) if t.module_id == module_id), None)


def _module_time(row: sqlite3.Row | tuple, run_busy: float) -> ModuleTime:
    module_id, name, executions, busy, wall, events, devices, first = row
    mean = busy / executions if executions else 0.0
    steady = (busy - first) / (executions - 1) if executions > 1 else mean
    return ModuleTime(module_id, name, executions, busy, wall, events, devices, busy / run_busy, mean, first, steady)


def op_times(conn: sqlite3.Connection, run_id: str, module_id: int | None, module_name: str) -> list[OpTime]:
    """One module's ops by self time, most first (``module_id`` None: the module the trace names and the dump lacks)."""
    if not _has_tables(conn):
        return []
    run_busy = conn.execute("SELECT sum(busy_ns) FROM module_times WHERE run_id = ?", (run_id,)).fetchone()[0] or 1.0
    rows = conn.execute(
        "SELECT op, sum(count), sum(total_ns), sum(self_ns), count(*), sum(first_count), sum(first_ns) FROM op_times "
        "WHERE run_id = ? AND module_id IS ? AND module_name = ? GROUP BY op ORDER BY sum(self_ns) DESC, op",
        (run_id, module_id, module_name),
    ).fetchall()
    module_busy = sum(row[3] for row in rows) or 1.0
    return [_op_time(row, module_busy, run_busy) for row in rows]


def _op_time(row: sqlite3.Row | tuple, module_busy: float, run_busy: float) -> OpTime:
    op, count, total, own, devices, first_count, first = row
    mean = total / count if count else 0.0
    steady = (total - first) / (count - first_count) if count > first_count else mean
    return OpTime(op, count, total, own, devices, own / module_busy, own / run_busy, mean, first_count, first, steady)
