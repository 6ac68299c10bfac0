"""The launch stage of a replay on XLA's runners: one command line run where the runner lives, to its end.

On this host the runner runs as a child process, killed at the deadline; in an image it runs in a throw-away
container (:func:`xlarun.capture.backends.docker.run_in_image`) with the dump file's folder mounted read-only at its own
path. Either way its output lines go to the sink as they come, and what comes back is a :class:`RunnerExit`.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlarun import deadline
from xlarun.replay.runner_argv import RunnerCommand
from xlarun.replay.runner_site import RunnerSite

Sink = Callable[[str], None]


@dataclass
class RunnerExit:
    """How a runner's run ended: its exit code and output, or why it did not finish (``unfinished``)."""

    returncode: int
    output: str
    unfinished: str | None = None


def launch_runner(site: RunnerSite, command: RunnerCommand, path: Path, timeout_s: float | None, sink: Sink | None) -> RunnerExit:
    """Run ``command`` on ``site``, streaming its output lines to ``sink``; ``path`` is the dump file it reads."""
    if site.image is None:
        return _run_here(site.runner, command.argv, timeout_s, sink)
    from xlarun.capture.backends.docker import run_in_image

    lines: list[str] = []

    def collect(_stream: str, text: str) -> None:
        lines.append(text)
        if sink:
            for line in text.splitlines():
                sink(line)

    gpus = "all" if command.gpus else None
    launched = run_in_image(site.image, command.argv, read_only=[path.parent], timeout_s=timeout_s, gpus=gpus, sink=collect)
    if launched.exit_code is None:
        why = launched.error or f"{site.runner} in {site.image} did not finish ({launched.status.value})"
        return RunnerExit(-9, "".join(lines), why)
    return RunnerExit(launched.exit_code, "".join(lines))


def _run_here(runner: str, argv: list[str], timeout_s: float | None, sink: Sink | None) -> RunnerExit:
    lines: list[str] = []
    proc = deadline.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines, sink), daemon=True)
    reader.start()
    done = deadline.wait_within(proc, timeout_s)  # past it, the runner and all it started are killed
    reader.join()
    unfinished = f"{runner} ran past the {timeout_s:g} s timeout and was killed" if done.timed_out else None
    return RunnerExit(done.returncode, "".join(lines), unfinished)


def _pump(stream: Any, lines: list[str], sink: Sink | None) -> None:
    for line in stream:
        lines.append(line)
        if sink:
            sink(line.rstrip("\n"))
