"""The built-in replay engine: HLO -> StableHLO -> compile -> execute on jaxlib's PJRT.

Inputs are HLO text, HloProto, HloModuleProto or HloSnapshot (see :mod:`.sources`).
Arguments come from the snapshot or are seeded fake data (:mod:`.fakedata`). The outputs are
compared with the snapshot's recorded result, when the snapshot's arguments were used, and with
a run on ``reference_platform``, when one is given (rules in :mod:`.compare`).

Optimized modules (``*_after_optimizations`` dumps, and the module inside every snapshot,
which XLA records after optimization) do not survive the StableHLO route as they are. They are
rewritten first (:mod:`.deoptimize`); XLA can abort on the rewritten module, so a replay runs in a
child process (:mod:`.worker`) that tells which step it is in; if either step fails, the same module's
``before_optimizations`` dump is replayed instead, with the snapshot's arguments when there
are any, and the result says so (``fell_back_to`` and a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from xlarun.errors import EngineError, InputError, XlarunError
from xlarun.replay import pjrt
from xlarun.replay.compare import Comparison, compare_outputs
from xlarun.replay.deoptimize import CannotDeoptimize, deoptimize_hlo_text
from xlarun.replay.fakedata import fake_arguments
from xlarun.replay.limits import check_data_size, check_text_nesting
from xlarun.replay.literals import describe, flatten
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import partitioning_of_source
from xlarun.replay.result import OutputSummary, ReplayResult
from xlarun.replay.sources import (
    ELIDED_WARNING,
    NO_RESULT,
    ReplaySource,
    entry_parameter_shapes,
    entry_result_shape,
    module_opcodes,
)

T = TypeVar("T")
Log = Callable[[str], None]
#: Opcodes that wait for the host to send data a replay never sends: the run would hang.
WAITS_FOR_HOST = {
    "infeed": "reads its input from the host (infeed)",
    "host-recv": "receives from the host (recv)",
    "outfeed": "writes to the host (outfeed), which nobody reads",
    "host-send": "sends to the host (send), which nobody receives",
}
#: Opcodes whose numbers differ from compile to compile (XLA seeds ``rng`` per executable).
RANDOM_OPCODES = ("rng", "rng-get-and-update-state")


@dataclass
class _Compiled:
    source: ReplaySource  # the module that was compiled (the fallback, if it came to that)
    module_proto: bytes
    stablehlo: bytes
    compiled: pjrt.CompiledModule
    route: str | None


def replay_with_pjrt(
    source: ReplaySource,
    options: ReplayOptions,
    log: Log,
    unoptimized: Callable[[], ReplaySource | None] = lambda: None,
    *,
    stage: Log = lambda name: None,
    optimized_failure: str | None = None,
    looked: str = "none was given",
) -> ReplayResult:
    """Replay one source on the built-in engine. ``unoptimized`` loads the fallback dump lazily; ``looked``
    says where it was looked for, for the message when there is none.

    ``stage`` hears each step's name before it starts (``compile-optimized``, ``compile``, ``run``,
    ``reference``), so the process that runs a replay in a child knows what XLA was doing if it
    died; ``optimized_failure``: why the rewritten optimized module is not to be compiled again
    (it killed the last child), so the fallback is taken at once.
    """
    platform = pjrt.Platform(options.platform)
    reference = pjrt.Platform(options.reference_platform) if options.reference_platform else None
    result = ReplayResult(
        engine="pjrt",
        platform=platform.name,
        source=str(source.path),
        input_kind=source.input_kind,
        module_name=source.module_name,
        warnings=list(source.warnings),
    )
    partitioning = partitioning_of_source(source)
    if partitioning.devices > 1:
        from xlarun.replay.partitioned_engine import replay_partitioned

        return replay_partitioned(source, partitioning, options, log, unoptimized, result, stage, looked, optimized_failure)
    _warn_about_source(source, result, log)
    try:
        built = _build(source, platform, options, log, result, unoptimized, stage, optimized_failure, looked)
    except EngineError as exc:
        result.verdict, result.error = "engine-error", exc.one_line()
        log(f"engine error: {result.error}")
        return result
    result.compile_s, result.route = built.compiled.compile_s, built.route
    opcodes = module_opcodes(built.module_proto)
    _refuse_host_waits(built.source, opcodes)
    arguments = _arguments(source, built, options, result)
    log(f"compiled {built.source.path.name} for {platform.describe()} in {built.compiled.compile_s:.3f} s")
    try:
        stage("run")
        outputs = _execute(built.compiled, arguments, options.iterations, result, log)
        stage("reference")
        comparisons = _compare(source, built, outputs, arguments, reference, options, result)
        if result.arguments == "snapshot" and source.result is None and reference is None:
            comparisons.append(_compare_without_result(source, built, outputs, arguments, options, result, log, unoptimized))
    except EngineError as exc:
        result.verdict, result.error = "engine-error", exc.one_line()
        log(f"engine error: {result.error}")
        return result
    conclude(result, comparisons, log)
    if options.save_outputs:
        _save_outputs(options.save_outputs, outputs)
    note_nonfinite(result, outputs, log)
    _note_random(result, opcodes, log)
    result.outputs = [
        OutputSummary(i, describe(out), literal_text(out) if options.print_literals and out is not None else None)
        for i, out in enumerate(outputs)
    ]
    return result


def _save_outputs(path: str, outputs: list) -> None:
    """The outputs as ``output_N`` arrays of an .npz (ML floats widened to float32: exact, and readable anywhere)."""
    arrays = {}
    for i, out in enumerate(outputs):
        if out is not None:
            value = np.asarray(out)
            arrays[f"output_{i}"] = value.astype(np.float32) if _is_ml_float(value.dtype) else value
    try:
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as its allow_pickle
    except OSError as exc:
        raise EngineError(f"cannot write the outputs to {path}: {exc.strerror or exc}") from None


def _warn_about_source(source: ReplaySource, result: ReplayResult, log: Log) -> None:
    if source.has_elided_constants:
        message = ELIDED_WARNING.format(name=source.path.name)
        result.warnings.append(message)
        log(message)
    partitioning = partitioning_of_source(source)
    if partitioning.devices > 1:  # a fallback for a one-device module is never partitioned; said if it ever is
        message = f"{source.path.name} was compiled for {partitioning.devices} devices ({partitioning.describe()}); it is replayed on one device"
        result.warnings.append(message)
        log(message)


def _build(
    source: ReplaySource,
    platform: pjrt.Platform,
    options: ReplayOptions,
    log: Log,
    result: ReplayResult,
    unoptimized: Callable[[], ReplaySource | None],
    stage: Log,
    optimized_failure: str | None,
    looked: str,
) -> _Compiled:
    """Compile the source, or its unoptimized dump when the optimized module cannot be."""
    built, reason = optimized_first(
        source,
        stage,
        optimized_failure,
        lambda: compile_plain(source, platform, options),
        lambda: _compile_optimized(source, platform, options, log),
    )
    if built is not None:
        return built
    fallback = unoptimized()
    if fallback is None:
        raise EngineError(
            f"the optimized module cannot be recompiled ({reason}), and there is no before_optimizations dump to replay instead ({looked})",
            "replay the module's before_optimizations dump, or use --engine hlo_runner_main (--run_xla_backend_only)",
        )
    message = (
        f"the optimized module cannot be recompiled through StableHLO ({reason}); "
        f"replaying the same module's unoptimized dump {fallback.path.name} instead"
    )
    result.warnings.append(message)
    log(message)
    result.fell_back_to = str(fallback.path)
    _warn_about_source(fallback, result, log)
    stage("compile")
    return compile_plain(fallback, platform, options)


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


def compile_plain(source: ReplaySource, platform: pjrt.Platform, options: ReplayOptions) -> _Compiled:
    proto = module_proto(source)
    stablehlo = pjrt.module_proto_to_stablehlo(proto)
    pjrt.prepare_custom_calls(proto)
    return _Compiled(source, proto, stablehlo, platform.compile(stablehlo), None)


def _compile_optimized(source: ReplaySource, platform: pjrt.Platform, options: ReplayOptions, log: Log) -> _Compiled:
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
    return _Compiled(source, proto, stablehlo, platform.compile(stablehlo), route)


def _arguments(source: ReplaySource, built: _Compiled, options: ReplayOptions, result: ReplayResult) -> list:
    shapes = entry_parameter_shapes(built.module_proto)
    use_snapshot = options.inputs == "snapshot" or (options.inputs == "auto" and source.arguments is not None)
    if options.inputs == "snapshot" and source.arguments is None:
        raise InputError(
            f"{source.path.name} holds no captured arguments",
            "replay a snapshot (capture with --xla_dump_hlo_snapshots), or use --inputs fake",
        )
    if not use_snapshot:
        result.arguments = "fake"
        output = entry_result_shape(built.module_proto)
        check_data_size(sum(s.nbytes() for s in shapes), output.nbytes() if output else 0, options.max_data_bytes)
        return fake_arguments(shapes, options.seed or 0)
    assert source.arguments is not None  # use_snapshot: they were captured
    expected = [s.hlo_text() for s in shapes]
    actual = [describe(a) for a in source.arguments]
    if expected != actual:
        raise InputError(
            f"the snapshot's arguments ({', '.join(actual)}) do not fit the module's parameters ({', '.join(expected)})",
            "the snapshot belongs to another module",
        )
    result.arguments = "snapshot"
    return source.arguments


def _execute(compiled: pjrt.CompiledModule, arguments: list, iterations: int, result: ReplayResult, log: Log) -> list:
    device_arguments = compiled.upload(arguments)
    outputs: list = []
    for iteration in range(iterations):  # at least 1: ReplayOptions refuses fewer
        outputs, seconds = compiled.run(device_arguments)
        result.run_times_s.append(seconds)
        log(f"iteration {iteration + 1}/{iterations}: {seconds * 1e3:.3f} ms")
    return compiled.download(outputs)


def _compare(source, built, outputs, arguments, reference, options, result) -> list[Comparison]:
    comparisons = []
    bounds = (options.abs_error_bound, options.rel_error_bound)
    if result.arguments == "snapshot" and source.result is not None:
        comparisons.append(compare_outputs(outputs, flatten(source.result), *bounds, "snapshot result"))
    if reference is not None:
        compiled = reference.compile(built.stablehlo)
        expected, _ = compiled.run(compiled.upload(arguments))
        comparisons.append(compare_outputs(outputs, compiled.download(expected), *bounds, f"platform {reference.name}"))
    return comparisons


def _compare_without_result(source, built, outputs, arguments, options, result, log, unoptimized) -> Comparison:
    """A snapshot with arguments but no recorded result (donated arguments): compare with the same module's
    before_optimizations dump run on the same arguments, an independent compile of what the program asked for; where
    there is none (or it is what ran), with a second compile of the module on CPU. Never a mismatch by omission."""
    fallback = unoptimized() if built.source is source else None
    fits = fallback is not None and [s.hlo_text() for s in entry_parameter_shapes(module_proto(fallback))] == [
        describe(a) for a in arguments
    ]
    if fallback is not None and fits:
        against = f"before_optimizations {fallback.path.name}"
        compiled = compile_plain(fallback, pjrt.Platform(options.platform), options).compiled
    else:
        against = "reference compile on cpu"
        compiled = pjrt.Platform("cpu").compile(built.stablehlo)
    message = f"{source.path.name}: {NO_RESULT}; compared with the {against} on the snapshot's arguments instead"
    result.warnings = [w for w in result.warnings if NO_RESULT not in w] + [message]
    log(message)
    expected, _ = compiled.run(compiled.upload(arguments))
    return compare_outputs(outputs, compiled.download(expected), options.abs_error_bound, options.rel_error_bound, against)


def conclude(result: ReplayResult, comparisons: list[Comparison], log: Log) -> None:
    if not comparisons:
        result.verdict = "ran"
        log("ran; nothing to compare against (no snapshot result, no reference platform)")
        return
    result.compared_with = [c.against for c in comparisons]
    result.max_abs_error = max(c.max_abs_error for c in comparisons)
    result.max_rel_error = max(c.max_rel_error for c in comparisons)
    result.verdict = "match" if all(c.matched for c in comparisons) else "mismatch"
    for comparison in comparisons:
        log(comparison.summary())
        result.mismatches.extend(comparison.problems)


def _parse_rewrite(original: str, rewritten: str) -> bytes:
    """The rewritten module's proto; XLA refusing the rewrite of a module it reads is xlarun's rewrite failing (an
    EngineError, so the unoptimized dump is tried), not the user's input."""
    try:
        return pjrt.text_to_module_proto(rewritten)
    except InputError as exc:
        pjrt.text_to_module_proto(original)  # raises the user's own input error when the module never parsed
        raise EngineError(f"xlarun's rewrite of the optimized module does not parse ({exc.message})") from exc


def _refuse_host_waits(source: ReplaySource, opcodes: dict[str, str]) -> None:
    for opcode, what in WAITS_FOR_HOST.items():
        if opcode in opcodes:
            raise InputError(
                f"{source.path.name} {what} (instruction {opcodes[opcode]}): a replay has no host side, so the run would wait forever",
                "replay the module without its host transfers (infeed/outfeed/send/recv to the host), or on the job that serves them",
            )


def note_nonfinite(result: ReplayResult, outputs: list, log: Log) -> None:
    """Say which outputs hold NaN or Inf: a match of NaN with NaN is still worth a look."""
    for index, value in enumerate(outputs):
        counts = _nonfinite_counts(value)
        if counts:
            result.nonfinite_outputs.append(f"output {index} {describe(value)}: {counts}")
    if not result.nonfinite_outputs:
        return
    message = f"outputs hold NaN or Inf: {'; '.join(result.nonfinite_outputs[:3])}" + (
        f" (and {len(result.nonfinite_outputs) - 3} more)" if len(result.nonfinite_outputs) > 3 else ""
    )
    if result.arguments == "fake":
        message += (
            " - the arguments are fake data, uniform in [-1, 1): cholesky, log, sqrt, division and the like give "
            "NaN or Inf on values their real inputs never take; replay a snapshot for the real ones"
        )
    result.warnings.append(message)
    log(message)


def _nonfinite_counts(value) -> str | None:
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype.kind not in "fc" and not _is_ml_float(array.dtype):
        return None
    wide = array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)
    nan, inf = int(np.isnan(wide).sum()), int(np.isinf(wide).sum())
    parts = [f"{nan} NaN" if nan else "", f"{inf} Inf" if inf else ""]
    return f"{' and '.join(p for p in parts if p)} of {array.size}" if nan or inf else None


def _is_ml_float(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and "float" in dtype.name


def _note_random(result: ReplayResult, opcodes: dict[str, str], log: Log) -> None:
    """Name the instructions that draw random numbers: two compiles of them draw different ones."""
    result.random_instructions = [f"{opcodes[op]} ({op})" for op in RANDOM_OPCODES if op in opcodes]
    if not result.random_instructions:
        return
    message = f"the module draws random numbers ({', '.join(result.random_instructions)}): XLA seeds rng per compile"
    if result.verdict == "mismatch":
        message += ", so a mismatch against another compile (a snapshot's run, --reference-platform) is expected"
    result.warnings.append(message)
    log(message)


def literal_text(value: np.ndarray) -> str:
    return np.array2string(np.asarray(value), threshold=10_000, max_line_width=120)


# ---- the engine proving itself (xlarun doctor) ----

#: A module every HLO parser since 2022 reads: 64-bit integers past 2**32, an f32 reduction, a tuple result.
PROOF_MODULE = """HloModule xlarun_engine_proof

sum {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT total = f32[] add(lhs, rhs)
}

ENTRY main {
  counts = s64[4] parameter(0)
  weights = f32[4] parameter(1)
  doubled = s64[4] add(counts, counts)
  as_float = f32[4] convert(counts)
  scaled = f32[4] multiply(as_float, weights)
  zero = f32[] constant(0)
  total = f32[] reduce(scaled, zero), dimensions={0}, to_apply=sum
  ROOT out = (s64[4], f32[]) tuple(doubled, total)
}
"""


@dataclass
class EngineProof:
    """What replaying :data:`PROOF_MODULE` showed: ``ok`` only when it compiled, ran and matched numpy."""

    ok: bool
    platform: str
    detail: str  # the route and timings when ok, else why it failed (one line)
    route: str | None = None
    compile_s: float | None = None
    run_s: float | None = None


def prove_engine(platform: str = "cpu") -> EngineProof:
    """Replay a tiny built-in module through the engine's own steps and compare with numpy.

    The same calls a replay makes (parse, StableHLO, compile, 64-bit upload, run, compare), so a
    jaxlib the engine cannot drive fails here with the reason a replay would give. Never raises
    for an engine problem; bugs of xlarun's own still raise.
    """
    counts = np.array([3_000_000_000, -1, 7, 2**40], dtype=np.int64)
    weights = np.array([0.5, 2.0, -1.0, 1e-12], dtype=np.float32)
    expected = [counts * 2, np.float32((counts.astype(np.float32) * weights).sum(dtype=np.float32))]
    try:
        target = pjrt.Platform(platform)
        stablehlo = pjrt.module_proto_to_stablehlo(pjrt.text_to_module_proto(PROOF_MODULE))
        compiled = target.compile(stablehlo)
        outputs, run_s = compiled.run(compiled.upload([counts, weights]))
        actual = compiled.download(outputs)
    except XlarunError as exc:
        return EngineProof(False, platform, exc.message)
    except (ImportError, AttributeError, TypeError) as exc:  # a jaxlib whose private names moved again
        return EngineProof(False, platform, f"jaxlib {pjrt.jaxlib_version()}: {type(exc).__name__}: {exc}")
    comparison = compare_outputs(actual, expected, 1e-6, 1e-6, "numpy")
    route = pjrt.bindings().mlir_route
    if not comparison.matched:
        return EngineProof(False, platform, f"the test module ran but did not match numpy: {comparison.summary()}", route)
    detail = f"replayed a test module on {target.describe()}: match (compile {compiled.compile_s:.3f} s, via {route})"
    return EngineProof(True, platform, detail, route, compiled.compile_s, run_s)
