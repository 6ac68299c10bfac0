"""Drivers for XLA's own replay tools, ``run_hlo_module`` and ``hlo_runner_main``.

Neither ships prebuilt (build them from XLA with bazel; NVIDIA's JAX images carry
``hlo_runner_main``). A runner is found, in order, at ``ReplayOptions.runner_path``, in the
``XLARUN_RUN_HLO_MODULE`` / ``XLARUN_HLO_RUNNER_MAIN`` environment variable, or on ``PATH``.

The command line comes from :mod:`.runner_argv` (where bundles get theirs too), a pure function of
the runner, the file, the options and the flags the binary defines, which its ``--help`` lists: a flag
only newer XLA versions define is passed only to a binary that lists it, else left out with a warning
(an older runner would take it for an input file). The container backend runs the same argv in an image. The verdict
comes from the exit code, never from the wording, which changed across XLA versions:

- ``run_hlo_module``: 0 ok (match when there is a reference), 255 (-1) a run miscompared,
  1 a flag or input error, anything else (or a signal) an engine failure;
- ``hlo_runner_main``: 0 ok, anything else an engine failure (it never compares).

``## Execution time, file=F repeat=I duration=Nns`` lines (``hlo_runner_main
--profile_execution``) become the run times.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import partitioning_of_file
from xlarun.replay.result import ReplayResult
from xlarun.replay.runner_argv import (
    GPU_PLATFORMS,
    VERSION_SPECIFIC,
    flags_from_usage,
    input_format,
    is_snapshot,
    runner_command,
    xla_platform,
)

RUNNERS = {"run_hlo_module": "XLARUN_RUN_HLO_MODULE", "hlo_runner_main": "XLARUN_HLO_RUNNER_MAIN"}
MISCOMPARE_EXIT_CODES = (255, -1)
EXECUTION_TIME = re.compile(r"## Execution time, file=(?P<file>.*?) repeat=(?P<repeat>\d+) duration=(?P<ns>\d+)ns")
#: Seconds a runner may take to print its --help before its flags count as unknown.
USAGE_TIMEOUT_S = 60.0


def find_runner(runner: str, explicit: str | None = None) -> str:
    """The runner binary's path: ``explicit``, then its XLARUN_* variable, then PATH."""
    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", f"use one of: {', '.join(RUNNERS)}")
    for candidate, origin in ((explicit, "the given path"), (os.environ.get(RUNNERS[runner]), RUNNERS[runner])):
        if candidate:
            if Path(candidate).is_file() and os.access(candidate, os.X_OK):
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


def command_line(
    runner: str, path: str | Path, options: ReplayOptions, binary: str | None = None, defined: Collection[str] | None = None
) -> list[str]:
    """The exact argv that runs ``path`` with ``options`` on ``runner`` (see :func:`.runner_argv.runner_command`)."""
    return runner_command(runner, path, options, binary=binary, defined=defined).argv


def defined_flags(binary: str, timeout_s: float | None = None) -> frozenset[str] | None:
    """The flags a runner binary defines, from its ``--help`` (None when it lists none or does not answer).

    Asked once per binary file (its path, size and modification time) in a process."""
    limit = USAGE_TIMEOUT_S if timeout_s is None else min(timeout_s, USAGE_TIMEOUT_S)
    try:
        stat = os.stat(binary)
    except OSError:
        return None
    return _usage_flags(os.path.realpath(binary), stat.st_size, stat.st_mtime_ns, limit)


@functools.lru_cache(maxsize=32)
def _usage_flags(binary: str, _size: int, _mtime_ns: int, timeout_s: float) -> frozenset[str] | None:
    try:
        proc = subprocess.run([binary, "--help"], capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return flags_from_usage(proc.stdout + proc.stderr)


def parse_execution_times(output: str) -> list[float]:
    """Seconds per repeat from ``## Execution time ... duration=Nns`` lines, in repeat order."""
    times = {int(m["repeat"]): int(m["ns"]) / 1e9 for m in EXECUTION_TIME.finditer(output)}
    return [times[r] for r in sorted(times)]


def result_from_run(
    runner: str,
    argv: list[str],
    returncode: int,
    output: str,
    options: ReplayOptions,
    path: str | Path,
    left_out: Sequence[str] = (),
) -> ReplayResult:
    """Turn a finished runner process (here or in a container) into a ReplayResult.

    ``left_out``: the flags the command line could not carry (:attr:`.RunnerCommand.left_out`), as warnings."""
    name = Path(path).name
    result = ReplayResult(
        engine=runner,
        platform=options.platform,
        source=str(path),
        input_kind=_input_kind(runner, path),
        command=list(argv),
        log=output,
        run_times_s=parse_execution_times(output),
        arguments="snapshot" if input_format(runner, path) == "snapshot_proto_binary" and options.inputs != "fake" else "fake",
    )
    result.warnings += left_out
    has_reference = runner == "run_hlo_module" and bool(options.reference_platform)
    partitioning = partitioning_of_file(path)
    if partitioning.devices > 1:  # the runner is given no device count: it runs the module on one device
        result.warnings.append(
            f"{name} was compiled for {partitioning.devices} devices ({partitioning.describe()}); {runner} runs it on one "
            "device, where its collectives do not do what they did (the built-in engine, --engine pjrt, runs it on "
            f"{partitioning.devices})"
        )
    if options.reference_platform and runner == "hlo_runner_main":
        result.warnings.append("hlo_runner_main does not compare with a reference platform; no comparison was made")
    if returncode == 0:
        result.verdict = "match" if has_reference else "ran"
        result.compared_with = [f"platform {options.reference_platform}"] if has_reference else []
    elif runner == "run_hlo_module" and returncode in MISCOMPARE_EXIT_CODES:
        result.verdict = "mismatch"
        result.compared_with = [f"platform {options.reference_platform or 'Interpreter'}"]
        result.mismatches = [f"{runner} reported a miscompare (exit {returncode}) for {name}"]
    else:
        result.verdict = "engine-error"
        result.error = _failure(runner, returncode, output)
    return result


def _input_kind(runner: str, path: str | Path) -> str:
    fmt = input_format(runner, path)
    if fmt == "snapshot_proto_binary" or is_snapshot(path):
        return "snapshot"
    return "proto" if fmt in ("pb", "pbtxt", "proto_binary", "proto_text") else "text-large-constants"


def _failure(runner: str, returncode: int, output: str) -> str:
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
    if returncode < 0:
        what = f"was killed by signal {-returncode}"
    elif returncode == 1:
        what = "rejected its command line or input (exit 1)"
    else:
        what = f"failed (exit {returncode})"
    return f"{runner} {what}" + (f": {last}" if last else "")


def run_runner(runner: str, path: str | Path, options: ReplayOptions, sink: Callable[[str], None] | None = None) -> ReplayResult:
    """Run a runner binary on ``path``, streaming its output lines to ``sink``, and judge it."""
    if options.image:
        return _run_runner_in_image(runner, options.image, path, options, sink)
    binary = find_runner(runner, options.runner_path)
    # a runner whose flags are the same in every supported XLA is not asked for them
    defined = defined_flags(binary, options.timeout_s) if VERSION_SPECIFIC.get(runner) else None
    command = runner_command(runner, path, options, binary=binary, defined=defined)
    lines: list[str] = []
    proc = subprocess.Popen(command.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines, sink), daemon=True)
    reader.start()
    try:
        returncode = proc.wait(timeout=options.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        returncode, timed_out = proc.wait(), True
    reader.join()
    result = result_from_run(runner, command.argv, returncode, "".join(lines), options, path, command.left_out)
    if timed_out:
        result.verdict, result.error = "engine-error", f"{runner} ran past the {options.timeout_s:g} s timeout and was killed"
    return result


def _run_runner_in_image(
    runner: str, image: str, path: str | Path, options: ReplayOptions, sink: Callable[[str], None] | None
) -> ReplayResult:
    """The same command line, run inside ``image`` (``options.image``) with the dump file's folder mounted read-only."""
    from xlarun.capture.backends.docker import run_in_image
    from xlarun.capture.images import find_runner_in_image

    binary = options.runner_path or find_runner_in_image(image, runner)
    if not binary:
        raise EnvironmentProblem(
            f"image {options.image} has no {runner}",
            "NVIDIA's JAX images carry hlo_runner_main; or name the binary's path in the image with --runner",
        )
    path = Path(path).absolute()
    defined = _defined_flags_in_image(image, binary) if VERSION_SPECIFIC.get(runner) else None
    command = runner_command(runner, path, options, binary=binary, defined=defined)
    lines: list[str] = []

    def collect(_stream: str, text: str) -> None:
        lines.append(text)
        if sink:
            for line in text.splitlines():
                sink(line)

    gpus = "all" if xla_platform(options.platform).run_hlo_module in GPU_PLATFORMS else None
    launched = run_in_image(image, command.argv, read_only=[path.parent], timeout_s=options.timeout_s, gpus=gpus, sink=collect)
    output = "".join(lines)
    if launched.exit_code is None:
        result = result_from_run(runner, command.argv, -9, output, options, path, command.left_out)
        result.verdict, result.error = (
            "engine-error",
            launched.error or f"{runner} in {options.image} did not finish ({launched.status.value})",
        )
        return result
    return result_from_run(runner, command.argv, launched.exit_code, output, options, path, command.left_out)


@functools.lru_cache(maxsize=32)
def _defined_flags_in_image(image: str, binary: str) -> frozenset[str] | None:
    """:func:`defined_flags` for a runner inside ``image`` (one short container run, once per image in a process)."""
    from xlarun.capture.backends.docker import run_in_image

    usage: list[str] = []
    run_in_image(image, [binary, "--help"], timeout_s=USAGE_TIMEOUT_S, sink=lambda _stream, text: usage.append(text))
    return flags_from_usage("".join(usage))


def _pump(stream, lines: list[str], sink: Callable[[str], None] | None) -> None:
    for line in stream:
        lines.append(line)
        if sink:
            sink(line.rstrip("\n"))
