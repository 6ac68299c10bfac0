"""What a replay-mode bisection is asked to do: :class:`BisectOptions`, and :func:`bisect_options`, which builds
them from what a user gives (``xlarun bisect``'s options and ``Module.bisect``'s keywords alike)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from xlarun.declared_options import BISECT_OPTIONS, RECOMPILE_MODES, REFERENCES, signature_of, take

__all__ = ["RECOMPILE_MODES", "REFERENCES", "BisectOptions", "bisect_options"]
_DECLARED = {d.name: d for d in BISECT_OPTIONS}
_DEFAULT = {d.name: d.default for d in BISECT_OPTIONS}  # the declared defaults, which the fields' are


@dataclass
class BisectOptions:
    """What a replay-mode bisection is asked to do."""

    #: ``before``: the before_optimizations module's outputs; ``snapshot``: the snapshot's recorded result.
    reference: str = _DEFAULT["reference"]
    #: Run the reference on this platform instead (the steps run on ``platform``).
    reference_platform: str | None = _DEFAULT["reference_platform"]
    platform: str = _DEFAULT["platform"]
    #: Stricter than replay's 1e-3: a pass that moves a sum by 1e-4 is what a bisection looks for.
    abs_tolerance: float = _DEFAULT["tolerance"]
    rel_tolerance: float = _DEFAULT["tolerance"]
    #: Replay every step instead of a binary search (which assumes that once past the tolerance, later steps stay past it).
    linear: bool = _DEFAULT["linear"]
    recompile: str = _DEFAULT["recompile"]
    #: ``auto`` (the snapshot's arguments when there is one), ``snapshot`` or ``fake``.
    inputs: str = _DEFAULT["inputs"]
    seed: int = _DEFAULT["seed"]
    extra_disabled: list[str] = field(default_factory=list)
    #: Also find the culprit step's first instruction whose value moves (see :mod:`xlarun.bisect.first_move`).
    ops: bool = _DEFAULT["ops"]

    def validate(self) -> BisectOptions:
        """Raise InputError for a value the declared options refuse; return self."""
        named = {f.name for f in fields(self)}
        for declared in BISECT_OPTIONS:  # each option's own check, where the field has the option's name
            if declared.name in named:
                declared.check(getattr(self, declared.name))
        _DECLARED["tolerance"].check(self.abs_tolerance)
        _DECLARED["tolerance"].check(self.rel_tolerance)
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def bisect_options(**given: Any) -> BisectOptions:
    """Checked options from ``xlarun bisect``'s options or ``Module.bisect``'s keywords, as
    :data:`~xlarun.declared_options.BISECT_OPTIONS` declares them; one ``tolerance`` bounds both the absolute
    and the relative error (either within it matches)."""
    o = take(BISECT_OPTIONS, given, "bisect")
    return BisectOptions(
        reference=o["reference"],
        reference_platform=o["reference_platform"],
        platform=o["platform"],
        abs_tolerance=o["tolerance"],
        rel_tolerance=o["tolerance"],
        linear=o["linear"],
        recompile=o["recompile"],
        inputs=o["inputs"],
        seed=o["seed"],
        ops=o["ops"],
    ).validate()


bisect_options.__signature__ = signature_of(BISECT_OPTIONS)  # type: ignore[attr-defined]
