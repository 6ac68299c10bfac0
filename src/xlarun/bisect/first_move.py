"""Where in the culprit step the numbers first move: the instruction, its source line, the error it starts.

A bisection names the pass; this names the op. The culprit step's module and the module just before it
(the previous step's dump, or ``before_optimizations``) run on the bisection's arguments with every array
value of their entry computation made an output (a tuple ROOT of them all). Instructions are paired by
name (a pass keeps the names of what it leaves alone), else by ``op_name`` and opcode where that pair is
unique. Walking the step's module in its order (operands first), the first paired value that is not its
counterpart's, value for value, is where the numbers move; the first whose error passes the bisection's
tolerance is where they become visible. Instructions the pass created (no counterpart) feeding the mover
are named with it: they are usually what the pass put there. A value whose difference does not reach what reads it
is passed over as rewritten (the pass changed what its name computes). Every paired value's error is kept (the
report colours the step's graph by it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from xlarun.errors import EngineError, InputError
from xlarun.hlo import load_hlo
from xlarun.replay.compare import compare_outputs
from xlarun.replay.deoptimize import CannotDeoptimize, parse_instruction, split_top_level

if TYPE_CHECKING:
    from xlarun.bisect.bisect_plan import BisectPlan
    from xlarun.render.error_colours import ValueErrors

#: At most this many values are made outputs (the first ones in the module's order): memory stays bounded
#: on a big step, and the first mover is almost always early.
MAX_VALUES = 4000


@dataclass
class MovedValue:
    """One instruction of the culprit step with its value compared to its counterpart's."""

    name: str
    opcode: str
    shape: str
    counterpart: str
    max_abs_error: float
    max_rel_error: float
    op_name: str | None = None
    source: str | None = None  # "file.py:12"
    #: Operands the pass created (no counterpart before it), e.g. the constant algsimp folded.
    new_operands: list[str] = field(default_factory=list)

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        what = f" ({self.op_name})" if self.op_name else ""
        created = f"; fed by {', '.join(self.new_operands)}, new in this step" if self.new_operands else ""
        renamed = "" if self.counterpart == self.name else f" (was {self.counterpart})"
        return (
            f"{self.name}{renamed} = {self.shape} {self.opcode}{what}{where}: max abs error "
            f"{self.max_abs_error:.3g}, rel {self.max_rel_error:.3g}{created}"
        )


@dataclass
class FirstMove:
    """The answer: the first value that moves, the first past the tolerance, and what was compared."""

    step: str
    against: str
    compared: int = 0
    unpaired: int = 0
    moved: MovedValue | None = None
    visible: MovedValue | None = None
    notes: list[str] = field(default_factory=list)
    #: The step's module file (a path in its run), when it is one of the run's dumps.
    step_path: str | None = None
    #: Every paired value of the step: name -> (max abs error, max rel error) against its counterpart.
    value_errors: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: The paired values past the tolerance, in the module's order.
    past_tolerance: list[str] = field(default_factory=list)
    #: Values that differ from their counterpart while what reads them does not (identical; within the tolerance for
    #: one past it): the pass rewrote what the name computes (reduce(negate(x)) became negate(reduce(x))); not taken
    #: for the first move.
    rewritten: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FirstMove:
        data = dict(data)
        for key in ("moved", "visible"):
            if data.get(key) is not None:
                data[key] = MovedValue(**data[key])
        return cls(**data)

    def error_values(self, abs_tolerance: float, rel_tolerance: float) -> ValueErrors:
        """What :func:`xlarun.render.error_colours.colour_by_error` draws: each paired value's errors and marks."""
        from xlarun.render.error_colours import ValueErrors

        return ValueErrors(
            {name: (float(e[0]), float(e[1])) for name, e in self.value_errors.items()},
            abs_tolerance,
            rel_tolerance,
            set(self.past_tolerance),
            self.moved.name if self.moved else None,
            self.visible.name if self.visible else None,
            set(self.rewritten),
        )

    def lines(self) -> list[str]:
        out = [
            f"compared         {self.step} with {self.against}, value by value: {self.compared} paired values read, "
            f"{self.unpaired} values new in the step"
        ]
        if self.moved is None:
            out.append("no value of the entry computation moves: the change is inside a called computation")
        else:
            out.append(f"first to move    {self.moved.describe()}")
            if self.visible is not None and self.visible.name != self.moved.name:
                out.append(f"first past tol   {self.visible.describe()}")
        return out + self.notes


def expose_values(text: str) -> tuple[str, list[str]]:
    """``text`` with its entry computation returning every array value it computes (parameters and constants aside),
    in order:
    (the new text, the names of the values in output order)."""
    lines = text.splitlines()
    entry = next((i for i, line in enumerate(lines) if line.startswith("ENTRY ")), None)
    if entry is None:
        raise CannotDeoptimize("no ENTRY computation in the module text")
    end = next((i for i in range(entry + 1, len(lines)) if lines[i].startswith("}")), None)
    if end is None:
        raise CannotDeoptimize("the ENTRY computation is not closed")
    names: list[str] = []
    shapes: list[str] = []
    for i in range(entry + 1, end):
        instr = parse_instruction(lines[i])
        if instr is None:
            continue
        if instr.root:
            instr.root = False
            lines[i] = instr.render()
        # parameters and constants are known without a run; and a constant made an output can hang PjRt's read
        # back on CPU after a full pipeline (jaxlib 0.10.2: np.asarray of it waits forever)
        if instr.opcode in ("parameter", "constant") or instr.shape.startswith(("(", "token")) or len(names) >= MAX_VALUES:
            continue
        names.append(instr.name.lstrip("%"))
        shapes.append(instr.shape)
    if not names:
        raise CannotDeoptimize("the entry computation computes no array value")
    tuple_shape = f"({', '.join(shapes)})"
    lines.insert(end, f"  ROOT %xlarun.values = {tuple_shape} tuple({', '.join('%' + n for n in names)})")
    head, arrow, _result = lines[entry].rpartition(" -> ")
    if not arrow:
        raise CannotDeoptimize(f"cannot read the ENTRY signature: {lines[entry][:80]}")
    lines[entry] = f"{head} -> {tuple_shape} {{"
    for i, line in enumerate(lines[:entry]):
        if line.startswith("HloModule"):
            lines[i] = header_without(line, *RESULT_BOUND_KEYS)
    return "\n".join(lines) + "\n", names


#: Header attributes that describe the entry's parameters and result: stale once either changes (a donated
#: argument aliased to output {M} fails to compile when output M is another value).
RESULT_BOUND_KEYS = ("entry_computation_layout", "input_output_alias", "buffer_donor")


def header_without(header: str, *keys: str) -> str:
    """The ``HloModule NAME, key=value, ...`` line without the attributes ``keys``."""
    name, comma, rest = header.partition(",")
    if not comma:
        return header
    try:
        attributes = split_top_level(rest)
    except CannotDeoptimize:
        raise CannotDeoptimize("unbalanced brackets in the module header") from None
    kept = [a for a in attributes if a.split("=", 1)[0].strip() not in keys]
    return ", ".join([name, *kept])


def find_first_move(
    run: Callable[[str], list | None],
    before_text: str,
    step_text: str,
    abs_tolerance: float,
    rel_tolerance: float,
    step: str = "the culprit step",
    against: str = "the step before it",
    run_before: Callable[[str], list | None] | None = None,
) -> FirstMove:
    """Run both modules with every value exposed (``run`` takes HLO text, returns its outputs flattened; ``run_before``,
    if given, runs ``before_text`` instead, e.g. compiled with other options) and find the first value of
    ``step_text`` that differs from its counterpart in ``before_text``."""
    before_exposed, before_names = expose_values(before_text)
    step_exposed, step_names = expose_values(step_text)
    before_values = _named((run_before or run)(before_exposed), before_names, against)
    step_values = _named(run(step_exposed), step_names, step)
    before_info = _instructions(before_text)
    step_info = _instructions(step_text)
    pairs = _pair(step_names, before_names, step_info, before_info)
    answer = FirstMove(step, against, unpaired=len(step_names) - len(pairs))
    for name in step_names:
        counterpart = pairs.get(name)
        found = (
            None if counterpart is None else _errors(step_values[name], before_values[counterpart], abs_tolerance, rel_tolerance)
        )
        if found is not None:
            answer.compared += 1
            answer.value_errors[name] = found[2]
            if found[1]:
                answer.past_tolerance.append(name)
    answer.rewritten = _rewritten(answer.value_errors, set(answer.past_tolerance), step_info)
    passed_over = set(answer.rewritten)
    for name in answer.value_errors:
        if name in passed_over or answer.value_errors[name] == (0.0, 0.0):
            continue
        if answer.moved is None:
            answer.moved = _moved(name, pairs[name], answer.value_errors[name], step_info, pairs)
        if answer.visible is None and name in answer.past_tolerance:
            answer.visible = _moved(name, pairs[name], answer.value_errors[name], step_info, pairs)
            break
    if answer.rewritten:
        answer.notes.append(
            f"passed over as rewritten, not moved ({len(answer.rewritten)}): "
            f"{', '.join(answer.rewritten[:5])}{' ...' if len(answer.rewritten) > 5 else ''}; each differs from the value "
            "of its name before the step, but what reads it does not (identical, or within the tolerance where it is "
            "past it): the pass changed what the name computes, e.g. moved a negate past a reduce"
        )
    if len(step_names) >= MAX_VALUES:
        answer.notes.append(f"only the first {MAX_VALUES} values of the step were compared")
    return answer


def locate_first_move(replayer: Any, step: Any, previous: Any, plan: BisectPlan, log: Callable[[str], None]) -> dict:
    """:func:`find_first_move` for a bisection's culprit ``step`` (a PassStep) against ``previous`` (the step
    before it, or the before_optimizations FileInfo), run by the bisection's replayer; a failure is a note."""
    label = getattr(step, "label", "the culprit step")
    against = getattr(previous, "label", None) or "before_optimizations"
    try:
        answer = find_first_move(
            replayer.run_text,
            replayer.text(previous.path),
            replayer.text(step.path),
            plan.options.abs_tolerance,
            plan.options.rel_tolerance,
            f"step {step.step} ({label})",
            against,
        )
    except (EngineError, InputError) as exc:
        answer = FirstMove(f"step {step.step} ({label})", against)
        answer.notes.append(f"the first moving instruction could not be found: {exc.one_line()}")
    answer.step_path = getattr(step, "path", None)
    for line in answer.lines():
        log(line)
    return answer.to_dict()


def _named(outputs: list | None, names: list[str], what: str) -> dict[str, np.ndarray]:
    if outputs is None or len(outputs) != len(names):
        got = "no outputs" if outputs is None else f"{len(outputs)} outputs"
        raise CannotDeoptimize(f"{what} with its values exposed gave {got}, {len(names)} expected")
    return dict(zip(names, (np.asarray(o) for o in outputs), strict=True))


def _instructions(text: str) -> dict[str, object]:
    module = load_hlo(text.encode(), "step")
    entry = module.computations[module.entry_computation]
    return {i.name.lstrip("%"): i for i in entry.instructions}


def _pair(step_names: list[str], before_names: list[str], step_info: dict, before_info: dict) -> dict[str, str]:
    """Step value -> its counterpart before the step: the same name, else the only one with its op_name and opcode."""
    before_set = set(before_names)
    pairs = {n: n for n in step_names if n in before_set and _same_size(step_info.get(n), before_info.get(n))}
    taken = set(pairs.values())

    def key(info: Any) -> tuple | None:
        op_name = getattr(info, "op_name", None)
        return (op_name, info.opcode) if op_name else None

    by_key: dict[tuple, list[str]] = {}
    for n in before_names:
        if n not in taken and (k := key(before_info.get(n))) is not None:
            by_key.setdefault(k, []).append(n)
    wanted: dict[tuple, list[str]] = {}
    for n in step_names:
        if n not in pairs and (k := key(step_info.get(n))) is not None:
            wanted.setdefault(k, []).append(n)
    for k, names in wanted.items():
        if len(names) == 1 and len(by_key.get(k, [])) == 1 and _same_size(step_info[names[0]], before_info[by_key[k][0]]):
            pairs[names[0]] = by_key[k][0]
    return pairs


_DIMS = re.compile(r"\[([^\]]*)\]")


def _same_size(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    dims_a, dims_b = _DIMS.search(a.shape), _DIMS.search(b.shape)
    return dims_a is not None and dims_b is not None and dims_a.group(1) == dims_b.group(1)


def _errors(value: np.ndarray, reference: np.ndarray, abs_tolerance: float, rel_tolerance: float) -> Any:
    """(moved at all, past the tolerance, (max abs, max rel error)) of two values of one shape, whatever their
    element types (a pass may turn bf16 into f32); None when they cannot be compared."""
    if value.shape != reference.shape:
        return None
    kind = np.complex128 if np.iscomplexobj(value) or np.iscomplexobj(reference) else np.float64
    try:
        a, b = value.astype(kind), reference.astype(kind)
    except (TypeError, ValueError):
        return None
    moved = not np.array_equal(a, b, equal_nan=True)
    if not moved:
        return False, False, (0.0, 0.0)
    comparison = compare_outputs([a], [b], abs_tolerance, rel_tolerance, "the value before the step")
    return True, not comparison.matched, (comparison.max_abs_error, comparison.max_rel_error)


#: How far past a moved value the search for the paired values reading it goes (through values new in the step).
_MAX_READERS_VISITED = 2000


def _rewritten(errors: dict[str, tuple[float, float]], past: set[str], info: dict) -> list[str]:
    """The moved values whose readers (the first paired ones, looking through values new in the step; at least one)
    are all identical to their counterparts or rewritten themselves, or, for a value past the tolerance, all within
    it (a sum that changed sign, read by a negate new in the step: what reads that differs by a rounding): the
    difference does not travel. Readers come after what they read, so one walk from the last value back decides each."""
    readers: dict[str, list[str]] = {}
    for name, instr in info.items():
        for operand in getattr(instr, "operands", []):
            readers.setdefault(operand.lstrip("%"), []).append(name)
    found: set[str] = set()
    for name in reversed(list(errors)):
        if errors[name] == (0.0, 0.0):
            continue
        seen, pending, paired = {name}, list(readers.get(name, [])), []
        while pending and len(seen) < _MAX_READERS_VISITED:
            reader = pending.pop()
            if reader in seen:
                continue
            seen.add(reader)
            if reader in errors:
                paired.append(reader)
            else:
                pending.extend(readers.get(reader, []))
        travels = [r for r in paired if r not in found]
        unmoved = all(errors[r] == (0.0, 0.0) for r in travels)
        if paired and not pending and (unmoved or (name in past and not any(r in past for r in travels))):
            found.add(name)
    return [n for n in errors if n in found]


def _moved(name: str, counterpart: str, errors: tuple[float, float], info: dict, pairs: dict[str, str]) -> MovedValue:
    instr = info.get(name)
    source = None
    if instr is not None and instr.source_file:
        source = f"{instr.source_file}:{instr.source_line}" if instr.source_line else instr.source_file
    operands = [o.lstrip("%") for o in getattr(instr, "operands", [])]
    created = [o for o in operands if o not in pairs and o in info and info[o].opcode != "parameter"]
    return MovedValue(
        name,
        getattr(instr, "opcode", "?"),
        getattr(instr, "shape", "?"),
        counterpart,
        errors[0],
        errors[1],
        getattr(instr, "op_name", None),
        source,
        created,
    )
