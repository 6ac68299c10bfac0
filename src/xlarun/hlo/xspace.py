"""Reading a profiler trace (an XSpace, ``*.xplane.pb``) for the HLO ops it timed, without jaxlib or TensorFlow.

JAX's and TensorFlow's profilers write the same XSpace protobuf (``tsl/profiler/protobuf/xplane.proto``). On
the CPU backend every executed thunk is an event carrying the stats ``hlo_module`` (``jit_f``), ``hlo_op``
(the fusion or instruction), ``program_id`` (the module's id, as its dump file names it), ``run_id`` (one
execution) and ``device_ordinal``. :func:`read_op_events` returns those events, each with its self time:
an op inside another on the same thread (the body of a ``while``) is taken out of its parent's, so that the
ops' self times add up to the busy time and nothing is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xlarun.hlo.protowire import (
    FIXED32,
    FIXED64,
    LENGTH_DELIMITED,
    VARINT,
    ProtoDecodeError,
    as_bytes,
    as_int,
    as_signed64,
    as_str,
    encode_varint,
    iter_fields,
    read_varint,
)

_NUMBER_STATS = {3: "uint64", 4: "int64"}


@dataclass(frozen=True)
class OpEvent:
    """One execution of one HLO op, as the profiler timed it (times in picoseconds, as XSpace keeps them)."""

    module: str  # hlo_module: the module's name, e.g. jit_train_step
    op: str  # hlo_op: the instruction or fusion, e.g. fusion.3
    program_id: int | None  # the module's id in its dump file names
    run_id: int | None  # one execution of the module
    device: int | None  # device_ordinal
    start_ps: int
    duration_ps: int
    self_ps: int  # duration less the ops nested in it on the same thread
    thread: str  # plane and line, e.g. /host:CPU tf_XLAEigen/123


def read_op_events(data: bytes) -> list[OpEvent]:
    """Every event of an XSpace that names an HLO op (stats ``hlo_module`` and ``hlo_op``), in start order per
    thread. Raises :class:`~xlarun.hlo.protowire.ProtoDecodeError` for bytes that are not an XSpace."""
    events: list[OpEvent] = []
    for number, _wire, value in iter_fields(data):
        if number == 1:  # XSpace.planes
            events.extend(_plane_events(as_bytes(value)))
    return _numbered_executions(events)


def _numbered_executions(events: list[OpEvent]) -> list[OpEvent]:
    """Events with no execution number (TensorFlow's runs of an XLA cluster carry ``run_id`` -1) numbered by
    execution: the op that starts first is a top-level op of the entry computation, which runs once per execution,
    so each time it starts again a new execution begins (numbered -1, -2, ... per module and device)."""
    unnumbered = [i for i, e in enumerate(events) if e.run_id is None or e.run_id < 0]
    if not unnumbered:
        return events
    numbered = list(events)
    streams: dict[tuple[str, int | None], list[int]] = {}
    for i in unnumbered:
        streams.setdefault((events[i].module, events[i].device), []).append(i)
    for indexes in streams.values():
        indexes.sort(key=lambda i: events[i].start_ps)
        opener, execution = events[indexes[0]].op, 0
        for i in indexes:
            if events[i].op == opener:
                execution -= 1
            numbered[i] = replace(events[i], run_id=execution)
    return numbered


def _plane_events(plane: bytes) -> list[OpEvent]:
    name = ""
    lines: list[bytes] = []
    stat_names: dict[int, str] = {}
    for number, _wire, value in iter_fields(plane):
        if number == 2:
            name = as_str(value) or ""
        elif number == 3:
            lines.append(as_bytes(value))
        elif number == 5:  # map<int64, XStatMetadata>: entries of key 1, value 2
            key, meta_name = _metadata_entry(as_bytes(value))
            stat_names[key] = meta_name
    op_ids = [key for key, stat in stat_names.items() if stat == "hlo_op"]
    if not op_ids:  # no event of this plane names an HLO op
        return []
    # an event holding the hlo_op stat holds these bytes (XStat.metadata_id, field 1): events without them are skipped unread
    marker = bytes([0x08]) + encode_varint(op_ids[0])
    out: list[OpEvent] = []
    for line in lines:
        out.extend(_line_events(line, f"{name} ", marker, stat_names))
    return out


def _metadata_entry(entry: bytes) -> tuple[int, str]:
    key, name = 0, ""
    for number, _wire, value in iter_fields(entry):
        if number == 1:
            key = as_signed64(as_int(value))
        elif number == 2:
            for field, _w, item in iter_fields(as_bytes(value)):
                if field == 2:  # XStatMetadata.name
                    name = as_str(item) or ""
    return key, name


def _line_events(line: bytes, plane: str, marker: bytes, stat_names: dict[int, str]) -> list[OpEvent]:
    name, timestamp_ns, raw = "", 0, []
    pos, end = 0, len(line)
    while pos < end:  # the line's fields walked by hand: most events name no op, and are skipped uncopied
        key, pos = read_varint(line, pos)
        number, wire = key >> 3, key & 7
        if wire == LENGTH_DELIMITED:
            length, pos = read_varint(line, pos)
            if pos + length > end:
                raise ProtoDecodeError("truncated protobuf length-delimited field", "the trace is cut short")
            if number == 2:
                name = line[pos : pos + length].decode("utf-8", errors="replace")
            elif number == 4 and line.find(marker, pos, pos + length) != -1:
                raw.append(line[pos : pos + length])
            pos += length
        elif wire == VARINT:
            varint, pos = read_varint(line, pos)
            if number == 3:
                timestamp_ns = as_signed64(varint)
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        else:
            raise ProtoDecodeError(f"unexpected protobuf wire type {wire} in a trace line", "the file is not an XSpace")
    timed: list[tuple[int, int, dict[str, int | str]]] = []
    for event in raw:
        offset_ps, duration_ps, stats = 0, 0, {}
        for number, _wire, value in iter_fields(event):
            if number == 2:
                offset_ps = as_signed64(as_int(value))
            elif number == 3:
                duration_ps = as_signed64(as_int(value))
            elif number == 4:
                stat_name, stat_value = _stat(as_bytes(value), stat_names)
                stats[stat_name] = stat_value
        if "hlo_op" in stats and "hlo_module" in stats:
            timed.append((timestamp_ns * 1000 + offset_ps, duration_ps, stats))
    return _with_self_times(sorted(timed, key=lambda t: (t[0], -t[1])), plane + name)


def _stat(stat: bytes, stat_names: dict[int, str]) -> tuple[str, int | str]:
    metadata_id = 0
    value: int | str = ""
    for number, _wire, raw in iter_fields(stat):
        if number == 1:
            metadata_id = as_int(raw)
        elif number in _NUMBER_STATS:
            value = as_signed64(as_int(raw)) if number == 4 else as_int(raw)
        elif number == 5:
            value = as_str(raw) or ""
        elif number == 7:  # ref_value: the string is a stat metadata's name
            value = stat_names.get(as_int(raw), "")
    return stat_names.get(metadata_id, str(metadata_id)), value


def _number(value: int | str | None) -> int | None:
    return value if isinstance(value, int) else None


def _with_self_times(timed: list[tuple[int, int, dict[str, int | str]]], thread: str) -> list[OpEvent]:
    """The events of one thread with their self times: a child (starting inside an open parent) is
    subtracted from its innermost open parent."""
    self_ps = [duration for _start, duration, _stats in timed]
    open_events: list[int] = []  # indexes of events still open at the current start
    for i, (start, duration, _stats) in enumerate(timed):
        while open_events and timed[open_events[-1]][0] + timed[open_events[-1]][1] <= start:
            open_events.pop()
        if open_events:
            self_ps[open_events[-1]] -= duration
        open_events.append(i)
    return [
        OpEvent(
            module=str(stats["hlo_module"]),
            op=str(stats["hlo_op"]),
            program_id=_number(stats.get("program_id")),
            run_id=_number(stats.get("run_id")),
            device=_number(stats.get("device_ordinal")),
            start_ps=start,
            duration_ps=duration,
            self_ps=max(0, self_ps[i]),
            thread=thread,
        )
        for i, (start, duration, stats) in enumerate(timed)
    ]
