"""The built-in replay engine: HLO -> StableHLO -> compile -> execute on jaxlib's PJRT, as one pipeline.

Each stage is a module that knows only the stages before it::

    plan = plan_replay(source, options, ...)              # .plan: platforms, devices (partitioned or not)
    built = compile_plan(plan, stage, optimized_failure)  # .compiled: one device, or placed on N (.placed)
    arguments = plan_inputs(plan, built)                  # .inputs: the snapshot's arguments, or fake data
    outputs, per_device = run_built(built, arguments, ...)  # .run
    comparisons = compare_with_references(plan, built, arguments, outputs, per_device)  # .reference
    result = conclude_replay(plan, built, outputs, comparisons)  # .verdict

Inputs are HLO text, HloProto, HloModuleProto or HloSnapshot (see :mod:`.sources`). XLA can abort on a
rewritten optimized module, so a replay runs in a child process (:mod:`.worker`) that hears which stage it is
in (``stage``); if compiling the rewrite kills it, the next child compiles the ``before_optimizations`` dump.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xlarun.errors import EngineError, XlarunError
from xlarun.replay import pjrt
from xlarun.replay.compare import compare_outputs
from xlarun.replay.compiled import compile_plan
from xlarun.replay.inputs import plan_inputs
from xlarun.replay.options import ReplayOptions
from xlarun.replay.plan import plan_replay
from xlarun.replay.reference import compare_with_references
from xlarun.replay.result import ReplayResult
from xlarun.replay.run import run_built
from xlarun.replay.sources import ReplaySource
from xlarun.replay.verdict import conclude_replay, failed

Log = Callable[[str], None]


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
    plan = plan_replay(source, options, log, unoptimized, looked)
    if plan.refusal is not None:
        return failed(plan.result, plan.refusal, log)
    try:
        built = compile_plan(plan, stage, optimized_failure)
    except EngineError as exc:
        return failed(plan.result, exc, log)
    arguments = plan_inputs(plan, built)
    try:
        stage("run")
        outputs, per_device = run_built(built, arguments, options.iterations, plan.result, log, profile=options.profile)
        stage("reference")
        comparisons = compare_with_references(plan, built, arguments, outputs, per_device)
    except EngineError as exc:
        return failed(plan.result, exc, log)
    return conclude_replay(plan, built, outputs, comparisons)


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
