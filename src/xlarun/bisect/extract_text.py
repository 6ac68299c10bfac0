"""Cut one instruction and its operands within K hops out of a module's HLO text, as a module of its own.

The new module holds only what the kept instructions need: the computations they call (transitively), not the
rest of the module, and no other kernel: another array-valued fusion (or call, conditional, loop) than the
instruction is a parameter, its value the run's, never a copy of its body. Its header is written from the new signature (its
``entry_computation_layout`` from the parameters' and the result's shapes, no ``input_output_alias`` or
``buffer_donor``, which name the old parameters and outputs). Sharding annotations are dropped (the extract runs
on one device: a per-device step's values are one device's), a tuple-valued operand the hops do not reach is not
kept behind a ``get-tuple-element`` (the element becomes a parameter; a loop the hops reach comes with the tuple it
starts from), and stack-frame ids, which point into tables the extract does not carry, are taken out of the metadata.
Collectives are never kept (their value, as the run computed it, is a parameter). An instruction in the body of
an entry ``while`` or ``call`` is cut from that body (its values: :func:`~xlarun.bisect.extract.first_iteration`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from xlarun.errors import InputError
from xlarun.replay.deoptimize import Instruction, deoptimize_hlo_text, logical_lines, parse_instruction
from xlarun.replay.partitioned import COLLECTIVE_OPCODES

_NAME = re.compile(r"%([\w.\-]+)")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*(?:\(.*\)\s*->\s*.*)?\{\s*$")
#: Attributes whose values name computations the instruction calls.
_CALLS = {
    "to_apply",
    "calls",
    "body",
    "condition",
    "branch_computations",
    "true_computation",
    "false_computation",
    "called_computations",
    "comparator",
    "select",
    "scatter",
}
#: Custom-calls that move a value between global and per-device shapes: no meaning on one device, never kept.
_SHAPE_CHANGING_TARGETS = (
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "xla.sdy.GlobalToLocalShape",
    "xla.sdy.LocalToGlobalShape",
)
_STACK_FRAME = re.compile(r"\s*stack_frame_id=\d+")


@dataclass
class Extracted:
    """The standalone module and, where the run's values are known, its arguments and expected result."""

    text: str
    instruction: str
    kept: list[str]  # instructions of the original module's entry in the new one, in order
    parameters: list[str]  # original values that became parameters, in parameter order
    arguments: list | None = None
    result: object = None
    files: list[str] = field(default_factory=list)
    instructions: int = 0  # instruction lines of the new module, in every computation it holds
    computations: list[str] = field(default_factory=list)  # the called computations it carries
    #: The entry's while (or call) whose body holds the instruction: the values are its first iteration's (its one run's).
    called_by: str | None = None
    body: str | None = None
    origin: dict = field(default_factory=dict)  # where it was cut from: run, module, step, pass, versions, host, culprit

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("arguments"), data.pop("result")
        return data | {"has_values": self.arguments is not None, "bytes": len(self.text.encode())}


@dataclass
class Computation:
    name: str
    lines: list[str]  # the header line, the instruction lines, the closing brace
    entry: bool


def computations_of(text: str) -> tuple[list[Computation], dict[str, Computation]]:
    """The module's computations in order (each with its lines, the entry marked), and by name."""
    found: list[Computation] = []
    current: Computation | None = None
    for line in logical_lines(text):
        if current is None:
            match = _COMPUTATION.match(line) if not line.startswith((" ", "HloModule")) else None
            if match:
                current = Computation(match["name"].lstrip("%"), [line], bool(match["entry"]))
            continue
        current.lines.append(line)
        if line.startswith("}"):
            found.append(current)
            current = None
    return found, {c.name: c for c in found}


def instructions_of(computation: Computation) -> dict[str, tuple[int, Instruction]]:
    """The computation's instructions by name: (position, the parsed line)."""
    parsed: dict[str, tuple[int, Instruction]] = {}
    for i, line in enumerate(computation.lines[1:-1]):
        instr = parse_instruction(line)
        if instr is not None:
            parsed[instr.name.lstrip("%")] = (i, instr)
    return parsed


def _called(instr: Instruction, names: dict[str, Computation]) -> list[str]:
    return [
        n
        for a in instr.attributes
        if a.split("=", 1)[0] in _CALLS
        for n in re.findall(r"%?([\w.\-]+)", a.split("=", 1)[1])
        if n in names
    ]


def _body_of(target: str, computations: list[Computation], names: dict[str, Computation]) -> tuple[Computation, Instruction]:
    """The body that holds ``target`` of an entry ``while`` or ``call``, and that instruction; refused, naming the entry
    instruction to extract instead, when ``target`` lives elsewhere (a loop in a loop, a fusion's body, a condition)."""
    holder = next((c for c in computations if not c.entry and target in instructions_of(c)), None)
    if holder is None:
        raise InputError(
            f"no instruction {target!r} in the module", "`xlarun cat REF` prints the module with its instruction names"
        )
    callers: dict[str, tuple[Computation, Instruction]] = {}
    for computation in computations:
        for _, instr in instructions_of(computation).values():
            for name in _called(instr, names):
                callers.setdefault(name, (computation, instr))
    if holder.name in callers:
        computation, runner = callers[holder.name]
        key = {"while": "body=", "call": "to_apply="}.get(runner.opcode)
        body = next((a.split("=", 1)[1].lstrip("%") for a in runner.attributes if key and a.startswith(key)), None)
        if computation.entry and body == holder.name:
            return holder, runner
    current, seen = holder.name, {holder.name}
    while current in callers:  # up through the calls to the entry instruction that runs the computation
        computation, instr = callers[current]
        if computation.entry:
            name = instr.name.lstrip("%")
            raise InputError(
                f"{target!r} is inside {holder.name}, which {name} ({instr.opcode}) of the entry computation runs: "
                "an extract starts from an instruction of the entry or of the body of an entry while or call",
                f"extract {name} itself, with its loop or call: xlarun extract REF {name} --hops 0",
            )
        if computation.name in seen:
            break
        current = computation.name
        seen.add(current)
    raise InputError(
        f"{target!r} is inside {holder.name}, which no entry instruction runs", "extract an instruction of the entry"
    )


def _is_tuple(shape: str) -> bool:
    return shape.startswith("(")


def _unkept_boundary(instr: Instruction) -> bool:
    """Values that are never kept (read as parameters instead): collectives and per-device shape changes have no
    one-device form."""
    if instr.opcode.removesuffix("-start").removesuffix("-done") in COLLECTIVE_OPCODES or instr.opcode == "partition-id":
        return True
    return instr.opcode == "custom-call" and any(
        f'custom_call_target="{t}"' in a for a in instr.attributes for t in _SHAPE_CHANGING_TARGETS
    )


#: Producers that run a computation of their own (a kernel, a called body): another one than the extract's
#: instruction is a parameter holding the value the run computed, so its body does not come along.
_OWN_COMPUTATION_OPCODES = ("fusion", "call", "conditional", "while", "async-start")


def _runs_its_own_computation(instr: Instruction) -> bool:
    """An array-valued fusion, call, conditional or loop: its value is the extract's parameter. A tuple-valued one
    is kept when reached (a tuple has no literal to give as a parameter)."""
    return instr.opcode in _OWN_COMPUTATION_OPCODES and not _is_tuple(instr.shape)


def extract_instruction(text: str, instruction: str, hops: int = 1) -> Extracted:
    """The module of ``instruction`` and its operands within ``hops`` of it, read from HLO ``text``."""
    if hops < 0:
        raise InputError(f"--hops must be 0 or more, not {hops}")
    computations, names = computations_of(text)
    entry = next((c for c in computations if c.entry), None)
    if entry is None:
        raise InputError("the module text has no ENTRY computation")
    host_lines = instructions_of(entry)
    target = instruction.lstrip("%")
    called_by: Instruction | None = None
    if target not in host_lines:
        if not any(target in instructions_of(c) for c in computations):
            near = sorted(n for n in host_lines if n.split(".")[0] == target.split(".")[0])[:8]
            raise InputError(
                f"no instruction {target!r} in the module",
                f"did you mean: {', '.join(near)}" if near else "`xlarun cat REF` prints the module with its instruction names",
            )
        body_computation, called_by = _body_of(target, computations, names)
        host_lines = instructions_of(body_computation)  # the body hosts the extract: what it is given becomes parameters
    if _is_tuple(host_lines[target][1].shape) or host_lines[target][1].shape.startswith("token"):
        raise InputError(
            f"{target!r} has a {host_lines[target][1].shape[:80]} value, not an array: an extract's result is one array",
            f"extract one of its get-tuple-element users (`xlarun cat REF | grep '(%{target})'` lists them)",
        )
    if _unkept_boundary(host_lines[target][1]):
        raise InputError(
            f"{target!r} is a collective ({host_lines[target][1].opcode}) between devices, which has no one-device extract",
            "extract what it reads or what reads it (its value is then a parameter, as the run computed it)",
        )
    keep = _kept(host_lines, target, hops)
    order = sorted(keep, key=lambda n: host_lines[n][0])
    parameters = list(dict.fromkeys(o for n in order for o in _operands(host_lines[n][1]) if o not in keep and o in host_lines))
    module_name = re.sub(r"\W", "_", f"extract_{target}")
    body = [f"  %{p} = {host_lines[p][1].shape} parameter({i})" for i, p in enumerate(parameters)]
    for name in order:
        body.append(_standalone(host_lines[name][1], root=name == target).render())
    called = _reachable([host_lines[n][1] for n in order], names)
    signature = ", ".join(f"{p}: {host_lines[p][1].shape}" for p in parameters)
    result = host_lines[target][1].shape
    layout = f"({', '.join(host_lines[p][1].shape for p in parameters)})->{result}"
    out = [f"HloModule {module_name}, entry_computation_layout={{{layout}}}", ""]
    for computation in computations:
        if computation.name in called:
            out += [_clean(line) for line in computation.lines] + [""]
    out += [f"ENTRY %{module_name} ({signature}) -> {result} {{", *body, "}", ""]
    standalone = deoptimize_hlo_text("\n".join(out)).text  # fusions become calls, layout bitcasts reshapes: it compiles as given
    count = sum(1 for line in standalone.splitlines() if parse_instruction(line) is not None)
    found = Extracted(standalone, target, order, parameters, instructions=count, computations=sorted(called))
    if called_by is not None:
        found.called_by, found.body = called_by.name.lstrip("%"), body_computation.name
    return found


def _kept(host_lines: dict[str, tuple[int, Instruction]], target: str, hops: int) -> set[str]:
    keep = {target}
    frontier = [target]
    for _ in range(hops):
        frontier = [o for name in frontier for o in _operands(host_lines[name][1]) if o in host_lines and o not in keep]
        frontier = [
            o
            for o in dict.fromkeys(frontier)
            if host_lines[o][1].opcode != "parameter"
            and not _unkept_boundary(host_lines[o][1])
            and not _runs_its_own_computation(host_lines[o][1])
        ]
        keep.update(frontier)
    for name in list(keep - {target}):  # the tuple a kept loop starts from comes along: its elements are the parameters
        keep.update(o for o in _operands(host_lines[name][1]) if o in host_lines and host_lines[o][1].opcode == "tuple")
    for name in list(keep):  # and constants read by what is kept come along: they cost nothing and need no value
        keep.update(o for o in _operands(host_lines[name][1]) if o in host_lines and host_lines[o][1].opcode == "constant")
    changed = True
    while changed:  # a kept value reading a tuple that is not kept becomes a parameter itself: a tuple has no literal here
        reads_tuple = {
            n
            for n in keep - {target}
            if any(o in host_lines and o not in keep and _is_tuple(host_lines[o][1].shape) for o in _operands(host_lines[n][1]))
        }
        keep -= reads_tuple
        changed = bool(reads_tuple)
    tuples = [
        o for o in _operands(host_lines[target][1]) if o in host_lines and o not in keep and _is_tuple(host_lines[o][1].shape)
    ]
    if tuples and _unkept_boundary(host_lines[tuples[0]][1]):
        raise InputError(
            f"{target!r} takes an element of {tuples[0]!r}, a collective ({host_lines[tuples[0]][1].opcode}) between "
            "devices, which has no one-device extract",
            f"extract what reads {target} (its value is then a parameter, as the run computed it)",
        )
    if tuples:
        raise InputError(
            f"{target!r} reads the tuple {tuples[0]!r}, which an extract cannot take as a parameter",
            f"extract with more --hops (to keep {tuples[0]}), or extract what reads {target}",
        )
    return keep


def _standalone(instr: Instruction, *, root: bool, indent: str = "  ") -> Instruction:
    """The instruction as the extract holds it: no sharding; a sharding annotation is a copy."""
    instr.root, instr.indent = root, indent
    instr.attributes = [_STACK_FRAME.sub("", a) for a in instr.attributes if a.split("=", 1)[0] not in ("sharding",)]
    if instr.opcode == "custom-call" and any(a == 'custom_call_target="Sharding"' for a in instr.attributes):
        instr.opcode = "copy"
        instr.attributes = [a for a in instr.attributes if a.split("=", 1)[0] in ("metadata",)]
    return instr


def _clean(line: str) -> str:
    instr = parse_instruction(line)
    return line if instr is None else _standalone(instr, root=instr.root, indent=instr.indent).render()


def _reachable(kept: list[Instruction], names: dict[str, Computation]) -> set[str]:
    found: set[str] = set()
    todo = [n for instr in kept for n in _called(instr, names)]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        todo += [n for _, instr in instructions_of(names[name]).values() for n in _called(instr, names)]
    return found


def _operands(instr: Instruction) -> list[str]:
    named = _NAME.findall(instr.operands)
    if named:
        return named
    return [part.strip().split()[-1] for part in instr.operands.split(",") if part.strip()]
