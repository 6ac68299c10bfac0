"""What every backend takes and gives: a :class:`Job` in, a :class:`LaunchResult` out.

A backend runs one job: the script, with the environment composed by :mod:`xlarun.capture.flags`,
writing its dump into the run's staging folder. Paths the job sees can differ from the host's
(inside a container the run folder is mounted elsewhere), so each backend says where the job
will see the run folder through :meth:`Backend.job_paths`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from xlarun.store.rows import RunStatus


@dataclass(frozen=True)
class JobPaths:
    """Folders of one run as the *job* sees them (host paths for local, mount points in a container)."""

    run_dir: str
    dump_dir: str  # --xla_dump_to
    tf_graph_dir: str  # TF_DUMP_GRAPH_PREFIX
    jax_ir_dir: str  # JAX_DUMP_IR_TO
    torch_xla_dir: str  # XLA_SAVE_TENSORS_FILE lives here
    poplar_report_dir: str  # POPLAR_ENGINE_OPTIONS autoReport.directory

    @classmethod
    def under(cls, run_dir: str, sep: str = "/") -> JobPaths:
        """The standard layout below ``run_dir``: ``dump/``, ``tf_graphs/``, ``jax_ir/``, ``torch_xla/``, ``poplar/``."""
        base = run_dir.rstrip(sep)
        return cls(
            run_dir=base,
            dump_dir=f"{base}{sep}dump",
            tf_graph_dir=f"{base}{sep}tf_graphs",
            jax_ir_dir=f"{base}{sep}jax_ir",
            torch_xla_dir=f"{base}{sep}torch_xla",
            poplar_report_dir=f"{base}{sep}poplar",
        )


@dataclass
class Job:
    """One launch: what to run, with which environment, where, for how long."""

    argv: list[str]  # interpreter, script and its arguments, as the job sees them
    env: dict[str, str]  # the complete environment of the job
    cwd: Path  # working directory on the host
    run_dir: Path  # the run's staging folder on the host (dump/, logs, ...)
    timeout_s: float | None = None
    script_dir: Path | None = None  # the folder holding the script (mounted read-only in containers)
    #: Set by the caller to stop the job (a batch's Ctrl-C arrives in the main thread, jobs run in others);
    #: a backend that sees it set stops the job and reports INTERRUPTED.
    cancel: threading.Event = field(default_factory=threading.Event)
    #: Called once in the launching thread as soon as the job has started (the caller gets ready for what
    #: follows the job while it runs: with a short job, this is time the capture would otherwise add).
    while_running: Callable[[], None] | None = None

    def get_ready(self) -> None:
        """Call :attr:`while_running`, once the job runs (backends call this). Only getting ready: whatever
        failed in it fails again, and is reported, after the job, so nothing here stops the job."""
        if self.while_running is not None:
            try:
                self.while_running()
            except Exception:
                pass


@dataclass
class LaunchResult:
    """What a backend reports after the job has ended."""

    status: RunStatus
    exit_code: int | None  # None when the job never started or was killed without one
    started: str  # ISO-8601 UTC
    ended: str
    error: str | None = None  # why the job could not run (status ERROR), in words
    details: dict[str, object] = field(default_factory=dict)  # backend facts for the manifest (image id, host...)


#: Called with each chunk of output: ("stdout" | "stderr", text).
OutputSink = Callable[[str, str], None]


class Backend(Protocol):
    """A place to run jobs."""

    kind: str

    def job_paths(self, run_dir: Path) -> JobPaths:
        """Where the job will see the run folder and its output folders."""
        ...

    def launch(self, job: Job, sink: OutputSink) -> LaunchResult:
        """Run the job to its end; stream output to ``sink``; never raise for a job that fails or times out.

        On Ctrl-C (``KeyboardInterrupt``) it stops the job and returns status INTERRUPTED, so the caller
        can archive what was captured. When the job cannot be started at all it returns status ERROR
        with ``error`` set (the caller archives that too), or raises :class:`xlarun.errors.EnvironmentProblem`
        when nothing about the run is worth keeping.
        """
        ...
