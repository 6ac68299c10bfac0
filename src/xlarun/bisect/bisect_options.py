"""What a replay-mode bisection is asked to do: :class:`BisectOptions`, and :func:`bisect_options`, which builds
them from what a user gives (``xlarun bisect``'s options and ``Module.bisect``'s keywords alike)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from xlarun.errors import InputError
from xlarun.replay.options import INPUT_MODES

#: How each step is recompiled: ``timeline`` disables every pass the timeline names, ``all`` every
#: HLO pass (``xla_disable_all_hlo_passes``), ``full`` none (the pipeline applies its passes again).
RECOMPILE_MODES = ("timeline", "all", "full")
REFERENCES = ("before", "snapshot")


@dataclass
class BisectOptions:
    """What a replay-mode bisection is asked to do."""

    #: ``before``: the before_optimizations module's outputs; ``snapshot``: the snapshot's recorded result.
    reference: str = "before"
    #: Run the reference on this platform instead (the steps run on ``platform``).
    reference_platform: str | None = None
    platform: str = "cpu"
    #: Stricter than replay's 1e-3: a pass that moves a sum by 1e-4 is what a bisection looks for.
    abs_tolerance: float = 1e-5
    rel_tolerance: float = 1e-5
    #: Replay every step instead of a binary search (which assumes that once past the tolerance, later steps stay past it).
    linear: bool = False
    recompile: str = "timeline"
    #: ``auto`` (the snapshot's arguments when there is one), ``snapshot`` or ``fake``.
    inputs: str = "auto"
    seed: int = 0
    extra_disabled: list[str] = field(default_factory=list)
    #: Also find the culprit step's first instruction whose value moves (see :mod:`xlarun.bisect.first_move`).
    ops: bool = True

    def validate(self) -> BisectOptions:
        for name, allowed in (
            ("reference", REFERENCES),
            ("recompile", RECOMPILE_MODES),
            ("inputs", INPUT_MODES),
        ):
            if getattr(self, name) not in allowed:
                raise InputError(f"unknown {name} {getattr(self, name)!r}", f"use one of: {', '.join(allowed)}")
        if self.abs_tolerance < 0 or self.rel_tolerance < 0:
            raise InputError("tolerances cannot be negative")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def bisect_options(
    *,
    tolerance: float = 1e-5,
    reference: str = "before",
    reference_platform: str | None = None,
    platform: str = "cpu",
    linear: bool = False,
    recompile: str = "timeline",
    inputs: str = "auto",
    seed: int = 0,
) -> BisectOptions:
    """Checked options; one ``tolerance`` bounds both the absolute and the relative error (either within it matches)."""
    return BisectOptions(
        reference=reference,
        reference_platform=reference_platform,
        platform=platform,
        abs_tolerance=tolerance,
        rel_tolerance=tolerance,
        linear=linear,
        recompile=recompile,
        inputs=inputs,
        seed=seed,
    ).validate()
