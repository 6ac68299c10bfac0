"""What a replay is asked to do: :class:`ReplayOptions`, shared by every engine."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from xlarun.declared_options import ENGINES, INPUT_MODES, REPLAY_OPTIONS, signature_of, take
from xlarun.errors import InputError
from xlarun.replay.limits import parse_size

#: Seconds the built-in engine's child may run when no --timeout is given.
DEFAULT_ENGINE_TIMEOUT_S = 900.0

ISOLATION = ("auto", "always", "never")
_DEFAULT = {d.name: d.default for d in REPLAY_OPTIONS}  # the declared defaults, which the fields' are

__all__ = ["DEFAULT_ENGINE_TIMEOUT_S", "ENGINES", "INPUT_MODES", "ISOLATION", "ReplayOptions", "replay_options"]


@dataclass
class ReplayOptions:
    """Options of one replay; the same fields drive the built-in engine and XLA's runners."""

    #: ``pjrt`` (built in, needs jaxlib), ``run_hlo_module``, ``hlo_runner_main``, or ``auto``:
    #: pjrt when jaxlib imports, else the first runner found.
    engine: str = _DEFAULT["engine"]
    #: ``cpu``, ``cuda`` or ``rocm`` (``host`` and ``gpu`` are accepted as XLA spells them).
    platform: str = _DEFAULT["platform"]
    #: Run the module a second time here and compare; ``None``: no reference run.
    reference_platform: str | None = _DEFAULT["reference_platform"]
    #: An element matches when its absolute error <= abs_error_bound OR its relative error <= rel_error_bound.
    abs_error_bound: float = _DEFAULT["abs_error_bound"]
    rel_error_bound: float = _DEFAULT["rel_error_bound"]
    #: Executions after one compile; each is timed.
    iterations: int = _DEFAULT["iterations"]
    #: Seed of the fake arguments. ``None``: 0 for the built-in engine, the runner's default for runners.
    seed: int | None = _DEFAULT["seed"]
    #: Keep the output values as text in the result (and make runners print literals).
    print_literals: bool = _DEFAULT["print_literals"]
    #: ``snapshot``: the captured arguments (error without a snapshot); ``fake``: seeded fake data;
    #: ``auto``: the snapshot's when there is one.
    inputs: str = _DEFAULT["inputs"]
    #: A runner binary to use instead of searching PATH and the XLARUN_* variables.
    runner_path: str | None = _DEFAULT["runner"]
    #: Run the runner inside this container image (e.g. NVIDIA's JAX image, which carries hlo_runner_main);
    #: the runner is looked up in the image unless ``runner_path`` names its path there.
    image: str | None = _DEFAULT["image"]
    #: Where the built-in engine runs: ``auto``/``always``: in a child process under the memory and time
    #: limits, so an XLA CHECK failure, a segfault or a hang becomes an ``engine-error``; ``never``: in
    #: this process (faster for many small replays, but XLA can abort the caller).
    isolate: str = "never" if _DEFAULT["in_process"] else "auto"
    #: Seconds a runner or the built-in engine's child may take before it is killed; ``None``: no limit
    #: for runners, :data:`DEFAULT_ENGINE_TIMEOUT_S` for the built-in engine.
    timeout_s: float | None = _DEFAULT["timeout"]
    #: Refuse fake arguments and results that would take more than this many bytes (0: no limit);
    #: the child's address space is limited accordingly (:mod:`.limits`).
    max_data_bytes: int = parse_size(_DEFAULT["max_data_size"])
    #: Write the output values here (.npz, ``output_0``...; bf16 and fp8 as float32, exactly), built-in engine.
    save_outputs: str | None = _DEFAULT["save_outputs"]
    #: Run the iterations under JAX's profiler and time each op of the module (built-in engine).
    profile: bool = _DEFAULT["profile"]

    def validate(self) -> ReplayOptions:
        """Raise InputError for values no engine accepts; return self."""
        named = {f.name for f in fields(self)}
        for declared in REPLAY_OPTIONS:  # each option's own check, where the field has the option's name
            if declared.name in named:
                declared.check(getattr(self, declared.name))
        if self.isolate not in ISOLATION:
            raise InputError(f"unknown isolate {self.isolate!r}", f"use one of: {', '.join(ISOLATION)}")
        if self.max_data_bytes < 0 or (self.timeout_s is not None and self.timeout_s <= 0):
            raise InputError("--max-data-size cannot be negative and --timeout must be positive")
        if self.profile and self.engine not in ("auto", "pjrt"):
            raise InputError(
                f"--profile times ops on the built-in engine only, not {self.engine}", "drop --engine (or use --engine pjrt)"
            )
        if self.isolate == "never" and self.timeout_s is not None and self.engine in ("auto", "pjrt"):
            # XLA compiling or running in this process cannot be stopped: a timeout there would be a promise not kept
            raise InputError(
                "--timeout cannot be kept with --in-process: XLA running in xlarun's own process cannot be stopped",
                "drop --in-process (the replay then runs in a child process that --timeout stops), or drop --timeout",
            )
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def replay_options(**given: Any) -> ReplayOptions:
    """Checked :class:`ReplayOptions` from what a user gives: ``xlarun replay``'s options and ``Module.replay``'s
    keywords alike, as :data:`~xlarun.declared_options.REPLAY_OPTIONS` declares them (``runner``: a binary's path;
    ``max_data_size``: ``"4G"`` or bytes; ``in_process``: no child)."""
    o = take(REPLAY_OPTIONS, given, "replay")
    return ReplayOptions(
        engine=o["engine"],
        platform=o["platform"],
        reference_platform=o["reference_platform"],
        abs_error_bound=o["abs_error_bound"],
        rel_error_bound=o["rel_error_bound"],
        iterations=o["iterations"],
        seed=o["seed"],
        print_literals=o["print_literals"],
        inputs=o["inputs"],
        runner_path=str(o["runner"]) if o["runner"] else None,
        image=o["image"],
        timeout_s=o["timeout"],
        max_data_bytes=parse_size(o["max_data_size"]) if isinstance(o["max_data_size"], str) else o["max_data_size"],
        isolate="never" if o["in_process"] else "auto",
        save_outputs=str(o["save_outputs"]) if o["save_outputs"] else None,
        profile=o["profile"],
    ).validate()


replay_options.__signature__ = signature_of(REPLAY_OPTIONS)  # type: ignore[attr-defined]


def keywords_for(builder: Callable, given: dict) -> dict:
    """The entries of ``given`` (a command's or a method's ``locals()``) that ``builder`` takes as keywords: a
    command's option and the Python call's keyword have the builder's name, so each is forwarded without a list
    of its own."""
    names = inspect.signature(builder).parameters
    return {name: value for name, value in given.items() if name in names}
