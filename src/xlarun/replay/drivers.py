"""A replay on XLA's own tools, ``run_hlo_module`` and ``hlo_runner_main``, as one pipeline of stages::

    site = locate_runner(runner, options)             # .runner_site: the binary, here or in an image, and its flags
    command = runner_command(runner, path, options, binary=site.binary, defined=site.defined)  # .runner_argv
    ended = launch_runner(site, command, path, ...)   # .runner_launch: run to the end (or the deadline)
    result = result_from_run(...)                     # .runner_verdict: the verdict, from the exit code

Neither runner ships prebuilt (build them from XLA with bazel; NVIDIA's JAX images carry ``hlo_runner_main``).
The command line is a pure function of the runner, the file, the options and the flags the binary defines
(bundles print theirs from the same function): a flag only newer XLA versions define is passed only to a binary
that lists it, else left out with a warning (an older runner would take it for an input file).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

from xlarun.replay.options import ReplayOptions
from xlarun.replay.result import ReplayResult
from xlarun.replay.runner_argv import runner_command
from xlarun.replay.runner_launch import launch_runner
from xlarun.replay.runner_site import locate_runner
from xlarun.replay.runner_verdict import result_from_run


def run_runner(runner: str, path: str | Path, options: ReplayOptions, sink: Callable[[str], None] | None = None) -> ReplayResult:
    """Run a runner binary on ``path`` (here, or in ``options.image``), streaming its output lines to ``sink``, and judge it.

    Raises EnvironmentProblem when the runner cannot be found, InputError for a platform it cannot run on."""
    site = locate_runner(runner, options)
    local = Path(path).absolute() if site.image else Path(path)  # mounted at its own path in the container
    command = runner_command(runner, local, options, binary=site.binary, defined=site.defined)
    ended = launch_runner(site, command, local, options.timeout_s, sink)
    return result_from_run(
        runner, command.argv, ended.returncode, ended.output, options, local, command.left_out, ended.unfinished
    )


def command_line(
    runner: str, path: str | Path, options: ReplayOptions, binary: str | None = None, defined: Collection[str] | None = None
) -> list[str]:
    """The exact argv that runs ``path`` with ``options`` on ``runner`` (see :func:`.runner_argv.runner_command`)."""
    return runner_command(runner, path, options, binary=binary, defined=defined).argv
