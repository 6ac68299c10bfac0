"""One function compiled more than once in a run, and how its compiles differ: their shapes, what they donate
(``input_output_alias``), how their parameters are sharded and over how many partitions, or nothing in the HLO
at all (the same module compiled again). ``xlarun modules`` says it under its table."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ALIAS = re.compile(r"input_output_alias=\{(.*?)\}\s*(?:,\s*[a-z_]+=|$)")
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_PARAMETER = re.compile(r"^\s*%?([\w.\-]+)\s*=\s*[^=]*?\sparameter\((\d+)\)(.*)$")
_SHARDING = re.compile(r"sharding=(\{(?:[^{}]|\{[^{}]*\})*\})")
_DONATED = re.compile(r"\(\s*(\d+)\s*,")


@dataclass
class CompileFacts:
    """What tells one compile of a function from another."""

    module_id: int
    signature: str | None
    fingerprint: str | None
    donated: list[int] = field(default_factory=list)  # parameter numbers aliased to an output
    partitions: int = 1
    shardings: dict[str, str] = field(default_factory=dict)  # "x (parameter 1)" -> "{devices=[4,1]<=[4]}"


@dataclass
class Recompile:
    """A later compile of a function, against its first."""

    name: str
    module_id: int
    first: int
    differences: list[str]

    def line(self) -> str:
        return f"module_{self.module_id:04d} against module_{self.first:04d}: {'; '.join(self.differences)}"


def facts_of_text(module_id: int, signature: str | None, fingerprint: str | None, text: str) -> CompileFacts:
    """The compile facts of one module's before_optimizations text."""
    header = next((line for line in text.splitlines() if line.startswith("HloModule")), "")
    found = CompileFacts(module_id, signature, fingerprint)
    alias = _ALIAS.search(header)
    found.donated = sorted({int(n) for n in _DONATED.findall(alias.group(1))}) if alias else []
    partitions = _PARTITIONS.search(header)
    found.partitions = int(partitions.group(1)) if partitions else 1
    entry = text[text.find("\nENTRY ") :] if "\nENTRY " in text else ""
    for line in entry.splitlines()[1:]:
        if line.startswith("}"):
            break
        parameter = _PARAMETER.match(line)
        if parameter:
            sharding = _SHARDING.search(parameter.group(3))
            found.shardings[f"{parameter.group(1)} (parameter {parameter.group(2)})"] = sharding.group(1) if sharding else "{}"
    return found


def differences(first: CompileFacts, later: CompileFacts) -> list[str]:
    """What differs in ``later`` from ``first``, in words."""
    out = []
    if first.signature != later.signature:
        out.append(f"other shapes: {later.signature} (was {first.signature})")
    if first.donated != later.donated:
        donates = ", ".join(map(str, later.donated)) or "nothing"
        out.append(f"donates parameter(s) {donates} (was {', '.join(map(str, first.donated)) or 'nothing'})")
    if first.partitions != later.partitions:
        out.append(f"{later.partitions} partitions (was {first.partitions})")
    changed = [
        f"{name} {sharding if sharding != '{}' else 'unsharded'}"
        for name, sharding in later.shardings.items()
        if first.shardings.get(name, "{}") != sharding
    ]
    if changed:
        out.append("shards " + ", ".join(changed))
    if not out:
        same = first.fingerprint and first.fingerprint == later.fingerprint
        out.append(
            "the same HLO, compiled again"
            if same
            else f"other HLO with the same shapes (xlarun diff {first.module_id} {later.module_id})"
        )
    return out


def tell_compiles_apart(modules: list, read_text: Callable[[Any], str | None]) -> list[Recompile]:
    """For each function compiled more than once (modules of one name), how each later compile differs from the
    first (lowest module id). ``read_text(module)`` gives a module's before_optimizations text, or None. In a run
    of many processes, each process's compiles are its own (the same function on two processes is not a recompile)."""
    by_name: dict[tuple[int | None, str], list] = {}
    for module in modules:
        if module.name:
            by_name.setdefault((getattr(module, "process", None), module.name), []).append(module)
    out = []
    for (_process, name), group in by_name.items():
        if len(group) < 2:
            continue
        group = sorted(group, key=lambda m: m.module_id)
        facts = [facts_of_text(m.module_id, m.entry_signature, m.fingerprint, read_text(m) or "") for m in group]
        out += [Recompile(name, f.module_id, facts[0].module_id, differences(facts[0], f)) for f in facts[1:]]
    return out
