"""One run of many processes: which modules every process compiled alike, and which it did not (desync).

Processes of one SPMD job run the same program, so each compiles the same HLO for the same step: a module with
the same fingerprint of its before_optimizations HLO. XLA numbers modules per process, in the order each process
compiles them, so one extra jit on one process (a process-0-only eval or logging step) shifts every later
number: modules are therefore paired across processes **by fingerprint** (the k-th compile of one HLO on each
process), and only where fingerprints differ by name and order (the same function compiled as other HLO). Each
paired module is then one of:

- **alike**: every process compiled the same HLO;
- **desync**: its processes compiled different HLO for the same function (other shapes, other constants): the
  processes no longer run one program (they hang or compute garbage in a collective);
- **only on some processes**: the others compiled nothing like it. Without collectives that is a step of the
  process's own (logging, eval); with collectives after optimization it counts as a desync too, since the others
  never join them (a hang).

``xlarun modules`` says it under its table, ``xlarun show`` for one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xlarun.hlo.process_dirs import xla_module_id

#: Opcodes that exchange data between devices (and so, in a job of many processes, between processes).
COLLECTIVES = frozenset(
    {
        "all-reduce",
        "all-reduce-start",
        "all-gather",
        "all-gather-start",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
        "collective-permute-start",
        "collective-broadcast",
        "ragged-all-to-all",
    }
)


@dataclass
class ProcessCompile:
    """One process's compile of a module: its id in the run, its fingerprint, its signature and collectives."""

    process: int
    module_id: int
    fingerprint: str | None
    name: str | None = None
    signature: str | None = None
    collectives: int = 0

    @property
    def xla_id(self) -> int:
        """XLA's number of the module in its own process's dump."""
        return xla_module_id(self.module_id, self.process)


@dataclass
class CrossProcessModule:
    """One module across the processes of a run: each process's compile of it, and the processes without one."""

    name: str | None
    xla_module_id: int  # the first compile's XLA number (processes may number it differently)
    compiles: list[ProcessCompile]
    missing: list[int] = field(default_factory=list)  # processes that compiled nothing paired with it

    @property
    def fingerprints(self) -> list[str]:
        """The distinct fingerprints its processes compiled (unknown ones left out)."""
        return sorted({c.fingerprint for c in self.compiles if c.fingerprint})

    @property
    def other_hlo(self) -> bool:
        """Its processes compiled different HLO for it."""
        return len(self.fingerprints) > 1

    @property
    def only_on(self) -> list[int]:
        """The processes that compiled it, when some did not (else empty)."""
        return [c.process for c in self.compiles] if self.missing else []

    @property
    def collectives(self) -> int:
        return max((c.collectives for c in self.compiles), default=0)

    @property
    def desync(self) -> bool:
        """Other HLO on other processes, or collectives that only some processes run."""
        return self.other_hlo or (bool(self.missing) and self.collectives > 0)

    @property
    def label(self) -> str:
        return f"module_{self.xla_module_id:04d}" + (f".{self.name}" if self.name else "")

    def _part(self, c: ProcessCompile) -> str:
        number = "" if c.xla_id == self.xla_module_id else f" module {c.module_id}"
        return f"process {c.process}{number} {(c.fingerprint or 'unknown')[:8]}"

    def line(self) -> str:
        """What differs, in words: ``module_0005.jit_step: other HLO on other processes: process 0 a1b2c3d4, ...``."""
        if self.missing and not self.other_hlo:
            return self._only_on_line()
        words = f"{self.label}: other HLO on other processes: {', '.join(self._part(c) for c in self.compiles)}"
        if self.missing:
            words += f", not compiled by process {', '.join(map(str, self.missing))}"
        signatures = {c.signature for c in self.compiles}
        if len(signatures) > 1:
            words += "; other shapes: " + ", ".join(f"process {c.process} {c.signature}" for c in self.compiles)
        differing = [c for c in self.compiles if c.fingerprint != self.compiles[0].fingerprint]
        if differing:
            words += f" (`xlarun diff {self.compiles[0].module_id} {differing[0].module_id}` shows how)"
        return words

    def _only_on_line(self) -> str:
        ids = ", ".join(str(c.module_id) for c in self.compiles)
        where = f"only on process {', '.join(map(str, self.only_on))} (module {ids})"
        if self.collectives:
            return (
                f"{self.label}: {where}, with {self.collectives} collective(s) that process "
                f"{', '.join(map(str, self.missing))} never join(s): a hang"
            )
        return f"{self.label}: {where}; no collectives: a step of its own (logging, eval), not a desync"


@dataclass
class ProcessReport:
    """What the processes of one run compiled, module by module."""

    processes: list[int]
    modules: list[CrossProcessModule]

    @property
    def identical(self) -> list[CrossProcessModule]:
        """Modules every process compiled, as the same HLO."""
        return [m for m in self.modules if not m.desync and not m.missing]

    @property
    def desync(self) -> list[CrossProcessModule]:
        return [m for m in self.modules if m.desync]

    @property
    def only_some(self) -> list[CrossProcessModule]:
        """Modules some processes compiled and the others did not, without collectives (not a desync)."""
        return [m for m in self.modules if m.missing and not m.desync]

    def summary(self) -> str:
        """One line: how many processes, how many modules they compiled alike, on some only, in desync."""
        text = (
            f"{len(self.processes)} processes: {len(self.identical)} module(s) compiled alike by every process (same fingerprint)"
        )
        if self.only_some:
            text += f"; {len(self.only_some)} on some processes only (no collectives)"
        return text + (f"; DESYNC in {len(self.desync)}:" if self.desync else "; no desync")

    def to_json(self) -> dict:
        def entry(m: CrossProcessModule) -> dict:
            return {
                "name": m.name,
                "xla_module_id": m.xla_module_id,
                "module_ids": {str(c.process): c.module_id for c in m.compiles},
                "fingerprints": {str(c.process): c.fingerprint for c in m.compiles},
                "signatures": {str(c.process): c.signature for c in m.compiles},
                "collectives": m.collectives,
                "missing_on": m.missing,
                "line": m.line(),
            }

        return {
            "processes": self.processes,
            "identical": [entry(m) for m in self.identical],
            "only_on_some": [entry(m) for m in self.only_some],
            "desync": [entry(m) for m in self.desync],
        }


def _compile_of(m: Any) -> ProcessCompile:
    opcodes = getattr(m, "opcodes_after", None) or getattr(m, "opcodes_before", None) or {}
    collectives = sum(n for op, n in opcodes.items() if op in COLLECTIVES)
    return ProcessCompile(m.process or 0, m.module_id, m.fingerprint, m.name, m.entry_signature, collectives)


def _by_fingerprint(compiles: list[ProcessCompile]) -> list[list[ProcessCompile]]:
    """Groups of the k-th compile of one fingerprint on each process; a compile of unknown fingerprint alone."""
    groups: list[list[ProcessCompile]] = []
    seen: dict[tuple[int, str], int] = {}  # (process, fingerprint) -> how many so far
    by_key: dict[tuple[str, int], list[ProcessCompile]] = {}
    for c in compiles:  # in each process's compile order
        if c.fingerprint is None:
            groups.append([c])
            continue
        k = seen.get((c.process, c.fingerprint), 0)
        seen[(c.process, c.fingerprint)] = k + 1
        group = by_key.get((c.fingerprint, k))
        if group is None:
            group = by_key[(c.fingerprint, k)] = []
            groups.append(group)
        group.append(c)
    return groups


def _merge_by_name(groups: list[list[ProcessCompile]], count: int) -> list[list[ProcessCompile]]:
    """Groups that not every process compiled, merged in order with later ones of the same name on other processes:
    the same function compiled as other HLO."""
    merged: list[list[ProcessCompile]] = []
    taken = [False] * len(groups)
    for i, group in enumerate(groups):
        if taken[i]:
            continue
        group = list(group)
        for j in range(i + 1, len(groups)):
            if len(group) >= count:
                break
            other = groups[j]
            own = {c.process for c in group}
            if taken[j] or other[0].name != group[0].name or own & {c.process for c in other} or len(other) >= count:
                continue
            group += other
            taken[j] = True
        merged.append(sorted(group, key=lambda c: c.process))
    return merged


def compare_processes(modules: list) -> ProcessReport | None:
    """Pair a run's modules (each with ``process``, ``module_id``, ``name``, ``fingerprint``, ``entry_signature``)
    across its processes: by fingerprint, then by name and order; None when fewer than two processes compiled
    anything (nothing to compare: one process, or a bundle of one module)."""
    processes = sorted({m.process for m in modules if m.process is not None})
    if len(processes) < 2:
        return None
    # each process's compiles in its own order, the processes interleaved: a group's order is its first compile's
    compiles = sorted((_compile_of(m) for m in modules), key=lambda c: (c.xla_id, c.process))
    out = []
    for group in _merge_by_name(_by_fingerprint(compiles), len(processes)):
        seen = {c.process for c in group}
        first = min(group, key=lambda c: (c.xla_id, c.process))
        out.append(CrossProcessModule(first.name, first.xla_id, group, [p for p in processes if p not in seen]))
    out.sort(key=lambda m: (m.xla_module_id, m.compiles[0].process))
    return ProcessReport(processes, out)


def module_across_processes(report: ProcessReport | None, module_id: int) -> CrossProcessModule | None:
    """The cross-process group holding the run's module ``module_id``, None in a run of one process."""
    if report is None:
        return None
    return next((m for m in report.modules if any(c.module_id == module_id for c in m.compiles)), None)
