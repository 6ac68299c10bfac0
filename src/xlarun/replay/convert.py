"""``xlarun convert``: HLO text <-> HloModuleProto, the job of ``hlo-opt --emit-proto``, with jaxlib.

Any replayable dump is accepted: text, HloProto (``.hlo.pb``), HloModuleProto, or an
HloSnapshot (its module is taken). Text is printed with large constants in full, so
``convert --to text`` of a proto gives text that replays faithfully; converting text whose
constants were elided (``{...}``) bakes the garbage into the proto, and says so.

XLA's parser and printer run in a child process (:class:`.worker.ReplayWorker`) unless
``in_process``: a module that crashes them is an EngineError (exit 3), and text nested deeper than
:data:`.limits.MAX_TEXT_NESTING` is refused before XLA sees it (InputError, exit 2).
"""

from __future__ import annotations

from pathlib import Path

from xlarun.errors import InputError
from xlarun.replay import pjrt
from xlarun.replay.limits import check_text_nesting
from xlarun.replay.result import Converted
from xlarun.replay.sources import ELIDED_WARNING, load_source

__all__ = ["FORMATS", "Converted", "convert_hlo"]

FORMATS = ("text", "proto")


def convert_hlo(
    path: str | Path, to: str, data: bytes | None = None, *, in_process: bool = False, timeout_s: float | None = None
) -> Converted:
    """Convert one dump file to HLO text (``to="text"``) or a serialized HloModuleProto (``"proto"``)."""
    if to not in FORMATS:
        raise InputError(f"cannot convert to {to!r}", f"use one of: {', '.join(FORMATS)}")
    if not in_process:
        from xlarun.replay.worker import ReplayWorker

        with ReplayWorker() as worker:
            return worker.convert(path, to, data, timeout_s)
    source = load_source(path, data)
    if source.text is not None:
        check_text_nesting(source.text.encode("utf-8", errors="replace"), source.path.name)
    warnings = list(source.warnings)
    if source.has_elided_constants:
        warnings.append(ELIDED_WARNING.format(name=source.path.name))
    if source.module_proto is not None:
        proto = source.module_proto
    else:
        assert source.text is not None  # a source holds its text, its proto, or both
        proto = pjrt.text_to_module_proto(source.text)
    out = pjrt.module_proto_to_text(proto).encode("utf-8") if to == "text" else proto
    return Converted(out, source.module_name, warnings)
