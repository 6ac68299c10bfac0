"""Where an XLA runner (``run_hlo_module``, ``hlo_runner_main``) lives, and which flags it defines.

A runner is found, in order, at ``ReplayOptions.runner_path``, in the ``XLARUN_RUN_HLO_MODULE`` /
``XLARUN_HLO_RUNNER_MAIN`` environment variable, or on ``PATH``; with ``ReplayOptions.image``, inside that
container image (:func:`xlarun.capture.images.runner_in_image`). Its flags come from its ``--help``, asked only
of a runner some of whose flags not every XLA defines (:data:`.runner_argv.VERSION_SPECIFIC`).
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass

from xlarun import deadline
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.options import ReplayOptions
from xlarun.replay.runner_argv import VERSION_SPECIFIC, flags_from_usage

RUNNERS = {"run_hlo_module": "XLARUN_RUN_HLO_MODULE", "hlo_runner_main": "XLARUN_HLO_RUNNER_MAIN"}
#: Seconds a runner may take to print its --help before its flags count as unknown.
USAGE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunnerSite:
    """One runner binary: its path (inside ``image`` when there is one) and the flags it defines (None: not known)."""

    runner: str
    binary: str
    image: str | None
    defined: frozenset[str] | None


def locate_runner(runner: str, options: ReplayOptions) -> RunnerSite:
    """The runner ``options`` name: on this host, or in ``options.image``. Raises EnvironmentProblem when it is
    not there."""
    asks_usage = bool(VERSION_SPECIFIC.get(runner))  # a runner whose flags are alike in every XLA is not asked
    if not options.image:
        binary: str | None = find_runner(runner, options.runner_path)
        usage = usage_text(binary, options.timeout_s) if asks_usage and binary else None
    else:
        binary, usage = _locate_in_image(runner, options.image, options.runner_path, asks_usage)
    if not binary:
        raise EnvironmentProblem(
            f"image {options.image} has no {runner}",
            "NVIDIA's JAX images carry hlo_runner_main; or name the binary's path in the image with --runner",
        )
    return RunnerSite(runner, binary, options.image, flags_from_usage(usage) if usage else None)


def _locate_in_image(runner: str, image: str, explicit: str | None, asks_usage: bool) -> tuple[str | None, str | None]:
    from xlarun.capture.images import runner_in_image

    return runner_in_image(image, runner, explicit, usage=asks_usage)


def find_runner(runner: str, explicit: str | None = None) -> str:
    """The runner binary's path on this host: ``explicit``, then its XLARUN_* variable, then PATH."""
    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", f"use one of: {', '.join(RUNNERS)}")
    for candidate, origin in ((explicit, "the given path"), (os.environ.get(RUNNERS[runner]), RUNNERS[runner])):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return str(candidate)
            raise EnvironmentProblem(f"{runner} from {origin} is not an executable file: {candidate}")
    found = shutil.which(runner)
    if found is None:
        raise EnvironmentProblem(
            f"{runner} is not on PATH and {RUNNERS[runner]} is not set",
            f"build it from XLA (bazel build //xla/tools:{runner}) and put it on PATH, or use --engine pjrt",
        )
    return found


def runner_available(runner: str) -> bool:
    """Whether :func:`find_runner` would succeed (no explicit path)."""
    try:
        find_runner(runner)
    except EnvironmentProblem:
        return False
    return True


def defined_flags(binary: str, timeout_s: float | None = None) -> frozenset[str] | None:
    """The flags a runner binary on this host defines, from its ``--help`` (None when it lists none or does not answer)."""
    usage = usage_text(binary, timeout_s)
    return flags_from_usage(usage) if usage else None


def usage_text(binary: str, timeout_s: float | None = None) -> str | None:
    """What ``binary --help`` prints (None when it does not answer within the timeout).

    Asked once per binary file (its path, size and modification time) in a process."""
    limit = USAGE_TIMEOUT_S if timeout_s is None else min(timeout_s, USAGE_TIMEOUT_S)
    try:
        stat = os.stat(binary)
    except OSError:
        return None
    return _usage(os.path.realpath(binary), stat.st_size, stat.st_mtime_ns, limit)


@functools.lru_cache(maxsize=32)
def _usage(binary: str, _size: int, _mtime_ns: int, timeout_s: float) -> str | None:
    try:
        proc = deadline.run_within([binary, "--help"], timeout_s, text=True, errors="replace")
    except OSError:
        return None
    if proc.timed_out:
        return None
    return proc.stdout + proc.stderr
