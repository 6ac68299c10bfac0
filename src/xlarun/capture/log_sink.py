"""The job's output, written into the run's log files and, when asked, to this terminal as it comes."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from xlarun.capture.flags import without_donation_noise


class LogSink:
    """Writes the job's output into the run's log files and, if asked, to this terminal as it comes."""

    def __init__(self, run_dir: Path, echo: bool, prefix: str = ""):
        # open for the job's whole life: close() ends them
        self.files: dict[str, Any] = {name: open(run_dir / f"{name}.log", "w", encoding="utf-8") for name in ("stdout", "stderr")}  # noqa: SIM115
        self.echo = echo
        self.prefix = prefix
        self.lock = threading.Lock()
        self.error: str | None = None
        self.hidden = 0  # XLA's donated-snapshot lines kept off the console (they are in the logs)

    def __call__(self, stream: str, text: str) -> None:
        with self.lock:
            if self.files[stream] is not None:
                try:
                    self.files[stream].write(text)
                    self.files[stream].flush()
                except OSError as exc:  # a full disk: keep reading the job's output (else it blocks), say so
                    self.error = f"the job's {stream} log is cut short: {exc.strerror or exc}"
                    self._close(stream)
            if self.echo:
                text, hidden = without_donation_noise(text)
                self.hidden += hidden
                target = sys.stdout if stream == "stdout" else sys.stderr
                if self.prefix:
                    text = "".join(f"{self.prefix}{line}" for line in text.splitlines(keepends=True))
                try:
                    target.write(text)
                    target.flush()
                except (OSError, ValueError):  # the terminal went away (SIGHUP): the logs still get everything
                    self.echo = False

    def close(self) -> None:
        for stream in self.files:
            self._close(stream)

    def _close(self, stream: str) -> None:
        handle, self.files[stream] = self.files[stream], None
        if handle is not None:
            try:
                handle.close()
            except OSError as exc:
                self.error = f"the job's {stream} log is cut short: {exc.strerror or exc}"
