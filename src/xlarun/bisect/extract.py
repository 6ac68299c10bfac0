"""Shrink a repro: ``xlarun extract REF INSTRUCTION --hops K``.

The instruction and the operands within K hops of it (constants always, so the repro stays self-contained)
become a standalone module; every other value they read becomes a parameter. The original module runs once on
its arguments (the snapshot's, else seeded fake data) with every entry value made an output
(:func:`~xlarun.bisect.first_move.expose_values`), so the new module's parameters get the values the run
computed, and its expected result is the instruction's value: written as an HloSnapshot that ``xlarun replay``
replays to a match, and ``bundle`` or a bug report carries in a few kilobytes. This is what XLA's hlo-extractor
does by hand, tied to the values of a real run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from xlarun.bisect.first_move import expose_values
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.deoptimize import Instruction, deoptimize_hlo_text, parse_instruction

_NAME = re.compile(r"%([\w.\-]+)")


@dataclass
class Extracted:
    """The standalone module and, where the run's values are known, its arguments and expected result."""

    text: str
    instruction: str
    kept: list[str]  # instructions of the original module in the new one, in order
    parameters: list[str]  # original values that became parameters, in parameter order
    arguments: list | None = None
    result: object = None
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("arguments"), data.pop("result")
        return data | {"has_values": self.arguments is not None}


def extract_instruction(text: str, instruction: str, hops: int = 1) -> Extracted:
    """The module of ``instruction`` and its operands within ``hops`` of it, read from HLO ``text``."""
    if hops < 0:
        raise InputError(f"--hops must be 0 or more, not {hops}")
    lines = text.splitlines()
    entry = next((i for i, line in enumerate(lines) if line.startswith("ENTRY ")), None)
    end = next((i for i in range(entry + 1, len(lines)) if lines[i].startswith("}")), None) if entry is not None else None
    if entry is None or end is None:
        raise InputError("the module text has no ENTRY computation")
    entry_lines: dict[str, tuple[int, Instruction]] = {}
    for i in range(entry + 1, end):
        parsed = parse_instruction(lines[i])
        if parsed is not None:
            entry_lines[parsed.name.lstrip("%")] = (i, parsed)
    target = instruction.lstrip("%")
    if target not in entry_lines:
        near = sorted(n for n in entry_lines if n.split(".")[0] == target.split(".")[0])[:8]
        raise InputError(
            f"no instruction {target!r} in the entry computation",
            f"did you mean: {', '.join(near)}" if near else "`xlarun cat REF` prints the module with its instruction names",
        )
    keep = {target}
    frontier = [target]
    for _ in range(hops):
        frontier = [o for name in frontier for o in _operands(entry_lines[name][1]) if o in entry_lines and o not in keep]
        frontier = [o for o in dict.fromkeys(frontier) if entry_lines[o][1].opcode != "parameter"]
        keep.update(frontier)
    for name in list(keep):  # constants read by what is kept come along: they cost nothing and need no value
        keep.update(o for o in _operands(entry_lines[name][1]) if o in entry_lines and entry_lines[o][1].opcode == "constant")
    order = sorted(keep, key=lambda n: entry_lines[n][0])
    parameters = list(dict.fromkeys(o for n in order for o in _operands(entry_lines[n][1]) if o not in keep and o in entry_lines))
    body = [f"  %{p} = {entry_lines[p][1].shape} parameter({i})" for i, p in enumerate(parameters)]
    for name in order:
        instr = entry_lines[name][1]
        instr.root = name == target
        instr.indent = "  "
        body.append(instr.render())
    signature = ", ".join(f"{p}: {_plain(entry_lines[p][1].shape)}" for p in parameters)
    module_name = re.sub(r"\W", "_", f"extract_{target}")
    header = [f"HloModule {module_name}", ""]
    called = [line for i, line in enumerate(lines) if i < entry and not line.startswith("HloModule")]
    out = [
        *header,
        *called,
        f"ENTRY %{module_name} ({signature}) -> {_plain(entry_lines[target][1].shape)} {{",
        *body,
        "}",
        "",
    ]
    return Extracted("\n".join(out), target, order, parameters)


def attach_values(extracted: Extracted, original_text: str, run: Callable[[str], list | None], arguments: list) -> None:
    """Run ``original_text`` on ``arguments`` with every value exposed and give the extract its parameters'
    values and its expected result (``run`` takes HLO text, returns its outputs flattened)."""
    exposed, names = expose_values(original_text)
    outputs = run(exposed)
    if outputs is None or len(outputs) != len(names):
        raise InputError("the module did not give a value for each instruction")
    values = dict(zip(names, outputs, strict=True))
    for line in original_text[original_text.index("ENTRY ") :].splitlines():
        parsed = parse_instruction(line)
        if parsed is not None and parsed.opcode == "parameter":
            number = int(parsed.operands.strip())
            values[parsed.name.lstrip("%")] = arguments[number]
    missing = [p for p in [*extracted.parameters, extracted.instruction] if p not in values]
    if missing:
        raise InputError(f"no value for {', '.join(missing)} (a tuple or token value cannot be a parameter)")
    extracted.arguments = [np.asarray(values[p]) for p in extracted.parameters]
    extracted.result = np.asarray(values[extracted.instruction])


def snapshot_bytes(extracted: Extracted, module_proto: bytes) -> bytes:
    """An HloSnapshot{hlo=HloProto{hlo_module}, arguments, result} of the extract, as XLA writes them."""
    from xlarun.hlo.protowire import encode_varint
    from xlarun.replay.literals import encode_literal

    def field_bytes(number: int, payload: bytes) -> bytes:
        return encode_varint((number << 3) | 2) + encode_varint(len(payload)) + payload

    hlo_proto = field_bytes(1, module_proto)
    out = field_bytes(1, hlo_proto)
    for value in extracted.arguments or []:
        out += field_bytes(2, encode_literal(value))
    if extracted.result is not None:
        out += field_bytes(3, encode_literal(extracted.result))
    return out


def write_extract(extracted: Extracted, output: Path, module_proto: bytes | None) -> list[str]:
    """Write ``OUTPUT.hlo.txt`` (always) and ``OUTPUT.snapshot.pb`` (with the run's values); the paths written."""
    stem = str(output).removesuffix(".pb").removesuffix(".snapshot").removesuffix(".txt").removesuffix(".hlo")
    written = [f"{stem}.hlo.txt"]
    try:
        Path(stem).parent.mkdir(parents=True, exist_ok=True)
        Path(written[0]).write_text(extracted.text)
        if extracted.arguments is not None and module_proto is not None:
            written.append(f"{stem}.snapshot.pb")
            Path(written[1]).write_bytes(snapshot_bytes(extracted, module_proto))
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write {stem}.*: {exc.strerror or exc}", "give --output a folder you can write"
        ) from None
    extracted.files = written
    return written


def _operands(instr: Instruction) -> list[str]:
    named = _NAME.findall(instr.operands)
    if named:
        return named
    return [part.strip().split()[-1] for part in instr.operands.split(",") if part.strip()]


def _plain(shape: str) -> str:
    """A shape without its layout, as a computation's signature writes it."""
    return re.sub(r"\{[^{}]*\}", "", shape)


def extract_from_store(
    store,
    module,
    instruction: str,
    *,
    hops: int = 1,
    output: Path | None = None,
    step: int | None = None,
    inputs: str = "auto",
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> Extracted:
    """Extract from a stored module's before_optimizations text (or its per-pass dump ``step``), with the values a
    run of that module computes on its snapshot's arguments (``inputs='fake'``: seeded fake data); written to
    ``output`` (default ``extract_<instruction>`` in the current folder)."""
    from xlarun.bisect.bisect_options import BisectOptions
    from xlarun.bisect.replayer import StepReplayer
    from xlarun.diff import pass_steps
    from xlarun.replay import pjrt

    say = log or (lambda _line: None)
    if step is None:
        found = next(
            (f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text"), None
        )
        if found is None:
            raise InputError(f"{module.label} has no before_optimizations text dump", "capture with dump.formats including text")
        path = found.path
    else:
        by_step = {s.step: s for s in pass_steps(module)}
        if step not in by_step:
            raise InputError(f"{module.label} has no pass step {step}", f"`xlarun show {module.ref}` lists its pass timeline")
        path = by_step[step].path
    options = BisectOptions(inputs=inputs, seed=seed).validate()
    replayer = StepReplayer(store, module, options, {}, say)
    try:
        text = replayer.text(path)
        extracted = extract_instruction(text, instruction, hops)
        say(f"{extracted.instruction}: {len(extracted.kept)} instructions, {len(extracted.parameters)} parameters from {path}")
        proto = pjrt.text_to_module_proto(extracted.text)  # XLA's parser checks the extract before any run
        replayer.arguments = replayer._arguments(pjrt.text_to_module_proto(deoptimize_hlo_text(text).text))
        attach_values(extracted, text, replayer.run_text, replayer.arguments)
    finally:
        replayer.close()
    safe = re.sub(r"[^\w.-]", "_", extracted.instruction)
    write_extract(extracted, output or Path(f"extract_{safe}"), proto)
    return extracted
