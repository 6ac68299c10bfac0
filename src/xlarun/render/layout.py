"""Running graphviz's ``dot`` on DOT text, with a time limit so a huge graph cannot hang xlarun."""

from __future__ import annotations

import re
import shutil
import subprocess

from ..errors import EnvironmentProblem, InputError

#: Output formats ``render`` writes; ``dot`` is the DOT text itself (no layout).
FORMATS = ("svg", "png", "pdf", "dot")
DEFAULT_TIMEOUT_S = 60.0
# a node statement in DOT text: an id (quoted or not) followed by '[', but not the node/edge/graph defaults
_NODE_STATEMENT = re.compile(r'^\s*(?!(?:node|edge|graph)\s*\[)(?:"(?:[^"\\]|\\.)*"|[\w.]+)\s*\[', re.MULTILINE)


class LayoutTimeout(EnvironmentProblem):
    """dot ran past its time limit and was killed."""


def find_dot() -> str:
    """The path of graphviz's ``dot``; EnvironmentProblem (exit 3) when it is not installed."""
    path = shutil.which("dot")
    if path is None:
        raise EnvironmentProblem("graphviz's `dot` is not installed", "apt-get install graphviz, brew install graphviz, or conda install graphviz")
    return path


def count_dot_nodes(source: str) -> int:
    """Node statements in DOT text (an estimate for dumped .dot files, which xlarun did not build)."""
    return len(_NODE_STATEMENT.findall(source))


def layout(source: str, fmt: str = "svg", timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """Lay out DOT text with ``dot -T<fmt>``; ``fmt='dot'`` returns the text unchanged.

    Raises :class:`LayoutTimeout` after ``timeout_s`` seconds (the process is killed) and
    :class:`EnvironmentProblem` when dot fails.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}", f"choose one of {', '.join(FORMATS)}")
    if fmt == "dot":
        return source.encode("utf-8")
    command = [find_dot(), f"-T{fmt}"]
    try:
        done = subprocess.run(command, input=source.encode("utf-8"), capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise LayoutTimeout(
            f"graphviz took more than {timeout_s:g} s to lay out the graph and was stopped",
            "draw a neighbourhood with --around NAME --depth 2, or allow more time with --timeout",
        ) from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise EnvironmentProblem(f"dot failed (exit {done.returncode}): {message[0] if message else 'no message'}", "render with --format dot to see the DOT text")
    return done.stdout
