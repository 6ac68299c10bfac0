"""A process of a many-process job that raised: told from one stopped because another failed.

A process whose script raises prints its traceback and should exit 1; but a ``jax.distributed`` process then runs
jax's exit hook, whose shutdown barrier waits for the peers it lost, and they wait in a collective for it: the
job hangs until its timeout, and every process would read "timed out" or "interrupted". So each process runs its
script under a small bootstrap (``python -c BOOTSTRAP MARK SCRIPT ARGS``, as the profiler's does; the script sees
its own ``sys.argv`` and ``sys.path[0]``) whose ``sys.excepthook`` writes the exception's last line to the file
MARK, then prints the traceback as Python would (the bootstrap's frames left out). A process with that mark is
"failed" with exit 1, what Python exits with after an uncaught exception, whether it exits or hangs; one still
alive :data:`RAISED_GRACE_S` seconds after it raised is stopped, and so are the others.
"""

from __future__ import annotations

from pathlib import Path

#: The mark a process that raised leaves in its own folder (``processes/process-K/raised.txt``).
RAISED_MARK = "raised.txt"
#: How long a process that raised may take to exit on its own before it counts as hung in its exit hooks.
RAISED_GRACE_S = 5.0
#: Python's exit status after an uncaught exception.
RAISED_EXIT_CODE = 1

#: Run as ``python -c BOOTSTRAP MARK SCRIPT ARGS...``, or ``python -c BOOTSTRAP MARK -c CODE ARGS...`` around
#: another bootstrap (the profiler's).
BOOTSTRAP = r"""
import os, runpy, sys, traceback
mark, target = sys.argv[1], sys.argv[2]
original = sys.excepthook

def hook(kind, value, tb):
    if not issubclass(kind, KeyboardInterrupt):
        try:
            with open(mark, "w", encoding="utf-8") as out:
                out.write(traceback.format_exception_only(kind, value)[-1].strip() + "\n")
        except OSError:
            pass
        own = tb
        while own is not None and (own.tb_frame.f_code.co_filename == "<string>" or "runpy" in own.tb_frame.f_code.co_filename):
            own = own.tb_next
        if own is not None:
            tb = own
            value = value.with_traceback(own)  # Python prints the exception's own traceback
    original(kind, value, tb)

sys.excepthook = hook
if target == "-c":
    code = sys.argv[3]
    sys.argv = ["-c", *sys.argv[4:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = [target, *sys.argv[3:]]
    sys.path[0] = os.path.dirname(os.path.abspath(target))
    runpy.run_path(target, run_name="__main__")
"""


def marking_argv(argv: list[str], mark: Path) -> list[str]:
    """The job's command line (``python SCRIPT ARGS`` or ``python -c CODE ARGS``) run under the bootstrap."""
    return [argv[0], "-c", BOOTSTRAP, str(mark), *argv[1:]]


def raised(mark: Path) -> str | None:
    """The exception a process raised (``RuntimeError: no data``), None when it raised none."""
    try:
        return mark.read_text(encoding="utf-8").strip() or "an exception"
    except OSError:
        return None


def raised_line(details: dict) -> str | None:
    """The last line of the traceback of the first process that raised (``[process 1] RuntimeError: no data``),
    from a run's backend details; None when none raised."""
    for process in details.get("processes") or []:
        if isinstance(process, dict) and process.get("raised"):
            return f"[process {process.get('process')}] {process['raised']}"
    return None
