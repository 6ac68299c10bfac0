"""The compile stage: the plan's module compiled, on one device or placed on its N devices (:mod:`.placed`).

Optimized modules (``*_after_optimizations`` dumps, and the module inside every snapshot, which XLA records
after optimization) do not survive the StableHLO route as they are: they are rewritten first
(:mod:`.recompile`); where that fails, the same module's ``before_optimizations`` dump is compiled instead and
the result says so (``fell_back_to`` and a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from xlarun.errors import EngineError
from xlarun.replay.placed import Placed, place_on_devices
from xlarun.replay.plan import ReplayPlan, warn, warn_about_source
from xlarun.replay.recompile import Compiled, compile_optimized, compile_plain, optimized_first

Log = Callable[[str], None]
#: What the compile stage made: one device's executable, or a module placed on N devices.
Built: TypeAlias = Compiled | Placed


def compile_plan(plan: ReplayPlan, stage: Log, optimized_failure: str | None) -> Built:
    """Compile what the plan says. ``stage`` hears ``compile-optimized`` or ``compile`` before XLA starts;
    ``optimized_failure``: why the rewritten optimized module is not to be compiled again (it killed the last
    child), so the fallback is taken at once. Compile failures raise EngineError."""
    if plan.partitioned:
        return place_on_devices(plan, stage, optimized_failure)
    built = _compile_one(plan, stage, optimized_failure)
    plan.result.compile_s, plan.result.route = built.compiled.compile_s, built.route
    return built


def _compile_one(plan: ReplayPlan, stage: Log, optimized_failure: str | None) -> Compiled:
    """Compile the source, or its unoptimized dump when the optimized module cannot be."""
    source, platform, log, result = plan.source, plan.platform, plan.log, plan.result
    built, reason = optimized_first(
        source,
        stage,
        optimized_failure,
        lambda: compile_plain(source, platform),
        lambda: compile_optimized(source, platform, log),
    )
    if built is not None:
        return built
    fallback = plan.unoptimized()
    if fallback is None:
        raise EngineError(
            f"the optimized module cannot be recompiled ({reason}), and there is no before_optimizations dump to replay instead ({plan.looked})",
            "replay the module's before_optimizations dump, or use --engine hlo_runner_main (--run_xla_backend_only)",
        )
    warn(
        result,
        log,
        f"the optimized module cannot be recompiled through StableHLO ({reason}); "
        f"replaying the same module's unoptimized dump {fallback.path.name} instead",
    )
    result.fell_back_to = str(fallback.path)
    warn_about_source(fallback, result, log)
    stage("compile")
    return compile_plain(fallback, platform)
