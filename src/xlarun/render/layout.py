"""Running graphviz's ``dot`` on DOT text in a child process with a time and a memory limit, so a huge or
hostile graph cannot hang xlarun or take the machine's memory; dot dying on a signal is an EnvironmentProblem
(exit 3) that names the signal."""

from __future__ import annotations

import re
import resource
import shutil
import signal
import subprocess

from xlarun import deadline
from xlarun.declared_options import RENDER_OPTIONS, default_of
from xlarun.errors import EnvironmentProblem, InputError

#: Output formats ``render`` writes; ``dot`` is the DOT text itself (no layout).
FORMATS = ("svg", "png", "pdf", "dot")
DEFAULT_TIMEOUT_S: float = default_of(RENDER_OPTIONS, "timeout_s")
#: Address space dot may take: its layouts of the graphs the node limit lets through stay under 1 GB.
DOT_ADDRESS_SPACE = 4 << 30
# a node statement in DOT text: an id (quoted or not) followed by '[', but not the node/edge/graph defaults
_NODE_STATEMENT = re.compile(r'^\s*(?!(?:node|edge|graph)\s*\[)(?:"(?:[^"\\]|\\.)*"|[\w.]+)\s*\[', re.MULTILINE)


class LayoutTimeout(EnvironmentProblem):
    """dot ran past its time limit and was killed."""


def find_dot() -> str:
    """The path of graphviz's ``dot``; EnvironmentProblem (exit 3) when it is not installed."""
    path = shutil.which("dot")
    if path is None:
        raise EnvironmentProblem(
            "graphviz's `dot` is not installed", "apt-get install graphviz, brew install graphviz, or conda install graphviz"
        )
    return path


def count_dot_nodes(source: str) -> int:
    """Node statements in DOT text (an estimate for dumped .dot files, which xlarun did not build)."""
    return len(_NODE_STATEMENT.findall(source))


#: A PNG is at most this many pixels wide and high (graphviz scales the drawing down to fit; the 32,767-pixel strips
#: it wrote otherwise no viewer shows); SVG and PDF scale without limit.
PNG_MAX_PIXELS = 8000
_PNG_DPI = 96


def layout(source: str, fmt: str = "svg", timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """Lay out DOT text with ``dot -T<fmt>``; ``fmt='dot'`` returns the text unchanged (see :func:`layout_with_notes`)."""
    return layout_with_notes(source, fmt, timeout_s)[0]


def layout_with_notes(source: str, fmt: str = "svg", timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[bytes, list[str]]:
    """Lay out DOT text with ``dot -T<fmt>``, and what a reader should know of the result (a PNG scaled down to
    :data:`PNG_MAX_PIXELS`, graphviz's own warnings).

    Raises :class:`LayoutTimeout` after ``timeout_s`` seconds (the process is killed) and
    :class:`EnvironmentProblem` when dot fails.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", f"choose one of {', '.join(FORMATS)}")
    if fmt == "dot":
        return source.encode("utf-8"), []
    command = [find_dot(), f"-T{fmt}"]
    if fmt == "png":
        inches = PNG_MAX_PIXELS / _PNG_DPI
        command += [f"-Gdpi={_PNG_DPI}", f"-Gsize={inches:g},{inches:g}"]
    proc = deadline.start(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _limit_memory(proc.pid)
    done = deadline.communicate_within(proc, timeout_s, source.encode("utf-8"))
    stdout, stderr = done.stdout, done.stderr
    if done.timed_out:
        raise LayoutTimeout(
            f"graphviz took more than {timeout_s:g} s to lay out the graph and was stopped",
            "draw a neighbourhood with --around NAME --depth 2, or allow more time with --timeout",
        ) from None
    if proc.returncode < 0:
        raise EnvironmentProblem(
            f"dot crashed ({_signal_name(-proc.returncode)}) laying out the graph",
            "render with --format dot to see the DOT text, or draw less of it with --around NAME",
        )
    if proc.returncode != 0:
        message = stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise EnvironmentProblem(
            f"dot failed (exit {proc.returncode}): {message[0] if message else 'no message'}",
            "render with --format dot to see the DOT text",
        )
    notes = [line.strip() for line in stderr.decode("utf-8", errors="replace").splitlines() if line.strip()][:5]
    if fmt == "png" and len(stdout) >= 24 and stdout[:8] == b"\x89PNG\r\n\x1a\n":
        width, height = int.from_bytes(stdout[16:20], "big"), int.from_bytes(stdout[20:24], "big")
        if max(width, height) >= PNG_MAX_PIXELS - 2:
            notes.append(
                f"the PNG was scaled down to {width}x{height} pixels to fit {PNG_MAX_PIXELS}: small labels may be unreadable "
                "(-f svg scales without limit; --around NAME draws a part)"
            )
    return stdout, notes


def _limit_memory(pid: int) -> None:
    # set from outside (prlimit), not in a preexec_fn: the report lays graphs out from several threads
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (DOT_ADDRESS_SPACE, DOT_ADDRESS_SPACE))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    except (OSError, AttributeError, ValueError):  # the process already ended, or no prlimit on this system
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
