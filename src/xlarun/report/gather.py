"""What a report shows of one module or run, gathered from the store: files copied for reading,
the pass timeline with each pass's diff, and the replays recorded for it."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xlarun.errors import InputError
from xlarun.hlo import HloModule, parse_hlo_text
from xlarun.see.diff import PassStep, pass_steps, structural_summary

if TYPE_CHECKING:
    from xlarun.store.index import Index
    from xlarun.store.rows import FileInfo, ModuleInfo
    from xlarun.store.runs import RunStore

#: Formats never copied into a report (binary, or redundant with the text of the same dump).
BINARY_FORMATS = frozenset({"o", "a", "pb", "pb.gz", "proto", "proto.gz", "pop", "pprof", "url"})
_HEADER_NAME = re.compile(rb"^\s*HloModule\s+([^\s,]+)")


@dataclass
class FileEntry:
    path: str
    kind: str
    stage: str | None
    size: int
    href: str | None  # relative to the report root; None when not copied
    why_not: str | None = None


@dataclass
class DiffLine:
    css: str  # 'add', 'del', 'hunk', 'head' or ''
    text: str


@dataclass
class StepEntry:
    """One row of the pass timeline, with its diff when the dump changed."""

    step: PassStep
    bar_percent: float
    anchor: str
    summary: list[str] = field(default_factory=list)
    lines: list[DiffLine] = field(default_factory=list)
    hidden_lines: int = 0


def safe_file_name(path: str) -> str:
    """A dump path as a plain file name that browsers show as text: unsafe characters become '_', '.txt' is appended."""
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in path.replace("/", "__"))
    return name if name.endswith(".txt") else name + ".txt"


class FileCopier:
    """Copies text files into ``<report>/files/<folder>/`` once each, within a size limit."""

    def __init__(self, store: RunStore, root: Path, max_bytes: int):
        self.store, self.root, self.max_bytes = store, root, max_bytes
        self.copied = 0
        self.by_content: dict[str, str] = {}  # digest -> href: unchanged pass dumps share one copy

    def entry(self, file: FileInfo, folder: str, skip_pass_dot: bool = True) -> FileEntry:
        entry = FileEntry(file.path, file.kind, file.stage, file.size, None)
        if (file.format or "") in BINARY_FORMATS:
            entry.why_not = "binary"
        elif skip_pass_dot and file.kind == "pass" and file.format == "dot":
            entry.why_not = "same dump as the .txt"
        elif file.size > self.max_bytes:
            entry.why_not = "too big to copy; `xlarun cat` prints it"
        elif file.digest in self.by_content:
            entry.href = self.by_content[file.digest]
        else:
            data = self.store.blobs.get(file.digest)
            if b"\0" in data[:8192]:
                entry.why_not = "binary"
                return entry
            target = self.root / "files" / folder / safe_file_name(file.path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            entry.href = self.by_content[file.digest] = f"files/{folder}/{target.name}"
            self.copied += 1
        return entry

    def text(self, name: str, text: str, folder: str) -> str:
        target = self.root / "files" / folder / safe_file_name(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.copied += 1
        return f"files/{folder}/{target.name}"


class ParsedCache:
    """HLO texts parsed once per content (a pass dump is the 'after' of one step and the 'before' of the next)."""

    def __init__(self, store: RunStore):
        self.store = store
        self.texts: dict[str, str] = {}
        self.modules: dict[str, HloModule | None] = {}

    def text(self, digest: str) -> str:
        if digest not in self.texts:
            self.texts[digest] = self.store.blobs.get(digest).decode("utf-8", errors="replace")
        return self.texts[digest]

    def module(self, digest: str) -> HloModule | None:
        if digest not in self.modules:
            try:
                self.modules[digest] = parse_hlo_text(self.text(digest))
            except InputError:
                self.modules[digest] = None
        return self.modules[digest]

    def forget(self) -> None:
        self.texts.clear()
        self.modules.clear()


def hlo_name(store: RunStore, module: ModuleInfo) -> str | None:
    """The name on the ``HloModule`` line of the module's first HLO text dump (file names may lack it)."""
    for file in module.files:
        if file.format == "text" and file.kind in ("hlo", "pass"):
            match = _HEADER_NAME.match(store.blobs.get(file.digest)[:4096])
            if match:
                return match.group(1).decode("utf-8", errors="replace")
    return None


def timeline(module: ModuleInfo, cache: ParsedCache, max_lines: int, with_diffs: bool = True) -> list[StepEntry]:
    """The module's pass timeline; each step whose dump changed carries its diff and structural summary."""
    steps = pass_steps(module)
    top = max((s.instr_count or 0 for s in steps), default=0) or 1
    entries = []
    for step in steps:
        entry = StepEntry(step, 100.0 * (step.instr_count or 0) / top, f"step-{step.step}")
        if with_diffs and step.changed:
            _fill_diff(entry, cache, max_lines)
        entries.append(entry)
    return entries


def _fill_diff(entry: StepEntry, cache: ParsedCache, max_lines: int) -> None:
    step = entry.step
    if step.previous_digest is None:  # not reached: a step that changed has a dump before it
        return
    before, after = cache.text(step.previous_digest), cache.text(step.digest)
    left, right = cache.module(step.previous_digest), cache.module(step.digest)
    if left is not None and right is not None:
        entry.summary = structural_summary(left, right).lines()
    unified = difflib.unified_diff(before.splitlines(), after.splitlines(), step.previous_path or "", step.path, n=3, lineterm="")
    for count, line in enumerate(unified):
        if count >= max_lines:
            entry.hidden_lines += 1
            continue
        css = (
            "head"
            if line.startswith(("+++", "---"))
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "hunk"
            if line.startswith("@@")
            else ""
        )
        entry.lines.append(DiffLine(css, line))


def replay_rows(index: Index, run_id: str, module_id: int | None = None) -> tuple[list[str], list[list]]:
    """Columns and rows of the ``replays`` table for a run (or one module), when another stage created it."""
    conn = index.conn
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='replays'").fetchone() is None:
        return [], []
    columns = [c[1] for c in conn.execute("PRAGMA table_info(replays)")]
    if "run_id" not in columns:
        return [], []
    preferred = [
        "replay_id",
        "module_id",
        "module_name",
        "engine",
        "platform",
        "verdict",
        "median_s",
        "max_abs_error",
        "max_rel_error",
        "started",
    ]
    shown = [c for c in preferred if c in columns] or columns
    sql = f"SELECT {', '.join(shown)} FROM replays WHERE run_id=?"
    params: list = [run_id]
    if module_id is not None and "module_id" in columns:
        sql += " AND module_id=?"
        params.append(module_id)
    sql += " ORDER BY rowid LIMIT 500"
    return shown, [list(row) for row in conn.execute(sql, params)]
