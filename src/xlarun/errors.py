"""The one error family of xlarun, and the exit codes the CLI maps it to.

Every failure a user can act on is an :class:`XlarunError` whose message says what went wrong
and, in ``hint``, what to do about it. The CLI prints it as one red line and exits with
``exit_code``. Anything else escaping the library is a bug: the CLI prints a traceback and
writes a crash log.
"""

from __future__ import annotations

import errno
import os
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """Exit codes of the ``xlarun`` command, documented in ``xlarun --help`` and the README."""

    OK = 0
    #: The answer is "no": the job ran and failed or made no dump (capture, a batch cell), a replay miscompared,
    #: bisect found the pass that changed the numbers, `find` matched nothing, `check` found damage, `rm` was declined.
    FAILED = 1
    #: Bad command line, bad spec, missing or unreadable input, unknown or ambiguous REF.
    USAGE = 2
    #: A component xlarun drives failed or is missing (Docker daemon, graphviz, jaxlib, a replay engine).
    ENVIRONMENT = 3
    #: A bug in xlarun itself; a crash log is written.
    INTERNAL = 4
    #: The job ran past its timeout and was killed (same code as coreutils ``timeout``).
    TIMEOUT = 124
    #: Stopped by SIGHUP (the terminal went away); whatever was captured so far is archived.
    HANGUP = 129
    #: Interrupted with Ctrl-C (SIGINT); whatever was captured so far is archived.
    INTERRUPTED = 130
    #: Stopped by SIGTERM (``kill``, ``timeout``, a job scheduler); whatever was captured so far is archived.
    TERMINATED = 143


def mark_json_reported(exc: BaseException) -> None:
    """Say that a command already printed its one JSON document about ``exc`` (``--json``), so the CLI's error
    handler prints no second one. Any exception may carry the mark (a KeyboardInterrupt, a bug)."""
    setattr(exc, "json_reported", True)  # noqa: B010 (BaseException declares no such attribute)


def json_reported(exc: BaseException) -> bool:
    return bool(getattr(exc, "json_reported", False))


def error_document(exc: BaseException, crash_log: str | None = None) -> dict:
    """What ``--json`` prints about a failure, the same for every command: ``error``, ``hint``, ``exit_code`` (a
    command adds its own keys, e.g. ``verdict: null``). ``crash_log``: where a bug's traceback was written."""
    if isinstance(exc, XlarunError):
        return {"error": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}
    if isinstance(exc, KeyboardInterrupt):
        return {"error": "interrupted", "hint": None, "exit_code": int(ExitCode.INTERRUPTED)}
    hint = f"the traceback is in {crash_log}; please report it" if crash_log else "please report it"
    return {"error": f"internal error: {exc!r}", "hint": hint, "exit_code": int(ExitCode.INTERNAL)}


class XlarunError(Exception):
    """Base of every error a user can act on."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None, *, exit_code: ExitCode | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def one_line(self) -> str:
        """The message and the hint as a single line for a terminal."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class SpecError(XlarunError):
    """A run spec is malformed: the message starts with ``file:line:col key.path:``.

    ``problems`` lists every problem found, the first of which is the message.
    """

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None, *, problems: list[str] | None = None):
        super().__init__(message, hint)
        self.problems = problems or [message]


class InputError(XlarunError):
    """A file, folder, argument or reference given by the user is missing, unreadable or invalid."""

    exit_code = ExitCode.USAGE


class RefError(InputError):
    """A REF names no run or module, or names more than one (the message lists candidates)."""


class StoreError(XlarunError):
    """The run store cannot be opened or written (permissions, a newer schema, a full disk)."""

    exit_code = ExitCode.ENVIRONMENT


class EnvironmentProblem(XlarunError):
    """Something xlarun needs from the machine is missing or broken (Docker, dot, jaxlib, a runner)."""

    exit_code = ExitCode.ENVIRONMENT


class JobFailed(XlarunError):
    """The captured job exited non-zero, timed out or was interrupted. The run is archived anyway."""

    exit_code = ExitCode.FAILED


class ReplayMismatch(XlarunError):
    """A replay's result differs from the reference beyond the error bounds."""

    exit_code = ExitCode.FAILED


class EngineError(XlarunError):
    """A replay engine could not compile or run a module."""

    exit_code = ExitCode.ENVIRONMENT


#: What to do about each :func:`write_trouble`.
_WRITE_HINTS = {
    "the disk is full": "free space on that disk (`xlarun rm` and `xlarun gc` free the store's)",
    "the store is read-only": "writing needs a writable store: give another with --store or XLARUN_STORE",
    "no permission to write into the store": "writing needs a writable store: give another with --store or XLARUN_STORE",
}


def disk_trouble(exc: BaseException) -> str | None:
    """'the disk is full' (no space, a quota) or 'the file system is read-only' for an error met writing, from an
    OSError's errno or SQLite's words; None for any other error. The one place a full disk is recognised."""
    number, text = getattr(exc, "errno", None), str(exc)
    if number in (errno.ENOSPC, errno.EDQUOT) or "database or disk is full" in text or "the disk is full" in text:
        return "the disk is full"
    if number == errno.EROFS or "readonly database" in text or "read-only file system" in text:
        return "the file system is read-only"
    return None


def write_trouble_words(exc: BaseException) -> str | None:
    """'the disk is full', 'the store is read-only' or 'no permission to write into the store' for an error met
    writing into the store; None for any other error."""
    why = disk_trouble(exc)
    if why == "the disk is full":
        return why
    if why or "read-only" in str(exc):
        return "the store is read-only"
    return "no permission to write into the store" if getattr(exc, "errno", None) in (errno.EACCES, errno.EPERM) else None


def write_trouble(exc: BaseException, doing: str) -> StoreError | None:
    """:func:`write_trouble_words` met while ``doing`` something, as one :class:`StoreError` line saying so."""
    why = write_trouble_words(exc)
    return StoreError(f"{doing}: {why}", _WRITE_HINTS[why]) if why else None


def os_error_words(exc: OSError) -> str:
    """An OSError met reading or removing a store's file, in words: a permission problem is named as one, with the
    user; a read-only file system as such."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied to user {current_user()}"
    return "the store is read-only" if exc.errno == errno.EROFS else (exc.strerror or str(exc))


def current_user() -> str:
    """The name of the user this process runs as (its uid where it has no name): permission problems name it."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def check_room(where: Path, need: int, what: str, hint: str = "free space on that disk, or write somewhere else") -> None:
    """Refuse (StoreError, exit 3) to start writing ``need`` bytes below ``where`` (a folder, made or not) into a
    disk with less free: better than a full disk half-way through. Where the disk cannot be asked, nothing is said."""
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        st = os.statvfs(where)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise StoreError(
            f"the disk is full for {what}: it needs at least {_mib(need)}, {_mib(free)} are free",
            f"{hint}; nothing was written",
        )


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
