"""One child process that answers requests as JSON lines: the replay worker and the compile probe are both one.

XLA ends its process on a ``CHECK`` failure, and a replay can hang or run out of memory, so that work runs in a child
that a crash cannot take xlarun (or a notebook's kernel) down with. Both sides live here:

- the parent's :class:`Child` starts it (``python -m MODULE ARGS... PARENT_PID``), sends a request, reads its messages
  up to a deadline, tells how it ended (exit status and stderr), and stops it: its stdin is closed first, so it exits
  as a program does (its atexit work done), and it is killed after :data:`GRACE_S`;
- the child's :func:`serve` answers each request with a handler. An :class:`~xlarun.errors.XlarunError` travels back
  as ``{"error": ...}``, a bug as ``{"bug": traceback}``; a ``MemoryError`` ends the child with status 3. The child
  writes its answers on a copy of stdout and points stdout at stderr, so nothing XLA prints reaches the answers; it
  dies with its parent (Linux's parent-death signal) and never writes a core file.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import IO

Send = Callable[[dict], None]
#: Seconds an idle child is given to end by itself once its stdin is closed, before it is killed.
GRACE_S = 2.0


class Child:
    """The parent's side of one child process; ``folder`` (the caller's temporary folder) holds its stderr."""

    def __init__(self, module: str, folder: str) -> None:
        self.module, self.folder = module, folder
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._stderr: IO[bytes] | None = None
        self._buffer = b""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, args: list[str], env: dict[str, str] | None = None) -> None:
        """Start the child (stopping the one running), with ``env`` over this process's environment."""
        self.stop()
        # O_APPEND: truncating it between requests is safe while the child writes
        self._stderr = open(os.path.join(self.folder, "stderr"), "a+b")  # noqa: SIM115 (closed by stop)
        self._stderr.truncate(0)
        self.starts += 1
        child_env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, *args, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env,
        )
        self._buffer = b""

    def send(self, request: dict) -> bool:
        """Send one request, its stderr cleared first; False when the child is gone."""
        proc, stderr = self._running()
        stderr.truncate(0)
        assert proc.stdin is not None  # a pipe: Popen was given stdin=PIPE
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def receive(self, deadline: float) -> dict | None:
        """The child's next message, or None when it closed its channel (it died) or ``deadline`` (monotonic) passed."""
        import time

        proc, _ = self._running()
        assert proc.stdout is not None  # a pipe: Popen was given stdout=PIPE
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def ended(self, *, kill: bool) -> tuple[int, str]:
        """How the child ended: (its exit status, negative for a signal; its stderr since the last request). ``kill``
        when it ran out of time. The child is stopped."""
        proc, stderr_file = self._running()
        if kill:
            proc.kill()
        proc.wait()
        stderr_file.seek(0)
        stderr = stderr_file.read().decode("utf-8", errors="replace")
        self.stop()
        return proc.returncode, stderr

    def stop(self, grace_s: float = GRACE_S) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:  # a closed stdin ends the child's loop: it exits as a program does (its atexit work done)
                self.proc.stdin.close()
                self.proc.wait(timeout=grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _running(self) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
        assert self.proc is not None and self._stderr is not None, "the child was started"
        return self.proc, self._stderr


def serve(handle: Callable[[dict, Send], dict], parent: int, address_space: int = 0) -> int:
    """The child's loop: each line of stdin is a request, answered with ``handle(request, send)``'s dict (``send``
    writes the messages that come before it: log lines, stages). ``address_space``: RLIMIT_AS in bytes, 0 for none."""
    import resource

    from xlarun.errors import XlarunError

    _die_with_parent(parent)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash must not write a core file the size of the process
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the answers

    def send(message: dict) -> None:
        channel.write((json.dumps(message) + "\n").encode())
        channel.flush()

    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            send(handle(request, send))
        except XlarunError as exc:
            error = {"class": type(exc).__name__, "message": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}
            send({"error": error})
        except MemoryError:
            sys.stderr.write("MemoryError\n")
            sys.stderr.flush()
            os._exit(3)  # the parent reads it as running out of memory
        except Exception:
            import traceback

            send({"bug": traceback.format_exc()})
    return 0


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this child when the process that started it dies (a killed xlarun leaves no engine behind)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed stdin still ends the loop between requests
        return
    if os.getppid() != parent:
        os._exit(1)
