"""Shrink a repro: ``xlarun extract REF INSTRUCTION --hops K``.

The instruction and the operands within K hops of it (constants always, so the repro stays self-contained)
become a standalone module (:mod:`~xlarun.bisect.extract_text` cuts the text); every other value they read
becomes a parameter. The original module runs once on its arguments (the snapshot's, else seeded fake data)
with those values and the instruction made its outputs (:func:`expose_named`; inside a loop's or call's body,
one run of the body on what it is first given: :func:`first_iteration`), so the new module's parameters get the
values the run computed, and its expected result is the instruction's value: written as an HloSnapshot that
``xlarun replay`` replays to a match, and ``bundle`` or a bug report carries in a few kilobytes, with
``STEM.extract.json`` saying where it was cut from. A per-device step of a partitioned module runs on its devices
and the extract takes device 0's values. This is what XLA's hlo-extractor does by hand, tied to the values of a
real run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from xlarun.bisect.extract_text import Extracted, computations_of, extract_instruction, instructions_of
from xlarun.bisect.first_move import RESULT_BOUND_KEYS, header_without
from xlarun.bisect.kept import SWITCHES
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay.deoptimize import parse_instruction

_REFERENCE = re.compile(r"%([\w.\-]+)")
#: The file beside an extract that says where it was cut from (``STEM.extract.json``).
ORIGIN_SUFFIX = "extract.json"
__all__ = ["Extracted", "attach_values", "expose_named", "extract_from_store", "extract_instruction", "write_extract"]


def expose_named(text: str, names: list[str]) -> str:
    """``text`` with its entry computation returning the values ``names`` (a tuple, in that order) and a header that
    no longer describes the old result (no entry layout, aliasing or donors)."""
    lines = text.splitlines()
    entry = next((i for i, line in enumerate(lines) if line.startswith("ENTRY ")), None)
    end = next((i for i in range(entry + 1, len(lines)) if lines[i].startswith("}")), None) if entry is not None else None
    if entry is None or end is None:
        raise InputError("the module text has no closed ENTRY computation")
    shapes: dict[str, str] = {}
    for i in range(entry + 1, end):
        instr = parse_instruction(lines[i])
        if instr is None:
            continue
        shapes[instr.name.lstrip("%")] = instr.shape
        if instr.root:
            instr.root = False
            lines[i] = instr.render()
    missing = [n for n in names if n not in shapes]
    if missing:
        raise InputError(f"no value {', '.join(missing)} in the module's entry computation")
    tuple_shape = f"({', '.join(shapes[n] for n in names)})"
    lines.insert(end, f"  ROOT %xlarun.extract_values = {tuple_shape} tuple({', '.join('%' + n for n in names)})")
    head, _arrow, _result = lines[entry].rpartition(" -> ")
    lines[entry] = f"{head} -> {tuple_shape} {{"
    lines = [header_without(line, *RESULT_BOUND_KEYS) if line.startswith("HloModule") else line for line in lines]
    return "\n".join(lines) + "\n"


def first_iteration(text: str, called_by: str, names: list[str]) -> tuple[str, list[str]]:
    """``text`` with the entry also running once the body of its while (or call) ``called_by`` on what that is given
    (a loop's starting tuple; a copy of the body that returns the values ``names``), and the entry values holding them."""
    computations, by_name = computations_of(text)
    entry = next(c for c in computations if c.entry)
    runner = instructions_of(entry)[called_by][1]
    key = "body=" if runner.opcode == "while" else "to_apply="
    body_name = next(a.split("=", 1)[1].lstrip("%") for a in runner.attributes if a.startswith(key))
    body = by_name[body_name]
    inside = instructions_of(body)
    copy_name = "xlarun.first_iteration"

    def renamed(line: str) -> str:
        return _REFERENCE.sub(lambda m: f"%{m[1]}.xlarun_first" if m[1] in inside else m[0], line)

    shapes = [inside[n][1].shape for n in names]
    tuple_shape = f"({', '.join(shapes)})"
    head = body.lines[0].rpartition(" -> ")[0].replace(body_name, copy_name, 1)
    copied = [f"{head} -> {tuple_shape} {{"]
    for line in body.lines[1:-1]:
        instr = parse_instruction(line)
        if instr is not None and instr.root:
            instr.root = False
            line = instr.render()
        copied.append(renamed(line))
    copied += [
        f"  ROOT %xlarun.first_iteration_values = {tuple_shape} tuple({', '.join(f'%{n}.xlarun_first' for n in names)})",
        "}",
        "",
    ]
    start = runner.operands.strip()
    calls = [f"  %xlarun.first_iteration = {tuple_shape} call({start}), to_apply=%{copy_name}"]
    picked = [f"xlarun.first.{i}" for i in range(len(names))]
    calls += [
        f"  %{p} = {shape} get-tuple-element(%xlarun.first_iteration), index={i}"
        for i, (p, shape) in enumerate(zip(picked, shapes, strict=True))
    ]
    lines = text.splitlines()
    at_entry = next(i for i, line in enumerate(lines) if line.startswith("ENTRY "))
    closing = next(i for i in range(at_entry, len(lines)) if lines[i].startswith("}"))
    lines = [*lines[:at_entry], *copied, *lines[at_entry:closing], *calls, *lines[closing:]]
    return "\n".join(lines) + "\n", picked


def attach_values(extracted: Extracted, original_text: str, run: Callable[[str], list | None], piece: int | None = None) -> None:
    """Run ``original_text`` with the extract's parameters and instruction made its outputs, and give the extract
    their values (``run`` takes HLO text, returns its outputs flattened; ``piece``: each output is the devices'
    pieces stacked, and this device's is taken)."""
    names = [*extracted.parameters, extracted.instruction]
    if extracted.called_by is not None:  # values inside a body: its first iteration's, run as a call on what it is given
        original_text, names = first_iteration(original_text, extracted.called_by, names)
    outputs = run(expose_named(original_text, names))
    if outputs is None or len(outputs) != len(names):
        raise InputError("the module did not give a value for each of the extract's parameters and its instruction")
    values = [np.asarray(v if piece is None else np.asarray(v)[piece]) for v in outputs]
    extracted.arguments, extracted.result = values[:-1], values[-1]


def snapshot_bytes(extracted: Extracted, module_proto: bytes) -> bytes:
    """An HloSnapshot{hlo=HloProto{hlo_module}, arguments, result} of the extract, as XLA writes them."""
    from xlarun.replay.literals import hlo_snapshot_bytes

    return hlo_snapshot_bytes(module_proto, list(extracted.arguments or []), extracted.result)


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
        if extracted.origin:  # read by `xlarun bundle STEM.snapshot.pb` for its README
            written.append(f"{stem}.{ORIGIN_SUFFIX}")
            Path(written[-1]).write_text(json.dumps(extracted.origin | {"instruction": extracted.instruction}, indent=2) + "\n")
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write {stem}.*: {exc.strerror or exc}", "give --output a folder you can write"
        ) from None
    extracted.files = written
    return written


def extract_from_store(
    store: Any,
    module: Any,
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
    from xlarun.replay import pjrt
    from xlarun.see.diff import pass_steps

    say = log or (lambda _line: None)
    before = next((f for f in module.files if f.kind == "hlo" and f.stage == "before_optimizations" and f.format == "text"), None)
    if before is None:
        raise InputError(f"{module.label} has no before_optimizations text dump", "capture with dump.formats including text")
    path = before.path
    if step is not None:
        by_step = {s.step: s for s in pass_steps(module)}
        if step not in by_step:
            raise InputError(f"{module.label} has no pass step {step}", f"`xlarun show {module.ref}` lists its pass timeline")
        path = by_step[step].path
    options = BisectOptions(inputs=inputs, seed=seed).validate()
    replayer, piece = _replayer(store, module, before, path, options, say)
    try:
        text = replayer.text(path)
        extracted = extract_instruction(text, instruction, hops)
        say(
            f"{extracted.instruction}: {len(extracted.kept)} instructions of the entry kept, {len(extracted.parameters)} "
            f"parameters, {extracted.instructions} instructions in all, from {path}"
            + (f" (device {piece}'s values of the per-device code)" if piece is not None else "")
            + (f" (inside {extracted.called_by}'s body: its first run's values)" if extracted.called_by else "")
        )
        proto = pjrt.text_to_module_proto(extracted.text)  # XLA's parser checks the extract before any run
        replayer.arguments = replayer._arguments(replayer.compilable_proto(before.path))
        attach_values(extracted, text, replayer.run_text, piece)
    finally:
        replayer.close()
    extracted.origin = extract_origin(store, module, step, path) | ({"device": piece} if piece is not None else {})
    if extracted.called_by is not None:
        extracted.origin |= {"called_by": extracted.called_by, "body": extracted.body, "iteration": 0}
    safe = re.sub(r"[^\w.-]", "_", extracted.instruction)
    write_extract(extracted, output or Path(f"extract_{safe}"), proto)
    return extracted


def _replayer(store: Any, module: Any, before: Any, path: str, options: Any, say: Callable[[str], None]) -> Any:
    """The replayer that computes the values of the dump at ``path``, and which device's piece of each value is the
    extract's (``None``: the run is on one device). A per-device step of a partitioned module runs on its devices;
    the extract, one device's code, gets device 0's values."""
    from xlarun.bisect.bisect_plan import plan_devices
    from xlarun.bisect.replayer import StepReplayer
    from xlarun.bisect.sharded_replayer import ShardedReplayer
    from xlarun.replay.partitioned import partitioning_of_text
    from xlarun.see.diff import pass_steps

    head = store.read_file(module.run_id, before.path)[:4096].decode("utf-8", errors="replace")
    partitioning = partitioning_of_text(head)
    if partitioning.devices <= 1:
        return StepReplayer(store, module, options, {}, say), None
    steps = pass_steps(module)
    plan = plan_devices(store, module, steps, before, partitioning, options)
    index = next((i for i, s in enumerate(steps) if s.path == path), -1)
    if plan.first_per_device is not None and index >= plan.first_per_device:
        replayer = ShardedReplayer(store, module, options, {}, say, plan, steps)
        replayer.texts_per_device = True
        return replayer, 0
    if plan.reference_devices == 1:
        return StepReplayer(store, module, options, {}, say), None
    first = steps[plan.first_per_device].step if plan.first_per_device is not None else None
    raise InputError(
        f"{module.label} holds per-device code of its own ({plan.why.split('(')[1].split(')')[0]}) before the SPMD "
        "partitioner: its global steps have no one-device values to extract",
        f"extract from a per-device step: --step {first} or later (`xlarun show {module.ref}` lists the timeline)"
        if first is not None
        else "capture with dump.pass_re '.*' so that the per-device steps are dumped",
    )


def extract_origin(store: Any, module: Any, step: int | None, path: str) -> dict:
    """Where an extract of ``module`` comes from, for its bundle's README: the run and module, the dump (step and
    pass), the run's versions, host and XLA flags, and the culprit pass a recorded bisection of the module named."""
    from xlarun.bisect.history import bisections_for
    from xlarun.see.diff import pass_steps

    manifest = store.manifest(module.run_id)
    found = next((s for s in pass_steps(module) if s.step == step), None) if step is not None else None
    versions = {k: v for k, v in (manifest.get("versions") or {}).items() if k not in ("python_executable", "probe_error")}
    host = {k: v for k, v in (manifest.get("host") or {}).items() if k in ("platform", "machine", "cpus")}
    culprits = [r for r in bisections_for(store, module.run_id, module.module_id) if r.result.culprit_pass]
    culprit = None
    if culprits:
        result = culprits[-1].result
        moved = (result.first_move or {}).get("moved") or {}
        culprit = {
            "pass": result.culprit_pass,
            "step": result.culprit_step,
            "bisect_id": culprits[-1].bisect_id,
            "first_move": moved.get("name") if isinstance(moved, dict) else None,
        }
        if result.culprit_pass in (result.kept_passes or []) and result.culprit_pass in SWITCHES:
            # a pass the module does not compile without: its effect is seen through XLA's switch, not by disabling it
            field, value, meaning = SWITCHES[result.culprit_pass]
            culprit |= {"kept": True, "switch": f"{field}={str(value).lower()}", "effect": meaning}
    return {
        "run_id": module.run_id,
        "module": module.ref,
        "label": module.label,
        "name": manifest.get("name"),
        "framework": manifest.get("framework"),
        "dump": path,
        "step": step,
        "after_pass": found.after_pass if found else None,
        "pipeline": found.pipeline if found else None,
        "versions": versions,
        "host": host,
        "xla_flags": [f for f in manifest.get("xla_flags") or [] if not f.startswith("--xla_dump")],
        "culprit": culprit,
    }
