"""Which ops moved between two jaxlib releases (``xlarun replay REF --jaxlib A,B --profile``).

Each release's replay times its ops (:mod:`.op_profile`); here one release's ops are paired with the first
release's by name (XLA names a module's fusions the same way from release to release while it makes the same
fusions; one it makes differently is on one side only) and ranked by how much their time per execution changed.
An op's time per execution is the mean of the executions after the module's first one (which carries one-time
set-up), so a comparison means something from ``-n 3`` on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OpMove:
    """One op's time per execution on the first release (``a_ns``) and on another (``b_ns``); None: not there."""

    op: str
    a_ns: float | None
    b_ns: float | None

    @property
    def ratio(self) -> float | None:
        return self.b_ns / self.a_ns if self.a_ns and self.b_ns is not None else None

    @property
    def change_ns(self) -> float:
        return (self.b_ns or 0.0) - (self.a_ns or 0.0)

    def to_dict(self) -> dict:
        return {"op": self.op, "a_ns": self.a_ns, "b_ns": self.b_ns, "ratio": self.ratio, "change_ns": self.change_ns}


def op_each_ns(profile: dict | None) -> dict[str, float] | None:
    """Each op of a replay's profile (``ReplayResult.profile``) -> its time per execution after the first, in ns."""
    if not profile:
        return None
    return {op["op"]: op["time"]["steady_mean_ns"] for op in profile["ops"]}


def moved_ops(first: dict[str, float], other: dict[str, float], top: int = 10) -> list[OpMove]:
    """The ``top`` ops whose time per execution changed most between ``first`` and ``other`` (0: all): the ops on
    both sides first, most change first, then those on one side only (by their time)."""
    moves = [OpMove(op, first.get(op), other.get(op)) for op in sorted(set(first) | set(other))]
    moves.sort(key=lambda move: (move.a_ns is None or move.b_ns is None, -abs(move.change_ns), move.op))
    return moves[:top] if top else moves
