"""After the job: the post-mortem of a job that ran out of memory.

A job is named out of memory when its log says so (XLA's ``RESOURCE_EXHAUSTED`` / ``Out of memory``, Python's
``MemoryError``, C++'s ``std::bad_alloc``), or when it was killed by SIGKILL that xlarun did not send (a timeout or a stop is another status),
which on Linux is the kernel's OOM killer; where the job's memory cgroup counts OOM kills (cgroup v2
``memory.events``, v1 ``memory.oom_control``: ``oom_kill N``), the count went up says that it was.

The post-mortem names the module it was in: the last module of the dump (the highest id), **running** when XLA
had written its optimized module (it had compiled it) and **compiling** when not, and that module's biggest buffers
from its ``*-buffer-assignment.txt`` (instruction, shape, size), the ones that filled the memory.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

#: XLA's allocation failing (a JaxRuntimeError), Python's, and C++'s (XLA compiling: "terminate called after
#: throwing an instance of 'std::bad_alloc'", a SIGABRT)
_OOM_LINE = re.compile(r"^.*(?:RESOURCE_EXHAUSTED|Out of memory|out of memory|\bMemoryError\b|std::bad_alloc).*$", re.M)
_SIGKILL_EXITS = (-signal.SIGKILL, 128 + signal.SIGKILL)  # a local process; Docker's 128+N
#: Where a process's memory cgroup keeps its OOM-kill count, v2 then v1 (the mount points the kernel documents).
_CGROUP_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory"))
_BIGGEST = 3


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup (the job's, for a
    local job), or None where that cannot be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers not in ("", "memory") and "memory" not in controllers.split(","):
            continue
        for root, name in ((_CGROUP_ROOTS[0], "memory.events"), (_CGROUP_ROOTS[1], "memory.oom_control")):
            try:
                text = (root / path.lstrip("/") / name).read_text()
            except OSError:
                continue
            found = re.search(r"^oom_kill (\d+)$", text, re.M)
            if found:
                return int(found.group(1))
    return None


@dataclass
class LastModule:
    """The last module the dump has, and whether XLA had written its optimized module."""

    label: str  # module_0003 jit_big
    compiled: bool
    biggest: list[str]  # "fusion.2 f32[20000,20000] 1.49 GiB", most first


def last_module(dump_dir: Path) -> LastModule | None:
    """The module with the highest id among the dump's files (every process's), or None for an empty dump."""
    from xlarun.hlo.names import decode_dump_name  # read for a job that failed only: not on every capture's start

    modules: dict[tuple[int, str], list[Path]] = {}
    for path in dump_dir.rglob("module_*"):
        name = decode_dump_name(path.name)
        if name.module_id is not None and path.is_file():
            modules.setdefault((name.module_id, name.module_name or ""), []).append(path)
    if not modules:
        return None
    (module_id, module_name), paths = max(modules.items(), key=lambda item: item[0][0])
    compiled = any(decode_dump_name(p.name).stage == "after_optimizations" for p in paths)
    assignment = next((p for p in paths if p.name.endswith("-buffer-assignment.txt")), None)
    return LastModule(f"module_{module_id:04d} {module_name}".rstrip(), compiled, _biggest(assignment))


def _biggest(path: Path | None) -> list[str]:
    from xlarun.hlo.buffer_assignment import DumpFormatError, parse_buffer_assignment

    if path is None:
        return []
    try:
        assignment = parse_buffer_assignment(path.read_text(encoding="utf-8", errors="replace"), path.name)
    except (OSError, DumpFormatError):
        return []
    values = sorted(
        (value for allocation in assignment.allocations for value in allocation.values), key=lambda v: (-v.size, v.instruction)
    )
    out: list[str] = []
    for value in values:
        words = f"{value.instruction} {value.shape} {_size(value.size)}"
        if not any(line.startswith(value.instruction + " ") for line in out):
            out.append(words)
        if len(out) == _BIGGEST:
            break
    return out


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} B"


def oom_cause(
    exit_code: int | None, log_tail: str, dump_dir: Path, kills: tuple[int | None, int | None], run_id: str
) -> str | None:
    """The post-mortem line of a failed job that ran out of memory, or None when nothing says it did. ``kills``:
    :func:`oom_kills` before and after the job."""
    kills_before, kills_after = kills
    said = _OOM_LINE.findall(log_tail)
    killed = exit_code in _SIGKILL_EXITS
    counted = kills_before is not None and kills_after is not None and kills_after > kills_before
    if not said and not killed:
        return None
    if said:
        how = f'the job ran out of memory (its log says "{said[-1].strip()[:200]}")'
    elif counted:
        how = f"the job was killed by the kernel's OOM killer (SIGKILL; its cgroup's oom_kill went from {kills_before} to {kills_after})"
    else:
        how = "the job was killed by SIGKILL, which xlarun did not send: most likely the kernel's OOM killer (out of memory)"
    last = last_module(dump_dir)
    if last is None:
        return how + ", before XLA compiled any module"
    where = (
        f"while running {last.label} (or after it: XLA had compiled it and written its optimized module)"
        if last.compiled
        else f"while compiling {last.label} (XLA had not written its optimized module)"
    )
    biggest = f"; its biggest buffers: {', '.join(last.biggest)}" if last.biggest else ""
    return f"{how} {where}{biggest}; `xlarun memory {run_id}/{last.label.split()[0]}` shows its memory"
