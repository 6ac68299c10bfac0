"""Ending the console script's process without the interpreter's teardown.

After a command, CPython frees every module and object one by one before the process ends: for ``xlarun capture``
that took 60-100 ms of CPU (a fifth of a capture of a small job), for any command at least the 18 ms typer and
pydantic alone leave. Nothing of xlarun needs it: stores, logs and packs are written and closed where they are
used. :func:`exit_without_teardown` does what a program may count on at exit, in CPython's order -- non-daemon
threads joined (through threading's own shutdown, which also wakes a thread pool's idle workers), ``atexit``
handlers run (coverage, logging), stdout and stderr flushed -- and then ends the process.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """End the process with ``code`` as ``sys.exit(code)`` would, less the interpreter's teardown (see the module
    docstring). On a Python without CPython's shutdown hooks, ``sys.exit`` itself."""
    import atexit
    import threading

    join_threads = getattr(threading, "_shutdown", None)
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if join_threads is None or run_exit_handlers is None:
        sys.exit(code)
    join_threads()
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`xlarun runs | head`): nothing more can be said there
            pass
    os._exit(code)
