"""How a dumped module is compiled again on the built-in engine: as it is, or rewritten first when it is optimized.

The rules both compile paths share (one device, :mod:`.compiled`; N devices, :mod:`.placed`), and the reference
compiles (:mod:`.reference`) use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.deoptimize import CannotDeoptimize, deoptimize_hlo_text
from xlarun.replay.limits import check_text_nesting
from xlarun.replay.sources import ReplaySource, module_opcodes

T = TypeVar("T")
Log = Callable[[str], None]


@dataclass
class Compiled:
    """A module compiled for one device."""

    source: ReplaySource  # the module that was compiled (the fallback, if it came to that)
    module_proto: bytes
    stablehlo: bytes
    compiled: pjrt.CompiledModule
    route: str | None

    @cached_property
    def opcodes(self) -> dict[str, str]:
        """The opcodes the module holds, each with one instruction that has it."""
        return module_opcodes(self.module_proto)


def optimized_first(
    source: ReplaySource, stage: Log, optimized_failure: str | None, plain: Callable[[], T], optimized: Callable[[], T]
) -> tuple[T | None, str | None]:
    """The one rule of both engines: a source that is not optimized is compiled as it is (``plain``); an optimized
    one through ``optimized``, unless that failed before (``optimized_failure``: it killed the last child).
    (what was built, None), or (None, why the optimized module cannot be) for the caller's fallback."""
    if not source.optimized:
        stage("compile")
        return plain(), None
    try:
        if optimized_failure:
            raise EngineError(optimized_failure)
        stage("compile-optimized")
        return optimized(), None
    except EngineError as exc:
        return None, exc.message


def module_proto(source: ReplaySource) -> bytes:
    if source.module_proto is not None:
        return source.module_proto
    assert source.text is not None  # a source holds its text, its proto, or both
    check_text_nesting(source.text.encode("utf-8", errors="replace"), source.path.name)
    return pjrt.text_to_module_proto(source.text)


def compile_plain(source: ReplaySource, platform: pjrt.Platform) -> Compiled:
    proto = module_proto(source)
    stablehlo = pjrt.module_proto_to_stablehlo(proto)
    pjrt.prepare_custom_calls(proto)
    return Compiled(source, proto, stablehlo, platform.compile(stablehlo), None)


def compile_optimized(source: ReplaySource, platform: pjrt.Platform, log: Log) -> Compiled:
    if source.text is not None:
        check_text_nesting(source.text.encode("utf-8", errors="replace"), source.path.name)
        text = source.text
    else:
        assert source.module_proto is not None  # a source holds its text, its proto, or both
        text = pjrt.module_proto_to_text(source.module_proto)
    try:
        rewritten = deoptimize_hlo_text(text)
    except CannotDeoptimize as exc:
        raise EngineError(exc.message) from exc
    proto = _parse_rewrite(text, rewritten.text)
    stablehlo = pjrt.module_proto_to_stablehlo(proto)
    route = "deoptimized" + (f": {', '.join(rewritten.changes)}" if rewritten.changes else "")
    log(f"optimized module {source.path.name} rewritten for recompilation ({route})")
    pjrt.prepare_custom_calls(proto)
    return Compiled(source, proto, stablehlo, platform.compile(stablehlo), route)


def _parse_rewrite(original: str, rewritten: str) -> bytes:
    """The rewritten module's proto; XLA refusing the rewrite of a module it reads is xlarun's rewrite failing (an
    EngineError, so the unoptimized dump is tried), not the user's input."""
    try:
        return pjrt.text_to_module_proto(rewritten)
    except InputError as exc:
        pjrt.text_to_module_proto(original)  # raises the user's own input error when the module never parsed
        raise EngineError(f"xlarun's rewrite of the optimized module does not parse ({exc.message})") from exc
