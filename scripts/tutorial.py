"""The documentation's command output, regenerated: every ```console block of README.md and docs/*.md is run for real
and its output checked, or says in the page source why it cannot be.

    python scripts/tutorial.py write [PAGE...]    run the blocks and write their output into the pages
    python scripts/tutorial.py check [PAGE...]    run them and exit 1 naming each block whose output changed
    python scripts/tutorial.py list               each console block with how it is checked

How a page marks a block, on the lines just above its fence:

    <!-- tutorial setup: COMMAND -->     zero or more: run first (bash, in the page's work folder), output unseen
    <!-- tutorial -->                   run each ``$`` line and compare what it prints
    <!-- tutorial volatile: REGEX -->   what varies in this block beyond the usual (a table's timings)
    <!-- unchecked: REASON -->          not run: REASON says why (a GPU, a second machine...)

A console block with neither marker fails ``check``. Each page runs in a work folder of its own (``configs/`` and
``examples/`` copied in) with a store that begins as the quick start's capture left it (or empty, on a page that
says ``<!-- tutorial store: empty -->``), so pages are independent;
the blocks of a page share that store, in order. A ``$`` line runs in bash with this venv's ``xlarun`` first on PATH;
``| head -N`` / ``| tail -N`` after it cut its output (stdout and stderr together) as a reader would. ``check``
ignores what differs from run to run and machine to machine (run ids, times, sizes, rates, ports, pids, the work
folder); the pages record the jax version that made them, and ``check`` refuses to compare across versions (exit 2)
rather than call a new release's output drift.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- tutorial -->"
SETUP = re.compile(r"^<!-- tutorial setup: (.+) -->$")
UNCHECKED = re.compile(r"^<!-- unchecked: (.+) -->$")
VOLATILE_MARK = re.compile(r"^<!-- tutorial volatile: (.+) -->$")
VERSION_MARK = re.compile(r"<!-- tutorial output made with jax (\S+) -->")
LINKED = ("configs", "examples")
#: A page that begins from no store at all (the README: the quick start's own capture is its first block).
EMPTY_STORE = "<!-- tutorial store: empty -->"
VOLATILE = [
    (re.compile(r"\bb?\d{8}-\d{6}-[0-9a-f]{4}\b"), "<run>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?\b"), "<date>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|µs|us|ns|min)\b"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?s\b"), "<time>"),
    (re.compile(r"snapshot\.-?\d+"), "snapshot.<n>"),
    # a dump embeds the folder it was made in, so sizes grow with the clone's path
    (re.compile(r"\b\d+(\.\d+)? ?(B|KiB|MiB|GiB|kB|KB|MB|GB)(/s)?\b"), "<size>"),
    (re.compile(r"\b\d+(\.\d+)?x\b"), "<ratio>"),
    (re.compile(r"(127\.0\.0\.1|localhost):\d+"), r"\1:<port>"),
    (re.compile(r"\bpid \d+"), "pid <n>"),
    (re.compile(r"\b\d+ Killed\b"), "<pid> Killed"),
    (re.compile(r"\b\d+ (pack\(s\)|packs)\b"), r"<n> \1"),  # small files share packs as archiving threads meet them
]


@dataclass
class Block:
    start: int  # first line of the body (after the opening fence)
    end: int  # the closing fence's line
    setup: list[str] = field(default_factory=list)
    volatile: list[str] = field(default_factory=list)  # this block's own patterns of what varies (a table of timings)
    checked: bool = False
    unchecked_why: str | None = None


def pages() -> list[Path]:
    """README.md, then the docs pages (docs/index.md is made from the README by scripts/docs.py)."""
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "index.md")]


def blocks(text: str) -> list[Block]:
    """Every ```console block of a page, with the markers above it."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("```console"):
            continue
        end = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
        block = Block(i + 1, end)
        k = i - 1
        while k >= 0 and lines[k].startswith("<!-- "):
            marker = lines[k].strip()
            if marker == MARK:
                block.checked = True
            elif match := SETUP.match(marker):
                block.setup.insert(0, match.group(1))
            elif match := VOLATILE_MARK.match(marker):
                block.volatile.append(match.group(1))
            elif match := UNCHECKED.match(marker):
                block.unchecked_why = match.group(1)
            k -= 1
        found.append(block)
    return found


#: The caller's variables a reader would not have set (a test runner's, coverage's, a framework's settings): the
#: commands run without them, so the pages read the same whoever regenerates or checks them.
_NOT_PASSED = ("XLA_", "TF_", "JAX_", "COV_", "COVERAGE_", "PYTEST_", "PYTHON", "XLARUN_", "FORCE_COLOR", "TTY_COMPATIBLE")


def _environment(store: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED) or k == "XLARUN_XLA_CORPUS"}
    env.update(XLARUN_STORE=str(store), COLUMNS="120", NO_COLOR="1", TERM="dumb")
    env["XDG_CACHE_HOME"] = str(tmp / "cache")  # xlarun's flag-name cache: one fresh for the whole run
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("XLARUN_XLA_CORPUS", str(ROOT.parent / "shared" / "corpus" / "xla-hlo"))  # see.md draws one of its modules
    return env


def run_line(command: str, work: Path, env: dict[str, str]) -> str:
    """Output of one ``$`` line as a reader sees it: stdout and stderr together, this machine's paths neutral."""
    cut = re.search(r"\s*\|\s*(head|tail)\s+-(?:n\s*)?(\d+)\s*$", command)
    line = command[: cut.start()] if cut else command
    proc = subprocess.run(
        ["bash", "-c", line], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900
    )
    out = proc.stdout.replace(env["XLARUN_STORE"], ".xlarun").replace(f"{work}/", "").replace(str(work), ".")
    out = out.replace(f"{ROOT}/", "")
    lines = out.rstrip("\n").splitlines()
    if cut:
        n = int(cut.group(2))
        lines = lines[:n] if cut.group(1) == "head" else lines[-n:]
    return "\n".join(line.rstrip() for line in lines)


def _quick_start_store(tmp: Path) -> Path:
    """The store the quick start leaves: one capture of configs/jax-cpu.yaml (copied for each page)."""
    store = tmp / "quick-start-store"
    env = _environment(store, tmp)
    proc = subprocess.run(
        ["xlarun", "capture", "configs/jax-cpu.yaml", "-q"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(f"the quick start's capture failed: {proc.stderr[-2000:]}")
    return store


def regenerate(chosen: list[Path]) -> dict[Path, list[tuple[Block, str]]]:
    made: dict[Path, list[tuple[Block, str]]] = {}
    # under /tmp whatever TMPDIR says: a path's length decides where a long line wraps, so it must not vary
    with tempfile.TemporaryDirectory(prefix="xlarun-tutorial-", dir="/tmp") as name:
        tmp = Path(name)
        template = _quick_start_store(tmp)
        for page in chosen:
            text = page.read_text()
            wanted = [b for b in blocks(text) if b.checked]
            if not wanted:
                continue
            work = tmp / page.stem
            work.mkdir()
            for linked in LINKED:  # copies, not links: the programs' paths (in their HLO's metadata) stay below `work`
                shutil.copytree(ROOT / linked, work / linked, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            store = work / ".xlarun"
            if EMPTY_STORE not in text:
                shutil.copytree(template, store, symlinks=True)
            env = _environment(store, tmp)
            lines = text.splitlines()
            print(f"{page.relative_to(ROOT)}: {len(wanted)} block(s)", file=sys.stderr, flush=True)
            for block in wanted:
                for command in block.setup:
                    proc = subprocess.run(
                        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=1800
                    )
                    if proc.returncode != 0:
                        raise SystemExit(
                            f"{page.relative_to(ROOT)}:{block.start}: setup {command!r} failed:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}"
                        )
                body = []
                for line in lines[block.start : block.end]:
                    if line.startswith("$ "):
                        body += [line, run_line(line[2:], work, env)]
                made.setdefault(page, []).append((block, "\n".join(body)))
    return made


def normalized(text: str, volatile: tuple[str, ...] | list[str] = ()) -> str:
    for pattern, replacement in [*VOLATILE, *((re.compile(v), "<v>") for v in volatile)]:
        text = pattern.sub(replacement, text)
    return "\n".join(re.sub(r"\s+", " ", line.strip()) for line in text.splitlines())


def jax_version() -> str:
    from importlib.metadata import version

    return version("jax")


def _chosen(names: list[str]) -> list[Path]:
    if not names:
        return pages()
    found = [ROOT / n for n in names]
    missing = [str(p) for p in found if p not in pages()]
    if missing:
        raise SystemExit(f"not a page: {', '.join(missing)}")
    return found


def unmarked() -> list[str]:
    """Console blocks that are neither checked nor say why not."""
    return [
        f"{page.relative_to(ROOT)}:{b.start}"
        for page in pages()
        for b in blocks(page.read_text())
        if not b.checked and not b.unchecked_why
    ]


def write(names: list[str]) -> int:
    for page, outputs in regenerate(_chosen(names)).items():
        lines = page.read_text().splitlines()
        for block, body in reversed(outputs):
            lines[block.start : block.end] = body.splitlines()
        text = "\n".join(lines) + "\n"
        stamp = f"<!-- tutorial output made with jax {jax_version()} -->"
        text = VERSION_MARK.sub(stamp, text) if VERSION_MARK.search(text) else text.replace(MARK, stamp + "\n" + MARK, 1)
        page.write_text(text)
        print(f"wrote {len(outputs)} block(s) of {page.relative_to(ROOT)}")
    # docs/index.md is made from the README: made again with it, so the site never lags the pages
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "docs.py"), "write"], cwd=ROOT, check=False).returncode


def check(names: list[str]) -> int:
    recorded = {m.group(1) for p in pages() for m in VERSION_MARK.finditer(p.read_text())}
    if recorded and recorded != {jax_version()}:
        print(f"the pages were made with jax {', '.join(sorted(recorded))}, this is {jax_version()}: run write", file=sys.stderr)
        return 2
    problems = [
        f"{where}: a console block neither checked (<!-- tutorial -->) nor saying why not (<!-- unchecked: ... -->)"
        for where in unmarked()
    ]
    for page, outputs in regenerate(_chosen(names)).items():
        lines = page.read_text().splitlines()
        for block, body in outputs:
            if normalized("\n".join(lines[block.start : block.end]), block.volatile) != normalized(body, block.volatile):
                problems.append(
                    f"{page.relative_to(ROOT)}:{block.start}: output changed: {lines[block.start]}  (python scripts/tutorial.py write)"
                )
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def listing() -> int:
    for page in pages():
        for b in blocks(page.read_text()):
            how = "checked" if b.checked else f"unchecked: {b.unchecked_why}" if b.unchecked_why else "NOT MARKED"
            print(f"{page.relative_to(ROOT)}:{b.start}: {how}" + (f" ({len(b.setup)} setup)" if b.setup else ""))
    return 0


if __name__ == "__main__":
    command, rest = sys.argv[1:2], sys.argv[2:]
    if command == ["write"]:
        sys.exit(write(rest))
    if command == ["check"]:
        sys.exit(check(rest))
    if command == ["list"]:
        sys.exit(listing())
    print(__doc__, file=sys.stderr)
    sys.exit(2)
