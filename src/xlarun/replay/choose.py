"""Pick the most faithful file to replay among one module's dump files.

Order: a snapshot (real arguments and a recorded result) > an HloProto (constants always whole)
> HLO text dumped with ``--xla_dump_large_constants`` > plain text, whose large constants are
``{...}`` and get filled with garbage. Within each kind, the ``before_optimizations`` dump comes
first (it recompiles as is), then the optimized one; per-pass dumps are never picked. The
``before_optimizations`` file is also returned as the fallback for an optimized choice. A module
partitioned over N devices is the exception: its optimized dump (what ran on the N devices) is
picked, and replayed on them against the ``before_optimizations`` one (:mod:`.partitioned`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlarun.errors import InputError
from xlarun.hlo.names import snapshot_file
from xlarun.replay.partitioned import partitioning_of_file
from xlarun.replay.sources import ELIDED_CONSTANT, ELIDED_WARNING, read_dump_bytes

_BEFORE = re.compile(r"\.before_optimizations\.(txt|hlo\.pb|hlo\.pb\.gz)$")
_AFTER = re.compile(r"after_optimizations\.(txt|hlo\.pb|hlo\.pb\.gz)$")
_PER_PASS = re.compile(r"\.\d{4}\.[\w\-.]*\.after_[\w\-.]+\.before_")


@dataclass
class ReplayChoice:
    """The file to replay, and what the choice means for the replay."""

    path: str
    input_kind: str  # snapshot | proto | text-large-constants | text-elided-constants
    #: The module's best before_optimizations dump (also when it is ``path``: a replay of another file the user
    #: names, such as the optimized module, falls back on it); ``None`` when the module has none.
    unoptimized: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: Every replayable candidate, best first, as (path, input_kind).
    candidates: list[tuple[str, str]] = field(default_factory=list)
    #: A partitioned module's snapshot (its global arguments, as ``xlarun.record_arguments`` records them) that the
    #: replay of its optimized dump on the N devices takes its arguments and expected result from.
    arguments_from: str | None = None


def _candidate(path: str, dump_name: Any, read: Callable[[str], bytes]) -> tuple[int, str] | None:
    """(rank, input kind) for a replayable file; None for anything else."""
    name = Path(path).name
    kind = getattr(dump_name, "kind", None)
    snapshot = snapshot_file(name)
    if snapshot == "unoptimized":  # another proto (arguments per partition), which replay does not read
        return None
    if snapshot == "snapshot":
        return 0, "snapshot"
    if kind == "pass" or _PER_PASS.search(name):
        return None
    optimized = bool(_AFTER.search(name))
    if not optimized and not _BEFORE.search(name):
        return None
    offset = 3 if optimized else 0
    if name.endswith((".hlo.pb", ".hlo.pb.gz")):
        return 1 + offset, "proto"
    text = read_dump_bytes(Path(path), read(path)).decode("utf-8", errors="replace")
    if ELIDED_CONSTANT.search(text):
        return 3 + offset, "text-elided-constants"
    return 2 + offset, "text-large-constants"


def choose_replay_input(files: Iterable[tuple[str | Path, Any]], read: Callable[[str], bytes] | None = None) -> ReplayChoice:
    """Choose among ``(path, DumpName-like)`` pairs of one module; ``read`` gets a file's bytes.

    The second item may carry ``kind`` (``"snapshot"``...) and is otherwise ignored: file names
    decide. ``read`` defaults to reading the path from disk (text files are read to look for
    elided constants). Warns loudly when the best there is is text with elided constants.
    """
    read = read or (lambda p: Path(p).read_bytes())
    ranked = []
    for path, dump_name in files:
        path = str(path)
        found = _candidate(path, dump_name, read)
        if found is not None:
            ranked.append((found[0], path, found[1]))
    if not ranked:
        raise InputError(
            "the module has no replayable dump (no snapshot, .hlo.pb, or before/after_optimizations .txt)",
            "capture with --xla_dump_hlo_as_proto or --xla_dump_hlo_snapshots",
        )
    ranked.sort()
    _, path, kind = ranked[0]
    unoptimized = next((p for rank, p, _ in ranked if 1 <= rank <= 3), None)
    optimized = next(((p, k) for rank, p, k in ranked if rank >= 4), None)
    arguments_from = None
    if (
        optimized
        and unoptimized
        and (path == unoptimized or kind == "snapshot")
        and partitioning_of_file(unoptimized, read(unoptimized)).devices > 1
    ):
        # a partitioned module: what ran is the optimized module on its N devices, checked against this one (on the
        # arguments of a snapshot xlarun.record_arguments wrote, when there is one)
        arguments_from = path if kind == "snapshot" else None
        path, kind = optimized
    choice = ReplayChoice(path, kind, unoptimized, candidates=[(p, k) for _, p, k in ranked], arguments_from=arguments_from)
    snapshots = [p for rank, p, _ in ranked if rank == 0]
    if len(snapshots) > 1:
        choice.warnings.append(f"{len(snapshots)} snapshots (one per execution); replaying {Path(path).name}")
    if kind == "text-elided-constants":
        choice.warnings.append(ELIDED_WARNING.format(name=Path(path).name))
    return choice
