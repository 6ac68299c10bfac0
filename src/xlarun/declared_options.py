"""Options that a command and its Python call share, each declared once: name, default, type, help and check.

``xlarun replay``'s ``--max-data-size`` and ``Module.replay(max_data_size=...)`` are one :class:`Declared`; the typer
command is made from it (``xlarun.commands.declared``), the builder that checks what a user gives takes its
keywords from it (:func:`take`), and a Python method that spells its keywords out for readers is held to it when
it is defined (:func:`keywords_of`). This module is data and small functions only: the command modules read it
when ``xlarun --help`` builds them, so it imports nothing heavy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from xlarun.errors import InputError

ENGINES = ("auto", "pjrt", "run_hlo_module", "hlo_runner_main")
INPUT_MODES = ("auto", "fake", "snapshot")
#: How each step is recompiled: ``timeline`` disables every pass the timeline names, ``all`` every
#: HLO pass (``xla_disable_all_hlo_passes``), ``full`` none (the pipeline applies its passes again).
RECOMPILE_MODES = ("timeline", "all", "full")
REFERENCES = ("before", "snapshot")


@dataclass(frozen=True)
class Declared:
    """One option: the Python keyword ``name`` is the long flag ``--name-with-dashes`` (or ``flags[0]``)."""

    name: str
    default: Any
    #: What the CLI parses the value as (``str | None``, ``Path | None``, ``float``...).
    type: Any
    help: str
    #: The flags, when not just ``--name-with-dashes``: a short one, or ``--ops/--no-ops``.
    flags: tuple[str, ...] = ()
    #: The values allowed (``None``: any).
    choices: tuple[str, ...] | None = None
    #: The smallest number allowed.
    minimum: float | None = None

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    def check(self, value: Any) -> None:
        """InputError when ``value`` is not one this option takes."""
        if self.choices is not None and value not in self.choices:
            raise InputError(f"unknown {self.name} {value!r}", f"use one of: {', '.join(self.choices)}")
        if self.minimum is not None and value is not None and value < self.minimum:
            raise InputError(f"{self.name} must be at least {self.minimum:g}, not {value}")


def take(declared: Iterable[Declared], given: dict[str, Any], what: str) -> dict[str, Any]:
    """Every declared option's value: the one in ``given``, else its default; each checked. A keyword no option
    declares is an InputError naming the ones there are (``what``: the call, for the message)."""
    options = {d.name: d for d in declared}
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise InputError(f"{what} takes no option {', '.join(unknown)}", f"its options: {', '.join(options)}")
    values = {name: given.get(name, d.default) for name, d in options.items()}
    for name, d in options.items():
        d.check(values[name])
    return values


def given_to(declared: Iterable[Declared], values: dict[str, Any]) -> dict[str, Any]:
    """The declared options' entries of ``values`` (a command's ``locals()``), to pass on as keywords."""
    return {d.name: values[d.name] for d in declared}


def default_of(declared: Iterable[Declared], name: str) -> Any:
    """The declared default of option ``name``."""
    return next(d.default for d in declared if d.name == name)


def signature_of(declared: Iterable[Declared]) -> inspect.Signature:
    """The keyword-only signature a builder taking ``**given`` presents (``help()``, an IDE)."""
    return inspect.Signature(
        [inspect.Parameter(d.name, inspect.Parameter.KEYWORD_ONLY, default=d.default, annotation=d.type) for d in declared]
    )


_F = TypeVar("_F", bound=Callable[..., Any])


def keywords_of(declared: Iterable[Declared], *, besides: tuple[str, ...] = ()) -> Callable[[_F], _F]:
    """Hold a function that spells out its keywords (for readers and type checkers) to the declaration: when it is
    defined, its keyword-only parameters other than ``besides`` must be the declared options, in their order,
    with their defaults, or defining it raises TypeError."""
    wanted = [(d.name, d.default) for d in declared]

    def hold(function: _F) -> _F:
        keywords = [
            (p.name, p.default)
            for p in inspect.signature(function).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in besides
        ]
        if keywords != wanted:
            raise TypeError(f"{function.__qualname__}'s keywords {keywords} are not the declared options {wanted}")
        return function

    return hold


REPLAY_OPTIONS = (
    Declared("engine", "auto", str, "pjrt (built in), run_hlo_module, hlo_runner_main, or auto.", ("--engine", "-e"), ENGINES),
    Declared("platform", "cpu", str, "cpu, cuda or rocm.", ("--platform", "-p")),
    Declared("reference_platform", None, str | None, "Run again on this platform and compare."),
    Declared("abs_error_bound", 1e-3, float, "An element matches if its absolute error is within this...", minimum=0),
    Declared("rel_error_bound", 1e-3, float, "...or its relative error within this (XLA's rule).", minimum=0),
    Declared("iterations", 1, int, "Executions after one compile, each timed.", ("--iterations", "-n"), minimum=1),
    Declared("seed", None, int | None, "Seed of the fake arguments (default 0)."),
    Declared(
        "inputs", "auto", str, "auto (the snapshot's arguments when there are any), snapshot, or fake.", choices=INPUT_MODES
    ),
    Declared("print_literals", False, bool, "Print the output values."),
    Declared("runner", None, Path | None, "Path of the run_hlo_module / hlo_runner_main binary."),
    Declared(
        "image",
        None,
        str | None,
        "Run the runner inside this container image (found there: NVIDIA's JAX images carry hlo_runner_main).",
    ),
    Declared(
        "timeout",
        None,
        float | None,
        "Seconds before the engine is stopped (default: none for runners, 900 for the built-in engine).",
    ),
    Declared("max_data_size", "4G", str, "Refuse modules whose fake arguments and results need more (4G, 512M; 0: no limit)."),
    Declared("in_process", False, bool, "Run the built-in engine in this process: no child, no limits; XLA can abort xlarun."),
    Declared(
        "save_outputs",
        None,
        Path | None,
        "Write the output values to this .npz (output_0, ...; bf16 as float32), built-in engine.",
    ),
    Declared(
        "profile",
        False,
        bool,
        "Run the iterations under JAX's profiler and list each op's time (built-in engine; with --jaxlib: "
        "the ops that moved between releases).",
    ),
)

BISECT_OPTIONS = (
    Declared(
        "tolerance",
        1e-5,
        float,
        "A value matches when its absolute OR relative error is within this.",
        ("--tolerance", "-t"),
        minimum=0,
    ),
    Declared("linear", False, bool, "Replay every step instead of a binary search."),
    Declared(
        "reference",
        "before",
        str,
        "before (the before_optimizations module's outputs) or snapshot (the recorded result).",
        choices=REFERENCES,
    ),
    Declared("reference_platform", None, str | None, "Run the reference on this platform (cpu, cuda, rocm)."),
    Declared("platform", "cpu", str, "Where the steps run.", ("--platform", "-p")),
    Declared(
        "recompile",
        "timeline",
        str,
        "timeline: disable the passes the timeline names when a step is recompiled; all: every HLO pass; full: none "
        "(passes apply again and can hide the culprit).",
        choices=RECOMPILE_MODES,
    ),
    Declared("inputs", "auto", str, "auto (the snapshot's arguments when there is one), snapshot, or fake.", choices=INPUT_MODES),
    Declared("seed", 0, int, "Seed of the fake arguments."),
    Declared(
        "ops",
        True,
        bool,
        "Replay mode: also find the culprit step's first instruction whose value moves (two more replays).",
        ("--ops/--no-ops",),
    ),
)

RENDER_OPTIONS = (
    Declared("around", None, str | None, "Draw only the neighbourhood of this instruction (or GraphDef node)."),
    Declared("depth", 3, int, "With --around: how many edges away to draw."),
    Declared(
        "limit",
        1500,
        int,
        "With --full, refuse above this many nodes; without, a module over this many (or 500, if fewer) is drawn "
        "as its overview (0: no limit, every node drawn).",
    ),
    Declared("full", False, bool, "Draw every node of a module over --limit instead of its overview (slow)."),
    Declared("expand", None, list[str] | None, "Draw this fusion open (repeatable)."),
    Declared("expand_fusions", False, bool, "Draw every fusion open."),
    Declared("timeout_s", 60.0, float, "Seconds graphviz may take before it is stopped.", ("--timeout",)),
)
