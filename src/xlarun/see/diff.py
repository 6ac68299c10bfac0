"""What a pass did to a module, and how one module differs between two runs.

A pass diff compares the dump a pass left (step N) with the dump before it: the previous step's
dump of the same module (XLA dumps a module after each matching pass that changed it), or the
``before_optimizations`` dump for the first step. A run diff compares the same module captured by
two runs (two backends, two framework versions).

Both give a unified text diff and a :class:`StructuralSummary`: instructions added, removed,
changed, rewired and fused by opcode, the fusions formed, and the opcode histogram delta. Instructions are
matched by structure first (:mod:`xlarun.hlo.match`: names are renumbered between captures and versions),
then by name, then, for what is left, by position among the instructions of the same opcode in the same
computation. A matched instruction is *changed* when its operation differs (opcode, shape, attributes,
literal), *rewired* when only its operands do.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from xlarun.errors import InputError
from xlarun.hlo import HloInstruction, HloModule, parse_hlo_text
from xlarun.hlo.match import PROVENANCE_ATTRIBUTES, StructureHashes, match_by_structure
from xlarun.navigate.select import pass_step, select_file

if TYPE_CHECKING:
    from xlarun.store.rows import ModuleInfo
    from xlarun.store.runs import RunStore

_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_EXAMPLES = 8


@dataclass
class FusionFormed:
    name: str
    kind: str
    fused_instructions: int
    opcodes: list[str]


@dataclass
class StructuralSummary:
    """The structural difference between two versions of a module."""

    instructions_before: int
    instructions_after: int
    added: dict[str, int] = field(default_factory=dict)  # opcode -> count
    removed: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    #: Matched instructions whose operation is the same but whose operands are not (an op inserted before them).
    rewired: dict[str, int] = field(default_factory=dict)
    #: Instructions now inside fused computations (moved there, or cloned there by a fusion pass; parameters not counted).
    fused: dict[str, int] = field(default_factory=dict)
    fusions_formed: list[FusionFormed] = field(default_factory=list)
    computations_added: list[str] = field(default_factory=list)
    computations_removed: list[str] = field(default_factory=list)
    opcode_delta: dict[str, int] = field(default_factory=dict)
    matched_by_position: int = 0
    #: A few instruction names per category ('added', 'removed', 'changed', 'rewired'), for the reader to look up.
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.changed
            or self.rewired
            or self.fused
            or self.computations_added
            or self.computations_removed
        )

    def lines(self) -> list[str]:
        """The summary as short lines for a terminal or a report."""
        delta = self.instructions_after - self.instructions_before
        out = [f"instructions: {self.instructions_before} -> {self.instructions_after} ({delta:+d})"]
        if self.unchanged:
            return [*out, "no structural change (names, opcodes, shapes, operands and attributes are the same)"]
        for label, counts in (
            ("added", self.added),
            ("removed", self.removed),
            ("now inside fusions", self.fused),
            ("changed", self.changed),
            ("rewired (same operation, other operands)", self.rewired),
        ):
            if counts:
                out.append(f"{label}: {sum(counts.values())} ({_top(counts)})")
        if self.fusions_formed:
            shown = "; ".join(f"{f.name} {f.kind}: {', '.join(f.opcodes[:4])}" for f in self.fusions_formed[:6])
            more = f"; ... {len(self.fusions_formed) - 6} more" if len(self.fusions_formed) > 6 else ""
            out.append(f"fusions formed: {len(self.fusions_formed)} ({shown}{more})")
        if self.computations_added:
            out.append(f"computations added: {len(self.computations_added)} ({', '.join(self.computations_added[:6])})")
        if self.computations_removed:
            out.append(f"computations removed: {len(self.computations_removed)} ({', '.join(self.computations_removed[:6])})")
        if self.opcode_delta:
            out.append(
                "opcode counts: "
                + ", ".join(
                    f"{op} {n:+d}" for op, n in sorted(self.opcode_delta.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:12]
                )
            )
        if self.matched_by_position:
            out.append(f"{self.matched_by_position} instructions matched by position (their names differ)")
        return out


@dataclass
class ModuleDiff:
    """A unified diff of two HLO texts and their structural summary."""

    before: str  # what the left side is, e.g. 'RUN/module_0012 step 23 (after pipeline-start)'
    after: str
    before_path: str
    after_path: str
    unified: list[str]
    summary: StructuralSummary
    notes: list[str] = field(default_factory=list)
    #: Across runs: each side's peak memory in bytes (``xlarun memory``), None where no buffer assignment was dumped.
    peak_bytes: list[int | None] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _top(counts: dict[str, int], n: int = 8) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{count} {op}" for op, count in items[:n])
    return text + (", ..." if len(items) > n else "")


def _signature(instruction: HloInstruction, rename: dict[str, str]) -> tuple:
    attributes = tuple(sorted((k, v) for k, v in instruction.attributes.items() if k not in PROVENANCE_ATTRIBUTES))
    operands = tuple(rename.get(o, o) for o in instruction.operands)
    return (
        instruction.opcode,
        re.sub(r"\s+", "", instruction.shape),
        operands,
        attributes,
        instruction.literal,
        instruction.parameter_number,
    )


def match_instructions(before: HloModule, after: HloModule, by_position: bool = True) -> tuple[dict[str, str], int]:
    """Map instruction names of ``before`` to those of ``after``: by structure, then same name, then position.

    Position matching pairs the unmatched instructions of the same opcode, in order, within
    computations of the same name (or at the same place in the module). Returns the map and how
    many pairs were made by position.
    """
    mapping, positional, _left, _right = _match(before, after, by_position)
    return mapping, positional


def _match(
    before: HloModule, after: HloModule, by_position: bool
) -> tuple[dict[str, str], int, StructureHashes, StructureHashes]:
    left, right = StructureHashes(before), StructureHashes(after)
    mapping = match_by_structure(left, right)
    taken = set(mapping.values())
    names_after = {i.name: i for i in after.instructions()}
    for instruction in before.instructions():
        other = names_after.get(instruction.name)
        if (
            instruction.name not in mapping
            and other is not None
            and other.name not in taken
            and other.opcode == instruction.opcode
        ):
            mapping[instruction.name] = other.name
            taken.add(other.name)
    if not by_position:
        return mapping, 0, left, right
    positional = 0
    for left_name, right_name in _computation_pairs(before, after):
        free_left: dict[str, list[str]] = {}
        for instruction in before.computations[left_name].instructions:
            if instruction.name not in mapping:
                free_left.setdefault(instruction.opcode, []).append(instruction.name)
        free_right: dict[str, list[str]] = {}
        for instruction in after.computations[right_name].instructions:
            if instruction.name not in taken:
                free_right.setdefault(instruction.opcode, []).append(instruction.name)
        for opcode, names in free_left.items():
            for a, b in zip(names, free_right.get(opcode, []), strict=False):  # as many as both sides have
                mapping[a] = b
                taken.add(b)
                positional += 1
    return mapping, positional, left, right


def _computation_pairs(before: HloModule, after: HloModule) -> list[tuple[str, str]]:
    pairs = [(name, name) for name in before.computations if name in after.computations]
    pairs.append((before.entry_computation, after.entry_computation))
    left = [n for n in before.computations if n not in after.computations and n != before.entry_computation]
    right = [n for n in after.computations if n not in before.computations and n != after.entry_computation]
    pairs.extend(zip(left, right, strict=False))  # as many as both sides have
    return list(dict.fromkeys(pairs))


def structural_summary(before: HloModule, after: HloModule, by_position: bool = False) -> StructuralSummary:
    """How ``after`` differs from ``before``, instruction by instruction, grouped by opcode."""
    mapping, positional, left_hashes, right_hashes = _match(before, after, by_position)
    left = {i.name: i for i in before.instructions()}
    right = {i.name: i for i in after.instructions()}
    matched_right = set(mapping.values())
    summary = StructuralSummary(before.instruction_count(), after.instruction_count(), matched_by_position=positional)
    added: Counter[str] = Counter()
    removed: Counter[str] = Counter()
    changed: Counter[str] = Counter()
    rewired: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    examples: dict[str, list[str]] = {"added": [], "removed": [], "changed": [], "rewired": [], "fused": []}

    def note(kind: str, name: str) -> None:
        if len(examples[kind]) < _EXAMPLES:
            examples[kind].append(name)

    for name, instruction in left.items():
        if name not in mapping:
            removed[instruction.opcode] += 1
            note("removed", name)
            continue
        other = right[mapping[name]]
        was_fused = before.computations[instruction.computation].is_fusion
        now_fused = after.computations[other.computation].is_fusion
        if now_fused and not was_fused:
            fused[instruction.opcode] += 1
            note("fused", name)
        elif left_hashes.label.get(name) != right_hashes.label.get(other.name):
            changed[instruction.opcode] += 1
            note("changed", name)
        elif _signature(instruction, mapping) != _signature(other, {}):
            rewired[instruction.opcode] += 1
            note("rewired", name)
    new_computations = set(after.computations) - set(before.computations)
    for name, instruction in right.items():
        if name in matched_right:
            continue
        if instruction.computation in new_computations and after.computations[instruction.computation].is_fusion:
            # fusion clones instructions under new names into a new fused computation: they were fused, not added
            if instruction.opcode != "parameter":
                fused[instruction.opcode] += 1
                note("fused", name)
        else:
            added[instruction.opcode] += 1
            note("added", name)
            if instruction.opcode == "fusion":
                summary.fusions_formed.append(_fusion(after, instruction))
    summary.added, summary.removed, summary.changed, summary.fused = dict(added), dict(removed), dict(changed), dict(fused)
    summary.rewired = dict(rewired)
    summary.examples = {k: v for k, v in examples.items() if v}
    summary.computations_added = [c for c in after.computations if c not in before.computations]
    summary.computations_removed = [c for c in before.computations if c not in after.computations]
    histogram_delta = Counter(after.opcode_histogram())
    histogram_delta.subtract(before.opcode_histogram())
    summary.opcode_delta = {op: n for op, n in sorted(histogram_delta.items()) if n}
    return summary


def _fusion(module: HloModule, instruction: HloInstruction) -> FusionFormed:
    body = [i for c in instruction.called_computations if c in module.computations for i in module.computations[c].instructions]
    ops = [i.opcode for i in body if i.opcode != "parameter"]
    return FusionFormed(instruction.name, instruction.attributes.get("kind", "?"), len(ops), list(dict.fromkeys(ops)))


def without_provenance(text: str) -> str:
    """HLO text without ``metadata={...}`` and the FileNames/StackFrames tables: what differs between
    two runs of the same program from different paths."""
    out, skipping = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in _SECTIONS:
            skipping = True
            continue
        if skipping:
            if not stripped:
                skipping = False
            continue
        out.append(_drop_metadata(line))
    return "\n".join(out) + "\n"


def _drop_metadata(line: str) -> str:
    start = line.find(", metadata={")
    if start < 0:
        return line
    depth, i, quoted = 0, start + len(", metadata="), False
    while i < len(line):
        char = line[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return _drop_metadata(line[:start] + line[i + 1 :])
        i += 1
    return line


def diff_hlo_texts(
    before_text: str,
    after_text: str,
    before: str,
    after: str,
    by_position: bool = False,
    context: int = 3,
    before_path: str = "",
    after_path: str = "",
) -> ModuleDiff:
    """Unified diff and structural summary of two HLO module texts."""
    try:
        left, right = parse_hlo_text(before_text), parse_hlo_text(after_text)
    except InputError as exc:
        raise InputError(f"cannot compare: {exc.message}", exc.hint) from None
    unified = list(difflib.unified_diff(before_text.splitlines(), after_text.splitlines(), before, after, n=context, lineterm=""))
    return ModuleDiff(before, after, before_path, after_path, unified, structural_summary(left, right, by_position))


# --- pass steps ------------------------------------------------------------------------------------


@dataclass
class PassStep:
    """One per-pass dump of a module, with the dump it is compared with."""

    step: int
    pipeline: str | None
    after_pass: str | None
    before_pass: str | None
    path: str
    digest: str
    previous_path: str | None
    previous_digest: str | None
    instr_count: int | None
    delta: int | None

    @property
    def changed(self) -> bool:
        """The dump differs from the one before it (XLA dumps some steps unchanged, e.g. pipeline starts)."""
        return self.previous_digest is not None and self.digest != self.previous_digest

    @property
    def label(self) -> str:
        what = f"after {self.after_pass}" if self.after_pass else f"step {self.step}"
        return f"{what} ({self.pipeline})" if self.pipeline else what


def pass_steps(module: ModuleInfo) -> list[PassStep]:
    """The module's per-pass text dumps in step order, each paired with the dump before it."""
    by_step = {f.step: f for f in module.files if f.kind == "pass" and f.format == "text" and f.step is not None}
    counts = {p.step: p.instr_count for p in module.passes}
    start = next((f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text"), None)
    previous, previous_count = start, module.instr_before
    steps = []
    for step in sorted(by_step):
        file = by_step[step]
        count = counts.get(step)
        delta = count - previous_count if count is not None and previous_count is not None else None
        steps.append(
            PassStep(
                step,
                file.pipeline,
                file.after_pass,
                file.before_pass,
                file.path,
                file.digest,
                previous.path if previous else None,
                previous.digest if previous else None,
                count,
                delta,
            )
        )
        previous, previous_count = file, count if count is not None else previous_count
    return steps


def choose_step(
    steps: list[PassStep], pass_name: str | None, to_step: int | None, module: ModuleInfo
) -> tuple[PassStep, list[str]]:
    """The step a ``--pass NAME`` (as :func:`xlarun.navigate.select.pass_step` reads it) or ``--to STEP`` names."""
    module_label = module.label
    if not steps:
        raise InputError(
            f"{module_label} has no per-pass text dumps", "capture with dump.pass_re (e.g. '.*') and dump.formats including text"
        )
    if to_step is not None:
        hit = [s for s in steps if s.step == to_step]
        if not hit:
            raise InputError(f"{module_label} has no pass dump at step {to_step}", f"steps: {_ranges([s.step for s in steps])}")
        return hit[0], []
    number, others = pass_step(module, pass_name or "")
    chosen = next((s for s in steps if s.step == number), None)
    if chosen is None:
        raise InputError(
            f"{module_label} has no HLO text dump at step {number} (after {pass_name})",
            "capture with dump.formats including text",
        )
    notes = [f"{pass_name} also ran at steps {', '.join(map(str, others))} (--to STEP picks one)"] if others else []
    return chosen, notes


def _ranges(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if steps else "none"


def pass_diff(
    store: RunStore,
    module: ModuleInfo,
    pass_name: str | None = None,
    from_step: int | None = None,
    to_step: int | None = None,
    context: int = 3,
) -> ModuleDiff:
    """What one pass did to ``module``: its dump against the dump before it (or ``from_step`` against ``to_step``)."""
    if pass_name is None and to_step is None:
        raise InputError("say which pass: --pass NAME, or --from STEP --to STEP")
    steps = pass_steps(module)
    chosen, notes = choose_step(steps, pass_name, to_step, module)
    if from_step is not None:
        start = [s for s in steps if s.step == from_step]
        if not start:
            raise InputError(f"{module.label} has no pass dump at step {from_step}", f"steps: {_ranges([s.step for s in steps])}")
        left_path, left_digest, left_label = start[0].path, start[0].digest, f"step {from_step} ({start[0].label})"
    elif chosen.previous_path is None or chosen.previous_digest is None:
        raise InputError(f"{module.label} has no dump before step {chosen.step}", "capture with dump.formats including text")
    else:
        left_path, left_digest = chosen.previous_path, chosen.previous_digest
        earlier = [s for s in steps if s.path == left_path]
        left_label = f"step {earlier[0].step} ({earlier[0].label})" if earlier else "before_optimizations"
    before_text = store.blobs.get(left_digest).decode("utf-8", errors="replace")
    after_text = store.blobs.get(chosen.digest).decode("utf-8", errors="replace")
    diff = diff_hlo_texts(
        before_text,
        after_text,
        f"{module.ref} {left_label}",
        f"{module.ref} step {chosen.step} ({chosen.label})",
        context=context,
        before_path=left_path,
        after_path=chosen.path,
    )
    diff.notes = notes
    return diff


def run_diff(
    store: RunStore,
    module_a: ModuleInfo,
    module_b: ModuleInfo,
    stage: str = "before_optimizations",
    keep_metadata: bool = False,
    context: int = 3,
) -> ModuleDiff:
    """The same module in two runs, at one stage; instructions matched by name, then by position."""
    files = [select_file(m, stage, purpose="graph") for m in (module_a, module_b)]
    texts = []
    for module, file in zip((module_a, module_b), files, strict=True):
        if file.format != "text":
            raise InputError(f"{module.label} has no HLO text at {stage}", "capture with dump.formats including text")
        text = store.blobs.get(file.digest).decode("utf-8", errors="replace")
        texts.append(text if keep_metadata else without_provenance(text))
    diff = diff_hlo_texts(
        texts[0],
        texts[1],
        f"{module_a.ref} {stage}",
        f"{module_b.ref} {stage}",
        by_position=True,
        context=context,
        before_path=files[0].path,
        after_path=files[1].path,
    )
    if module_a.fingerprint and module_a.fingerprint == module_b.fingerprint:
        diff.notes.append("same fingerprint: the two modules compute the same thing (metadata aside)")
    if not keep_metadata:
        diff.notes.append("metadata (op_name, source lines) left out of the text diff; --keep-metadata keeps it")
    return diff
