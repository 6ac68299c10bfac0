"""One run of many processes: which modules every process compiled alike, and which it did not (desync).

Processes of one SPMD job run the same program, so each compiles the same HLO for the same step: the same
module (XLA's id and name, as each process numbers its own) with the same fingerprint of its
before_optimizations HLO. A module whose processes compiled different HLO, or that some processes never
compiled, is a **desync**: the processes no longer run one program (they hang or compute garbage in a
collective). ``xlarun modules`` says it under its table, ``xlarun show`` for one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xlarun.hlo.process_dirs import xla_module_id


@dataclass
class ProcessCompile:
    """One process's compile of a module: its id in the run and its fingerprint."""

    process: int
    module_id: int
    fingerprint: str | None


@dataclass
class CrossProcessModule:
    """One module (XLA's id and name) across the processes of a run."""

    name: str | None
    xla_module_id: int
    compiles: list[ProcessCompile]
    missing: list[int] = field(default_factory=list)  # processes that did not compile it

    @property
    def fingerprints(self) -> list[str]:
        """The distinct fingerprints its processes compiled (unknown ones left out)."""
        return sorted({c.fingerprint for c in self.compiles if c.fingerprint})

    @property
    def desync(self) -> bool:
        """Its processes compiled different HLO, or some did not compile it at all."""
        return len(self.fingerprints) > 1 or bool(self.missing)

    @property
    def label(self) -> str:
        return f"module_{self.xla_module_id:04d}" + (f".{self.name}" if self.name else "")

    def line(self) -> str:
        """What differs, in words: ``module_0005.jit_step: process 0 a1b2c3d4, process 1 e5f6a7b8 (xlarun diff ...)``."""
        parts = [f"process {c.process} {(c.fingerprint or 'unknown')[:8]}" for c in self.compiles]
        if self.missing:
            parts.append(f"not compiled by process {', '.join(map(str, self.missing))}")
        words = f"{self.label}: other HLO on other processes: {', '.join(parts)}"
        differing = [c for c in self.compiles if c.fingerprint != self.compiles[0].fingerprint]
        if differing:
            words += f" (`xlarun diff {self.compiles[0].module_id} {differing[0].module_id}` shows how)"
        return words


@dataclass
class ProcessReport:
    """What the processes of one run compiled, module by module."""

    processes: list[int]
    modules: list[CrossProcessModule]

    @property
    def identical(self) -> list[CrossProcessModule]:
        return [m for m in self.modules if not m.desync]

    @property
    def desync(self) -> list[CrossProcessModule]:
        return [m for m in self.modules if m.desync]

    def summary(self) -> str:
        """One line: how many processes, how many modules they compiled alike, how many in desync."""
        text = (
            f"{len(self.processes)} processes: {len(self.identical)} module(s) compiled alike by every process (same fingerprint)"
        )
        return text + (f"; DESYNC in {len(self.desync)}:" if self.desync else "; no desync")

    def to_json(self) -> dict:
        def entry(m: CrossProcessModule) -> dict:
            return {
                "name": m.name,
                "xla_module_id": m.xla_module_id,
                "module_ids": {str(c.process): c.module_id for c in m.compiles},
                "fingerprints": {str(c.process): c.fingerprint for c in m.compiles},
                "missing_on": m.missing,
            }

        return {
            "processes": self.processes,
            "identical": [entry(m) for m in self.identical],
            "desync": [entry(m) for m in self.desync],
        }


def compare_processes(modules: list) -> ProcessReport | None:
    """Group a run's modules (each with ``process``, ``module_id``, ``name``, ``fingerprint``) across its processes;
    None when fewer than two processes compiled anything (nothing to compare: one process, or a bundle of one module)."""
    processes = sorted({m.process for m in modules if m.process is not None})
    if len(processes) < 2:
        return None
    groups: dict[tuple[int, str | None], list[ProcessCompile]] = {}
    for m in sorted(modules, key=lambda m: (m.process or 0, m.module_id)):
        key = (xla_module_id(m.module_id, m.process), m.name)
        groups.setdefault(key, []).append(ProcessCompile(m.process or 0, m.module_id, m.fingerprint))
    out = []
    for (xla_id, name), compiles in sorted(groups.items(), key=lambda kv: kv[0][0]):
        seen = {c.process for c in compiles}
        out.append(CrossProcessModule(name, xla_id, compiles, [p for p in processes if p not in seen]))
    return ProcessReport(processes, out)


def module_across_processes(report: ProcessReport | None, module_id: int) -> CrossProcessModule | None:
    """The cross-process group holding the run's module ``module_id``, None in a run of one process."""
    if report is None:
        return None
    return next((m for m in report.modules if any(c.module_id == module_id for c in m.compiles)), None)
