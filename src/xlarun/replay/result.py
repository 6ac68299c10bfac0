"""What a replay reports: :class:`ReplayResult`, the same for every engine, and JSON-ready."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from xlarun.errors import EngineError, ExitCode, ReplayMismatch

#: ``match``: every comparison passed; ``mismatch``: one failed; ``ran``: nothing to compare
#: against; ``engine-error``: the module could not be compiled or run.
VERDICTS = ("match", "mismatch", "ran", "engine-error")
#: Where a replay's module came from, most faithful first.
INPUT_KINDS = ("snapshot", "proto", "text-large-constants", "text-elided-constants")


@dataclass
class OutputSummary:
    """One (flattened) output of the replayed module."""

    index: int
    type: str  # f32[3,5]
    literal: str | None = None  # the values as text, when print_literals was asked


@dataclass
class ReplayResult:
    """The outcome of one replay."""

    engine: str
    platform: str
    source: str  # the file replayed (as given)
    input_kind: str  # one of INPUT_KINDS
    module_name: str | None = None
    #: ``fake`` or ``snapshot``: where the argument values came from.
    arguments: str = "fake"
    #: Devices the module ran on: more than 1 for a partitioned module, replayed on its N devices.
    devices: int = 1
    #: How a partitioned module spreads over its devices (``8 partitions``, ``2 partitions x 2 replicas``).
    partitioning: str | None = None
    #: The file actually compiled when the given (optimized) one could not be: its unoptimized dump.
    fell_back_to: str | None = None
    #: How an optimized module was made compilable (``deoptimized: 3 fusions, 2 bitcasts``).
    route: str | None = None
    compile_s: float | None = None
    run_times_s: list[float] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    verdict: str = "ran"
    #: What the outputs were compared with: ``snapshot result``, ``platform cpu``.
    compared_with: list[str] = field(default_factory=list)
    #: Structural problems and the first mismatching elements, one line each.
    mismatches: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Outputs holding NaN or Inf, one line each (``output 0 f32[4,4]: 16 NaN of 16``); said beside any verdict.
    nonfinite_outputs: list[str] = field(default_factory=list)
    #: Instructions that draw random numbers (``rng.3 (rng)``): they differ from compile to compile.
    random_instructions: list[str] = field(default_factory=list)
    outputs: list[OutputSummary] = field(default_factory=list)
    #: The runner's argv, for the run_hlo_module and hlo_runner_main drivers.
    command: list[str] | None = None
    #: Why the engine failed, for verdict ``engine-error``.
    error: str | None = None
    #: For ``engine-error``: the step it failed in (``compile``, ``run``...) and, when the engine's process
    #: died, how (``SIGSEGV``, ``XLA CHECK failure``, ``timeout``, ``out of memory``).
    failed_step: str | None = None
    crash: str | None = None
    #: Everything the engine printed (runners) or logged (built-in engine).
    log: str = ""
    #: ``--profile``: each op's time over the iterations (:func:`.op_profile.op_profile_dict`), built-in engine.
    profile: dict | None = None

    @property
    def min_s(self) -> float | None:
        return min(self.run_times_s) if self.run_times_s else None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.run_times_s) if self.run_times_s else None

    @property
    def exit_code(self) -> ExitCode:
        """0 match or ran, 1 mismatch, 3 engine failure (the CLI's exit codes)."""
        return {"mismatch": ExitCode.FAILED, "engine-error": ExitCode.ENVIRONMENT}.get(self.verdict, ExitCode.OK)

    def raise_for_verdict(self) -> ReplayResult:
        """Raise ReplayMismatch or EngineError unless the replay matched or just ran."""
        if self.verdict == "mismatch":
            detail = "; ".join(self.mismatches[:3])
            raise ReplayMismatch(f"replay of {self.source} miscompared: {detail}")
        if self.verdict == "engine-error":
            raise EngineError(f"replay of {self.source} failed: {self.error}")
        return self

    def to_dict(self) -> dict:
        """A JSON-serializable dict (infinite errors become the string ``"inf"``)."""
        data = asdict(self)
        data["min_s"] = self.min_s
        data["median_s"] = self.median_s
        data["exit_code"] = int(self.exit_code)
        for key in ("max_abs_error", "max_rel_error"):
            if data[key] is not None and math.isinf(data[key]):
                data[key] = "inf"
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ReplayResult:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["outputs"] = [OutputSummary(**o) for o in values.get("outputs", [])]
        for key in ("max_abs_error", "max_rel_error"):
            if values.get(key) == "inf":
                values[key] = math.inf
        return cls(**values)


@dataclass
class Converted:
    """What ``xlarun convert`` made (:func:`.convert.convert_hlo`)."""

    data: bytes  # UTF-8 text, or a serialized HloModuleProto
    module_name: str | None
    warnings: list[str] = field(default_factory=list)
