"""Whether this process has the memory to read a module and build its graph: a module too big for it is refused
before it is parsed, with what it needs and what there is, never a chain of MemoryErrors half-way through."""

from __future__ import annotations

import resource
from pathlib import Path

from xlarun.errors import EnvironmentProblem

#: Peak memory of parsing a module and building its graph, per byte of its HLO: measured 430 MB for a 5.7 MB text
#: module of 100,000 instructions (65 per byte less the interpreter's own), rounded up: a process maps more than it touches.
BYTES_PER_HLO_BYTE = 70
#: Below this nothing is asked of the machine: a module of this size always fits.
ALWAYS_FITS = 1 << 20


def refuse_too_big_for_memory(size: int, name: str) -> None:
    """Raise :class:`EnvironmentProblem` (exit 3) when ``size`` bytes of HLO need more memory to draw than this
    process may have (its address-space limit, its cgroup's, the machine's available memory)."""
    if size < ALWAYS_FITS:
        return
    need = size * BYTES_PER_HLO_BYTE
    free, where = memory_left()
    if free is not None and need > free:
        raise EnvironmentProblem(
            f"{name} is too big to draw with the memory this process has: about {_mib(need)} needed "
            f"({BYTES_PER_HLO_BYTE} bytes per byte of its {_mib(size)} of HLO), {_mib(free)} left ({where})",
            "raise that limit or draw it on a machine with more memory; `xlarun show` and `xlarun cat` read it without drawing",
        )


def memory_left() -> tuple[int | None, str]:
    """The fewest bytes this process may still take, and which limit that is (None where none can be read)."""
    found: list[tuple[int, str]] = []
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        found.append((soft - _own_size("VmSize"), "the address-space limit, ulimit -v"))
    available = _meminfo("MemAvailable")
    if available is not None:
        found.append((available, "the machine's available memory"))
    if (cgroup := _cgroup_room()) is not None:
        found.append((cgroup, "this process's cgroup memory limit"))
    if not found:
        return None, "no limit known"
    free, where = min(found)
    return max(free, 0), where


def _own_size(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """memory.max less memory.current of this process's cgroup (v2), or None."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        folder = Path("/sys/fs/cgroup") / line.split("::", 1)[1].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((folder / "memory.current").read_text())
    except (OSError, ValueError, IndexError):
        return None


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB"
