"""What a replay is asked to do: :class:`ReplayOptions`, shared by every engine."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from xlarun.errors import InputError
from xlarun.replay.limits import DEFAULT_MAX_DATA_BYTES, parse_size

#: Seconds the built-in engine's child may run when no --timeout is given.
DEFAULT_ENGINE_TIMEOUT_S = 900.0

ENGINES = ("auto", "pjrt", "run_hlo_module", "hlo_runner_main")
INPUT_MODES = ("auto", "fake", "snapshot")
ISOLATION = ("auto", "always", "never")


@dataclass
class ReplayOptions:
    """Options of one replay; the same fields drive the built-in engine and XLA's runners."""

    #: ``pjrt`` (built in, needs jaxlib), ``run_hlo_module``, ``hlo_runner_main``, or ``auto``:
    #: pjrt when jaxlib imports, else the first runner found.
    engine: str = "auto"
    #: ``cpu``, ``cuda`` or ``rocm`` (``host`` and ``gpu`` are accepted as XLA spells them).
    platform: str = "cpu"
    #: Run the module a second time here and compare; ``None``: no reference run.
    reference_platform: str | None = None
    #: An element matches when its absolute error <= abs_error_bound OR its relative error <= rel_error_bound.
    abs_error_bound: float = 1e-3
    rel_error_bound: float = 1e-3
    #: Executions after one compile; each is timed.
    iterations: int = 1
    #: Seed of the fake arguments. ``None``: 0 for the built-in engine, the runner's default for runners.
    seed: int | None = None
    #: Keep the output values as text in the result (and make runners print literals).
    print_literals: bool = False
    #: ``snapshot``: the captured arguments (error without a snapshot); ``fake``: seeded fake data;
    #: ``auto``: the snapshot's when there is one.
    inputs: str = "auto"
    #: A runner binary to use instead of searching PATH and the XLARUN_* variables.
    runner_path: str | None = None
    #: Run the runner inside this container image (e.g. NVIDIA's JAX image, which carries hlo_runner_main);
    #: the runner is looked up in the image unless ``runner_path`` names its path there.
    image: str | None = None
    #: Where the built-in engine runs: ``auto``/``always``: in a child process under the memory and time
    #: limits, so an XLA CHECK failure, a segfault or a hang becomes an ``engine-error``; ``never``: in
    #: this process (faster for many small replays, but XLA can abort the caller).
    isolate: str = "auto"
    #: Seconds a runner or the built-in engine's child may take before it is killed; ``None``: no limit
    #: for runners, :data:`DEFAULT_ENGINE_TIMEOUT_S` for the built-in engine.
    timeout_s: float | None = None
    #: Refuse fake arguments and results that would take more than this many bytes (0: no limit);
    #: the child's address space is limited accordingly (:mod:`.limits`).
    max_data_bytes: int = DEFAULT_MAX_DATA_BYTES
    #: Write the output values here (.npz, ``output_0``...; bf16 and fp8 as float32, exactly), built-in engine.
    save_outputs: str | None = None
    #: Run the iterations under JAX's profiler and time each op of the module (built-in engine).
    profile: bool = False

    def validate(self) -> ReplayOptions:
        """Raise InputError for values no engine accepts; return self."""
        for name, allowed in (("engine", ENGINES), ("inputs", INPUT_MODES), ("isolate", ISOLATION)):
            if getattr(self, name) not in allowed:
                raise InputError(f"unknown {name} {getattr(self, name)!r}", f"use one of: {', '.join(allowed)}")
        if self.iterations < 1:
            raise InputError(f"iterations must be at least 1, not {self.iterations}")
        if self.abs_error_bound < 0 or self.rel_error_bound < 0:
            raise InputError("error bounds cannot be negative")
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


def replay_options(
    *,
    engine: str = "auto",
    platform: str = "cpu",
    reference_platform: str | None = None,
    abs_error_bound: float = 1e-3,
    rel_error_bound: float = 1e-3,
    iterations: int = 1,
    seed: int | None = None,
    inputs: str = "auto",
    print_literals: bool = False,
    runner: str | Path | None = None,
    image: str | None = None,
    timeout: float | None = None,
    max_data_size: str | int = "4G",
    in_process: bool = False,
    save_outputs: str | Path | None = None,
    profile: bool = False,
) -> ReplayOptions:
    """Checked :class:`ReplayOptions` from what a user gives: ``xlarun replay``'s options and ``Module.replay``'s
    keywords alike (``runner``: a binary's path; ``max_data_size``: ``"4G"`` or bytes; ``in_process``: no child)."""
    return ReplayOptions(
        engine=engine,
        platform=platform,
        reference_platform=reference_platform,
        abs_error_bound=abs_error_bound,
        rel_error_bound=rel_error_bound,
        iterations=iterations,
        seed=seed,
        print_literals=print_literals,
        inputs=inputs,
        runner_path=str(runner) if runner else None,
        image=image,
        timeout_s=timeout,
        max_data_bytes=parse_size(max_data_size) if isinstance(max_data_size, str) else max_data_size,
        isolate="never" if in_process else "auto",
        save_outputs=str(save_outputs) if save_outputs else None,
        profile=profile,
    ).validate()


def keywords_for(builder: Callable, given: dict) -> dict:
    """The entries of ``given`` (a command's or a method's ``locals()``) that ``builder`` takes as keywords: a
    command's option and the Python call's keyword have the builder's name, so each is forwarded without a list
    of its own (tests/test_replay_options.py holds the names and defaults to the builder's)."""
    names = inspect.signature(builder).parameters
    return {name: value for name, value in given.items() if name in names}
