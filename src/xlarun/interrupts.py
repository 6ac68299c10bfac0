"""The signals that stop a capture or a batch: SIGINT (Ctrl-C), SIGTERM (``kill``, ``timeout``, a job
scheduler) and SIGHUP (the terminal went away).

While the job runs, a stop signal sets :attr:`StopRequest.cancel`: the backend stops the job's whole
process group and the run is archived as ``interrupted``, with the signal's name in its manifest. While
runs are being archived (:meth:`StopRequest.archiving`), a signal is held: the commit finishes first, and
a one-line note says so; one more signal, sent at least :data:`SAME_REQUEST_S` later (the rest of a burst is
the same request), then stops xlarun at once, saying which staging folders are left and that ``xlarun
recover`` makes them runs (nothing is corrupted: a commit is one atomic rename).
A signal that was ignored when xlarun started (``nohup``, a background job) stays ignored.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: What stops a capture, in the order a user is likely to send them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: Signals within this many seconds of the one that put a commit on hold are the same request (Ctrl-C mashed,
#: or ``kill`` then ``kill -HUP`` from a script): they never escalate to stopping at once, so a burst cannot leave
#: a run uncommitted. One sent later, after the note that says so, stops xlarun at once.
SAME_REQUEST_S = 0.5


def exit_code_for(signal_name: str | None) -> int:
    """The exit code a shell expects after a signal: 128 + its number (130 for SIGINT, 143 SIGTERM, 129 SIGHUP)."""
    try:
        return 128 + int(signal.Signals[signal_name or "SIGINT"])
    except KeyError:
        return 128 + int(signal.SIGINT)


class StopRequest:
    """Whether, and by which signal, xlarun was asked to stop; shared by every capture it runs."""

    def __init__(self, cancel: threading.Event | None = None):
        self.cancel = cancel or threading.Event()
        self.received: list[int] = []
        self._archiving: dict[str, Path] = {}  # run id -> staging folder, while committing
        self._lock = threading.Lock()
        self._held_at: float | None = None  # when a signal first arrived while a commit was under way

    @property
    def signal_name(self) -> str | None:
        """The first stop signal received (``SIGTERM``...), or None (also when stopped by ``cancel`` alone)."""
        return signal.Signals(self.received[0]).name if self.received else None

    @contextmanager
    def archiving(self, run_id: str, staging: Path) -> Iterator[None]:
        """While inside, a run is being archived and committed: a signal waits for it (see the module doc)."""
        with self._lock:
            self._archiving[run_id] = staging
        try:
            yield
        finally:
            with self._lock:
                self._archiving.pop(run_id, None)

    def on_signal(self, signum: int, _frame: object = None) -> None:
        """Act on stop signal ``signum``: record it, cancel the job, and while archiving hold it (the first) or
        stop xlarun at once (the next). Called by :func:`stop_on_signals`' watcher thread, never from a
        signal handler, so a burst of signals cannot re-enter it (nor the locks it takes)."""
        self.received.append(signum)
        with self._lock:
            left = dict(self._archiving)
        if not left:
            self.cancel.set()
            return
        name = signal.Signals(signum).name
        if self._held_at is None:
            self._held_at = time.monotonic()
            _say(
                f"xlarun: {name} while archiving run {', '.join(left)}: finishing the commit first "
                f"(send it again to stop now; what is not committed then stays in staging/ for `xlarun recover`)"
            )
            self.cancel.set()
            return
        if time.monotonic() - self._held_at < SAME_REQUEST_S:
            return  # part of the burst that put the commit on hold
        for run_id, staging in left.items():
            _say(
                f"xlarun: {name}: stopped while archiving; run {run_id} is not committed, its files are in {staging}: "
                f"`xlarun recover --store {staging.parent.parent}` makes it a run marked incomplete"
            )
        os._exit(128 + signum)  # like kill -9, which the store survives: commits are atomic renames


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone (SIGHUP)
        pass


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler: does nothing. The C-level handler has already written the signal's number
    to the wakeup pipe (:func:`signal.set_wakeup_fd`), which is all a signal does here: async-signal-safe,
    and a burst of signals (Ctrl-C mashed, SIGINT and SIGTERM a few ms apart) cannot re-enter a lock."""


def _watch(read_fd: int, request: StopRequest) -> None:
    """Read the signal numbers the wakeup pipe carries and act on each, in order, in this one thread."""
    while True:
        try:
            chunk = os.read(read_fd, 512)
        except InterruptedError:
            continue
        except OSError:
            return
        if not chunk:
            return  # the write end closed: stop_on_signals is leaving
        for signum in chunk:
            if signum in STOP_SIGNALS:
                request.on_signal(signum)


#: Ctrl-Cs received before :func:`stop_on_signals` routed them (see :func:`remember_early_interrupts`).
_EARLY: list[int] = []


def _remembered_interrupt(signum: int, _frame: object) -> None:
    _EARLY.append(signum)
    raise KeyboardInterrupt  # what Python's own handler does


def remember_early_interrupts() -> None:
    """From the CLI's first line: a Ctrl-C still raises KeyboardInterrupt, as Python's handler does, and is also
    remembered, so that one a library swallows on the way (pydantic building a model, coverage's start-up
    hook) still stops the capture that follows: :func:`stop_on_signals` acts on it at once. A Ctrl-C ignored
    (``nohup``) or routed elsewhere is left alone."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _remembered_interrupt)


@contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """Route SIGINT, SIGTERM and SIGHUP to ``request`` while inside (from the main thread; elsewhere a no-op).
    Signals ignored when entering stay ignored; the previous handlers come back on exit.

    The handler only records: the signal's number goes down a pipe (:func:`signal.set_wakeup_fd`, written
    by CPython's C-level handler) and a watcher thread acts on it (:meth:`StopRequest.on_signal`), so the
    main thread may be anywhere -- waiting on the job, inside a lock, committing -- when signals arrive."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(read_fd, True)
    watcher = threading.Thread(target=_watch, args=(read_fd, request), name="xlarun-signals", daemon=True)
    watcher.start()
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {}
    try:
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current is signal.SIG_IGN:
                continue  # nohup, or a background job: the user asked for this signal to be ignored
            previous[sig] = signal.signal(sig, _noted)
        if _EARLY and signal.SIGINT in previous:  # a Ctrl-C before now that did not stop xlarun: it stops the job
            request.on_signal(_EARLY[0])
        _EARLY.clear()
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # the watcher reads what is left, then the end of the pipe
        watcher.join(timeout=10)
        os.close(read_fd)


def process_alive(pid: int | None) -> bool:
    """Whether process ``pid`` still runs; a zombie (exited, not yet reaped) counts as gone."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs, as another user
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return not Path("/proc").is_dir()  # no /proc here: trust kill(); else it ended between the two looks
    return state not in ("Z", "X")


#: Set in a local job's environment to its staging folder: every process the job starts inherits it unless it
#: clears its environment. How ``xlarun recover`` tells a folder whose job still runs, and how a local job's
#: processes are found where its keeper cannot hold them (see :mod:`xlarun.capture.backends.job_keeper`).
JOB_MARK = "XLARUN_JOB_DIR"


def job_processes(run_dir: Path | str) -> list[int]:
    """The live processes (not zombies) whose environment marks them as part of the job staged in ``run_dir``,
    the processes of a many-process job among them (each marked ``run_dir/processes/process-K``)."""
    needle = f"{JOB_MARK}={run_dir}".encode() + b"\0"
    of_a_process = b"\0" + f"{JOB_MARK}={run_dir}{os.sep}processes{os.sep}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # ended meanwhile, or another user's
            continue
        mine = (b"\0" + needle) in (b"\0" + environ) or of_a_process in (b"\0" + environ)
        if mine and process_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def stop_processes(find: Callable[[], list[int]], grace_s: float) -> list[int]:
    """SIGTERM every process ``find`` names, then, after ``grace_s`` or once they are gone, SIGKILL whatever it
    still names (one started meanwhile too), until it names none; returns the processes that got the SIGTERM."""
    pids = find()
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if process_alive(pid)]
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        left = find()
        if not left:
            break
        for pid in left:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    return pids


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
