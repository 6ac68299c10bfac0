"""The verdict of a replay on XLA's runners, from the exit code, never from the wording (which changed across XLA versions):

- ``run_hlo_module``: 0 ok (match when there is a reference), 255 (-1) a run miscompared,
  1 a flag or input error, anything else (or a signal) an engine failure;
- ``hlo_runner_main``: 0 ok, anything else an engine failure (it never compares).

``## Execution time, file=F repeat=I duration=Nns`` lines (``hlo_runner_main --profile_execution``) become the run times.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from xlarun.replay.options import ReplayOptions
from xlarun.replay.partitioned import partitioning_of_file
from xlarun.replay.result import ReplayResult
from xlarun.replay.runner_argv import input_format, is_snapshot

MISCOMPARE_EXIT_CODES = (255, -1)
EXECUTION_TIME = re.compile(r"## Execution time, file=(?P<file>.*?) repeat=(?P<repeat>\d+) duration=(?P<ns>\d+)ns")


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
    unfinished: str | None = None,
) -> ReplayResult:
    """Turn a finished runner process (here or in a container) into a ReplayResult.

    ``left_out``: the flags the command line could not carry (:attr:`.RunnerCommand.left_out`), as warnings;
    ``unfinished``: why the run did not finish (killed at its deadline, say), which makes the verdict an engine error."""
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
    if unfinished is not None:
        result.verdict, result.error = "engine-error", unfinished
    elif returncode == 0:
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
