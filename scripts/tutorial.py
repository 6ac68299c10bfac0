"""The tutorial's command output, regenerated: every ```console block that follows a ``<!-- tutorial -->`` line in
README.md or docs/*.md is run for real, in order, against a fresh store that begins with the quick start's capture.

    python scripts/tutorial.py write    run the commands and write their output into the pages
    python scripts/tutorial.py check    run them and exit 1 naming each block whose output changed

Each ``$ xlarun ...`` line of a block is run (``| head -N`` / ``| tail -N`` after it cut the output as a reader
would); the blocks of all pages share the store, README first. ``check`` ignores what differs from run to run (run
ids, timings, snapshot numbers); the pages record the jax version that made them, and ``check`` refuses to compare
across versions (exit 2) rather than call a new release's output drift.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- tutorial -->"
VERSION_MARK = re.compile(r"<!-- tutorial output made with jax (\S+) -->")
VOLATILE = [
    (re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{4}\b"), "<run>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|µs)\b"), "<time>"),
    (re.compile(r"snapshot\.-?\d+"), "snapshot.<n>"),
    # a dump embeds the folder it was made in, so sizes grow with the clone's path
    (re.compile(r"\b\d+(\.\d+)? ?(B|KiB|MiB|GiB|kB|KB|MB|GB)\b"), "<size>"),
]


def pages() -> list[Path]:
    """README.md, then the docs pages (docs/index.md is made from the README by scripts/docs.py)."""
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")]


def blocks(text: str) -> list[tuple[int, int]]:
    """(start, end) line indexes of each marked console block's body (between its fences)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip() == MARK and i + 1 < len(lines) and lines[i + 1].startswith("```console"):
            end = next(k for k in range(i + 2, len(lines)) if lines[k].startswith("```"))
            found.append((i + 2, end))
    return found


def run_line(command: str, env: dict[str, str]) -> str:
    """Output of one ``$`` line as a reader sees it: stdout and stderr together, paths of this machine neutral."""
    cut = re.search(r"\s*\|\s*(head|tail)\s+-(?:n\s*)?(\d+)\s*$", command)
    argv = shlex.split(command[: cut.start()] if cut else command)
    if argv[0] == "xlarun":
        argv[0] = str(Path(sys.executable).with_name("xlarun"))
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    out = proc.stdout.replace(env["XLARUN_STORE"], ".xlarun").replace(str(ROOT) + "/", "")
    lines = out.rstrip("\n").splitlines()
    if cut:
        n = int(cut.group(2))
        lines = lines[:n] if cut.group(1) == "head" else lines[-n:]
    return "\n".join(line.rstrip() for line in lines)


def regenerate() -> dict[Path, list[tuple[tuple[int, int], str]]]:
    with tempfile.TemporaryDirectory(prefix="xlarun-tutorial-") as tmp:
        env = {**os.environ, "XLARUN_STORE": str(Path(tmp) / "store"), "COLUMNS": "120", "NO_COLOR": "1"}
        env.pop("XLA_FLAGS", None)
        made: dict[Path, list[tuple[tuple[int, int], str]]] = {}
        for page in pages():
            lines = page.read_text().splitlines()
            for start, end in blocks(page.read_text()):
                body = []
                for line in lines[start:end]:
                    if line.startswith("$ "):
                        body += [line, run_line(line[2:], env)]
                made.setdefault(page, []).append(((start, end), "\n".join(body)))
        return made


def normalized(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


def write() -> int:
    for page, outputs in regenerate().items():
        lines = page.read_text().splitlines()
        for (start, end), body in reversed(outputs):
            lines[start:end] = body.splitlines()
        text = "\n".join(lines) + "\n"
        stamp = f"<!-- tutorial output made with jax {jax_version()} -->"
        text = VERSION_MARK.sub(stamp, text) if VERSION_MARK.search(text) else text.replace(MARK, stamp + "\n" + MARK, 1)
        page.write_text(text)
        print(f"wrote {len(outputs)} block(s) of {page.relative_to(ROOT)}")
    return 0


def check() -> int:
    recorded = {m.group(1) for p in pages() for m in VERSION_MARK.finditer(p.read_text())}
    if recorded and recorded != {jax_version()}:
        print(f"the pages were made with jax {', '.join(sorted(recorded))}, this is {jax_version()}: run write", file=sys.stderr)
        return 2
    stale = []
    for page, outputs in regenerate().items():
        lines = page.read_text().splitlines()
        for (start, end), body in outputs:
            if normalized("\n".join(lines[start:end])) != normalized(body):
                stale.append(f"{page.relative_to(ROOT)}:{start}: {lines[start]}")
    for where in stale:
        print(f"output changed: {where}  (python scripts/tutorial.py write)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    command = sys.argv[1:2]
    sys.exit(write() if command == ["write"] else check() if command == ["check"] else 2)
