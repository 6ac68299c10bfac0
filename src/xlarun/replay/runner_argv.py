"""Every command line of XLA's replay runners, ``run_hlo_module`` and ``hlo_runner_main``, built in one place.

Replay's drivers run these argvs and bundles print them; both come from :func:`runner_command`, a pure
function of the runner, the dump file, the options and the flags the binary is known to define.

Spellings, from XLA's sources (xla/service/platform_util.cc, xla/tools/multihost_hlo_runner/hlo_runner_main.cc):

- ``run_hlo_module --platform`` / ``--reference_platform`` go through ``PlatformUtil::GetPlatform``, which
  lowercases the name, maps ``cpu`` to ``host`` and ``gpu`` to the build's GPU platform, and matches the
  platforms' registered names case-insensitively (in every supported XLA). xlarun passes the spelling the
  tool's own usage text shows, ``--platform=[CPU|CUDA|Interpreter]`` (and ``ROCM``).
- ``hlo_runner_main --device_type`` takes exactly ``gpu`` or ``host`` (compared case-sensitively); it has
  no interpreter.

Flags: a runner takes an argument it does not define for an input file (``tsl::Flags::Parse`` leaves it in
argv), so a flag one XLA version lacks makes that version fail on a file named ``--flag=value``.
:data:`VERSION_SPECIFIC` names the flags xlarun uses that not every supported XLA defines; they are passed
only when the binary is known to define them (its ``--help`` lists them), otherwise left out with a warning.
tests/fixtures/xla_runner_flags/ holds what each runner defines at the XLA commit of every supported jaxlib
(scripts/xla_runner_flags.py), and tests/test_replay_runner_argv.py checks every line built here against them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from xlarun.errors import InputError
from xlarun.hlo.names import snapshot_file
from xlarun.replay.options import ReplayOptions

RUNNERS = ("run_hlo_module", "hlo_runner_main")


@dataclass(frozen=True)
class PlatformSpelling:
    """How each runner names one xlarun platform (None: the runner cannot run on it)."""

    run_hlo_module: str
    hlo_runner_main: str | None


#: xlarun platform (``host`` and ``gpu`` as XLA spells them too) -> each runner's spelling.
PLATFORMS = {
    "cpu": PlatformSpelling("CPU", "host"),
    "host": PlatformSpelling("CPU", "host"),
    "cuda": PlatformSpelling("CUDA", "gpu"),
    "gpu": PlatformSpelling("CUDA", "gpu"),
    "rocm": PlatformSpelling("ROCM", "gpu"),
    "interpreter": PlatformSpelling("Interpreter", None),
}
GPU_PLATFORMS = ("CUDA", "ROCM")

#: Flags xlarun passes that only some supported XLA versions define -> since when (the fixtures hold the proof).
VERSION_SPECIFIC = {
    "hlo_runner_main": {
        "profile_execution": "XLA of jaxlib 0.5.3 and later",
        "random_seed": "XLA of jaxlib 0.8.3 and later",
    },
    "run_hlo_module": {},
}

_OPTIMIZED_NAME = re.compile(r"after_optimizations")
#: One flag of a tsl usage text (``--help``): ``\t--name=default\ttype\thelp``.
_USAGE_FLAG = re.compile(r"^\s*--([A-Za-z0-9_]+)=", re.MULTILINE)


@dataclass
class RunnerCommand:
    """One runner's argv, and the flags that had to be left out of it."""

    runner: str
    argv: list[str]
    #: ``--name=value`` left out -> which XLA versions define it (:data:`VERSION_SPECIFIC`).
    omitted: dict[str, str] = field(default_factory=dict)
    #: Whether the binary's flags were known (its ``--help`` listed them) when the line was built.
    flags_known: bool = False
    #: Whether it runs on a GPU platform (a container running it is given the GPUs).
    gpus: bool = False

    @property
    def left_out(self) -> list[str]:
        """One sentence per omitted flag, for the replay's warnings."""
        known = "this build does not define it" if self.flags_known else "its flags could not be listed"
        return [
            f"{self.runner}: {arg.split('=')[0]} not passed ({known}; {since} define it)" for arg, since in self.omitted.items()
        ]

    def shell_line(self) -> str:
        """The argv as one line a shell runs as is."""
        return shlex.join(self.argv)


def xla_platform(name: str) -> PlatformSpelling:
    """Both runners' spellings of an xlarun platform name (any case)."""
    try:
        return PLATFORMS[name.lower()]
    except KeyError:
        raise InputError(f"unknown platform {name!r}", f"use one of: {', '.join(PLATFORMS)}") from None


def is_snapshot(path: str | Path) -> bool:
    return snapshot_file(Path(path).name) == "snapshot"


def is_optimized(path: str | Path) -> bool:
    """Whether the file holds a module XLA already optimized (a snapshot holds the module as it executed)."""
    return bool(_OPTIMIZED_NAME.search(Path(path).name)) or is_snapshot(path)


def input_format(runner: str, path: str | Path) -> str:
    """The ``--input_format`` value for a dump file, from its name."""
    name = Path(path).name.removesuffix(".gz")
    if runner == "run_hlo_module":
        if name.endswith(".pbtxt"):
            return "pbtxt"
        return "pb" if name.endswith(".pb") else "hlo"
    if is_snapshot(name):
        return "snapshot_proto_binary"
    if name.endswith(".pbtxt"):
        return "proto_text"
    return "proto_binary" if name.endswith(".pb") else "text"


def flags_from_usage(text: str) -> frozenset[str] | None:
    """The flag names a runner's ``--help`` lists, or None when the text lists none."""
    names = frozenset(_USAGE_FLAG.findall(text))
    return names or None


def runner_command(
    runner: str,
    path: str | Path,
    options: ReplayOptions,
    *,
    binary: str | None = None,
    defined: Collection[str] | None = None,
    xla_flags: Collection[str] = (),
) -> RunnerCommand:
    """The argv that runs ``path`` with ``options`` on ``runner`` (no file is read).

    ``defined``: the flags the binary defines (from its ``--help``); None when unknown, which leaves out the
    flags of :data:`VERSION_SPECIFIC`. ``xla_flags``: ``--xla_*`` DebugOptions flags, which both runners take.
    """
    if runner == "run_hlo_module":
        argv, wanted = _run_hlo_module(path, options)
    elif runner == "hlo_runner_main":
        argv, wanted = _hlo_runner_main(path, options)
    else:
        raise InputError(f"unknown runner {runner!r}", f"use one of: {', '.join(RUNNERS)}")
    gpus = xla_platform(options.platform).run_hlo_module in GPU_PLATFORMS
    command = RunnerCommand(runner, [binary or runner, *argv], flags_known=defined is not None, gpus=gpus)
    for flag, value in wanted:
        since = VERSION_SPECIFIC[runner].get(flag)
        if since and (defined is None or flag not in defined):
            command.omitted[f"--{flag}={value}"] = since
            continue
        command.argv.append(f"--{flag}={value}")
    command.argv += [*xla_flags, str(path)]
    return command


def _run_hlo_module(path: str | Path, options: ReplayOptions) -> tuple[list[str], list[tuple[str, str]]]:
    reference = xla_platform(options.reference_platform).run_hlo_module if options.reference_platform else ""
    argv = [
        f"--platform={xla_platform(options.platform).run_hlo_module}",
        f"--reference_platform={reference}",  # empty: no reference run (the default would be the interpreter)
        f"--input_format={input_format('run_hlo_module', path)}",
        f"--iterations={options.iterations}",
        f"--abs_error_bound={options.abs_error_bound:g}",
        f"--rel_error_bound={options.rel_error_bound:g}",
    ]
    if options.print_literals:
        argv.append("--print_literals=true")
    if is_optimized(path):
        argv.append("--run_test_hlo_passes=false")  # its passes already ran
    return argv, []


def _hlo_runner_main(path: str | Path, options: ReplayOptions) -> tuple[list[str], list[tuple[str, str]]]:
    device = xla_platform(options.platform).hlo_runner_main
    if device is None:
        raise InputError(f"hlo_runner_main cannot run on {options.platform!r}", "use --platform cpu, cuda or rocm")
    fmt = input_format("hlo_runner_main", path)
    argv = [f"--device_type={device}", f"--input_format={fmt}", f"--num_repeats={options.iterations}"]
    if fmt != "snapshot_proto_binary" or options.inputs == "fake":
        argv.append("--hlo_argument_mode=use_random_inputs")
    if is_optimized(path):
        argv.append("--run_xla_backend_only=true")
    if options.print_literals:
        argv.append("--log_output=true")
    wanted = [("random_seed", str(options.seed))] if options.seed is not None else []
    return argv, [*wanted, ("profile_execution", "true")]
