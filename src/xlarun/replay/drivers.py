"""Drivers for XLA's own replay tools, ``run_hlo_module`` and ``hlo_runner_main``.

Neither ships prebuilt (build them from XLA with bazel; NVIDIA's JAX images carry
``hlo_runner_main``). A runner is found, in order, at ``ReplayOptions.runner_path``, in the
``XLARUN_RUN_HLO_MODULE`` / ``XLARUN_HLO_RUNNER_MAIN`` environment variable, or on ``PATH``.

The command line is built by :func:`command_line`, a pure function of the runner, the file and
the options, so the container backend can run the same argv inside an image. The verdict
comes from the exit code, never from the wording, which changed across XLA versions:

- ``run_hlo_module``: 0 ok (match when there is a reference), 255 (-1) a run miscompared,
  1 a flag or input error, anything else (or a signal) an engine failure;
- ``hlo_runner_main``: 0 ok, anything else an engine failure (it never compares).

``## Execution time, file=F repeat=I duration=Nns`` lines (``hlo_runner_main
--profile_execution``) become the run times.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import partitioning_of_file
from xlarun.replay.result import ReplayResult

RUNNERS = {"run_hlo_module": "XLARUN_RUN_HLO_MODULE", "hlo_runner_main": "XLARUN_HLO_RUNNER_MAIN"}
#: xlarun platform -> the name XLA's PlatformUtil takes.
XLA_PLATFORM_NAMES = {"cpu": "CPU", "host": "CPU", "cuda": "CUDA", "gpu": "CUDA", "rocm": "ROCM", "interpreter": "Interpreter"}
MISCOMPARE_EXIT_CODES = (255, -1)
EXECUTION_TIME = re.compile(r"## Execution time, file=(?P<file>.*?) repeat=(?P<repeat>\d+) duration=(?P<ns>\d+)ns")
_SNAPSHOT_NAME = re.compile(r"(\.snapshot\.-?\d+\.pb|hlo_snapshot\.pb)(\.gz)?$")
_OPTIMIZED_NAME = re.compile(r"after_optimizations")


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


def input_format(runner: str, path: str | Path) -> str:
    """The ``--input_format`` value for a dump file, from its name."""
    name = Path(path).name.removesuffix(".gz")
    if runner == "run_hlo_module":
        if name.endswith(".pbtxt"):
            return "pbtxt"
        return "pb" if name.endswith(".pb") else "hlo"
    if _SNAPSHOT_NAME.search(name):
        return "snapshot_proto_binary"
    if name.endswith(".pbtxt"):
        return "proto_text"
    return "proto_binary" if name.endswith(".pb") else "text"


def _platform(name: str) -> str:
    try:
        return XLA_PLATFORM_NAMES[name.lower()]
    except KeyError:
        raise InputError(f"unknown platform {name!r}", f"use one of: {', '.join(XLA_PLATFORM_NAMES)}") from None


def command_line(runner: str, path: str | Path, options: ReplayOptions, binary: str | None = None) -> list[str]:
    """The exact argv that runs ``path`` with ``options`` on ``runner`` (no file is read)."""
    binary = binary or runner
    # a snapshot holds the module as XLA executed it, i.e. after optimization
    optimized = bool(_OPTIMIZED_NAME.search(Path(path).name) or _SNAPSHOT_NAME.search(Path(path).name.removesuffix(".gz")))
    if runner == "run_hlo_module":
        argv = [
            binary,
            f"--platform={_platform(options.platform)}",
            f"--reference_platform={_platform(options.reference_platform) if options.reference_platform else ''}",
            f"--input_format={input_format(runner, path)}",
            f"--iterations={options.iterations}",
            f"--abs_error_bound={options.abs_error_bound:g}",
            f"--rel_error_bound={options.rel_error_bound:g}",
        ]
        if options.print_literals:
            argv.append("--print_literals=true")
        if optimized:
            argv.append("--run_test_hlo_passes=false")  # its passes already ran
        return [*argv, str(path)]
    if runner == "hlo_runner_main":
        fmt = input_format(runner, path)
        device = "gpu" if options.platform.lower() in ("cuda", "rocm", "gpu") else "host"
        argv = [binary, f"--device_type={device}", f"--input_format={fmt}", f"--num_repeats={options.iterations}"]
        if fmt != "snapshot_proto_binary" or options.inputs == "fake":
            argv.append("--hlo_argument_mode=use_random_inputs")
        if options.seed is not None:
            argv.append(f"--random_seed={options.seed}")
        if optimized:
            argv.append("--run_xla_backend_only=true")
        if options.print_literals:
            argv.append("--log_output=true")
        return [*argv, "--profile_execution=true", str(path)]
    raise InputError(f"unknown runner {runner!r}", f"use one of: {', '.join(RUNNERS)}")


def parse_execution_times(output: str) -> list[float]:
    """Seconds per repeat from ``## Execution time ... duration=Nns`` lines, in repeat order."""
    times = {int(m["repeat"]): int(m["ns"]) / 1e9 for m in EXECUTION_TIME.finditer(output)}
    return [times[r] for r in sorted(times)]


def result_from_run(
    runner: str, argv: list[str], returncode: int, output: str, options: ReplayOptions, path: str | Path
) -> ReplayResult:
    """Turn a finished runner process (here or in a container) into a ReplayResult."""
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
    if fmt == "snapshot_proto_binary" or _SNAPSHOT_NAME.search(Path(path).name.removesuffix(".gz")):
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
    argv = command_line(runner, path, options, binary=binary)
    lines: list[str] = []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines, sink), daemon=True)
    reader.start()
    try:
        returncode = proc.wait(timeout=options.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        returncode, timed_out = proc.wait(), True
    reader.join()
    result = result_from_run(runner, argv, returncode, "".join(lines), options, path)
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
    argv = command_line(runner, path, options, binary=binary)
    lines: list[str] = []

    def collect(_stream: str, text: str) -> None:
        lines.append(text)
        if sink:
            for line in text.splitlines():
                sink(line)

    gpus = "all" if _platform(options.platform) in ("CUDA", "ROCM") else None
    launched = run_in_image(image, argv, read_only=[path.parent], timeout_s=options.timeout_s, gpus=gpus, sink=collect)
    output = "".join(lines)
    if launched.exit_code is None:
        result = result_from_run(runner, argv, -9, output, options, path)
        result.verdict, result.error = (
            "engine-error",
            launched.error or f"{runner} in {options.image} did not finish ({launched.status.value})",
        )
        return result
    return result_from_run(runner, argv, launched.exit_code, output, options, path)


def _pump(stream, lines: list[str], sink: Callable[[str], None] | None) -> None:
    for line in stream:
        lines.append(line)
        if sink:
            sink(line.rstrip("\n"))
