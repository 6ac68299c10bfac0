"""Matrix specs: the cells of a ``matrix:`` section, GitHub-Actions style, and ``${matrix.AXIS}`` substitution."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from typing import Any

from xlarun.capture.spec_reader import Budget
from xlarun.errors import SpecError

Mark = tuple[int, int]


def dotted_path(path: tuple) -> str:
    """('dump', 'formats', 1) -> 'dump.formats[1]'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _short(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float, list, dict)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)  # what else YAML makes: a date (2001-01-01), a set, bytes


def cell_label(cell: dict[str, Any]) -> str:
    """'backend=local, t=10' (a value longer than 60 characters cut to its start)."""
    return ", ".join(f"{k}={_cut(_short(v), 60)}" for k, v in cell.items())


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


#: The most cells one matrix may have (GitHub Actions allows 256 jobs; a batch runs its cells on this machine).
MAX_CELLS = 1000


def expand_matrix(matrix: Any, source: str = "<spec>", where: Mark = (1, 1)) -> list[dict[str, Any]]:
    """The cells of a matrix: the product of its axes, minus ``exclude`` entries, plus ``include`` entries.

    As in GitHub Actions: an ``include`` entry that agrees with existing cells on all their original axes
    extends them with its extra keys; otherwise it is added as a cell of its own.
    """
    at = f"{source}:{where[0]}:{where[1]} matrix"
    if not isinstance(matrix, dict):
        raise SpecError(f"{at}: must be a mapping of axes to lists of values", "e.g. matrix: {backend: [local, docker-cpu]}")
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    for name, options in axes.items():
        if not isinstance(options, list) or not options:
            raise SpecError(f"{at}.{name}: must be a non-empty list of values", f"e.g. {name}: [a, b]")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise SpecError(f"{at}.{name}: axis names are identifiers (letters, digits, _)", "rename the axis")
    size = math.prod(len(options) for options in axes.values()) if axes else 0
    if size > MAX_CELLS:
        raise SpecError(
            f"{at}: {size:,} cells, more than {MAX_CELLS:,}", "split the matrix into several specs, or drop values from its axes"
        )
    cells = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())] if axes else []
    excludes = matrix.get("exclude") or []
    includes = matrix.get("include") or []
    for label, entries in (("exclude", excludes), ("include", includes)):
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise SpecError(f"{at}.{label}: must be a list of mappings", f"e.g. {label}: [{{backend: local}}]")
    cells = [c for c in cells if not any(all(c.get(k) == v for k, v in e.items()) for e in excludes)]
    for entry in includes:
        matched = False
        for cell in cells:
            if all(cell.get(k) == v for k, v in entry.items() if k in axes) and any(k in axes for k in entry):
                cell.update({k: v for k, v in entry.items() if k not in axes})
                matched = True
        if not matched:
            cells.append(dict(entry))
            if len(cells) > MAX_CELLS:  # checked as they come: each entry is matched against every cell so far
                raise SpecError(
                    f"{at}: {len(cells):,} cells with its 'include' entries, more than {MAX_CELLS:,}", "split the matrix"
                )
    if not cells:
        raise SpecError(f"{at}: has no cells left", "check 'exclude' against the axes")
    return cells


_MATRIX_REF = re.compile(r"\$\{matrix\.([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute_matrix(
    value: Any,
    cell: dict[str, Any],
    locate: Callable[[tuple], tuple[int, int]],
    source: str,
    path: tuple = (),
    *,
    budget: Budget | None = None,
) -> Any:
    """``value`` with ``${matrix.AXIS}`` replaced by the cell's values (a whole-scalar reference keeps the value's type).

    Every value made is spent from ``budget``, so references to a large axis value cannot multiply it without bound.
    """
    if budget is None:
        budget = Budget(f"{source}: the cell ({cell_label(cell)})")
    if isinstance(value, str):
        whole = _MATRIX_REF.fullmatch(value)
        if whole and whole.group(1) in cell:
            budget.spend_on(cell[whole.group(1)])
            return cell[whole.group(1)]  # keeps the value's type: a number, a list, a mapping

        def one(match: re.Match) -> str:
            name = match.group(1)
            if name not in cell:
                line, col = locate(path)
                raise SpecError(
                    f"{source}:{line}:{col} {dotted_path(path)}: ${{matrix.{name}}} is not an axis of this cell",
                    f"axes: {', '.join(cell)}",
                )
            return _short(cell[name])

        out = _MATRIX_REF.sub(one, value)
        budget.spend(1, len(out))
        return out
    budget.spend(1, 1)
    if isinstance(value, dict):
        budget.spend(len(value), sum(len(str(k)) for k in value))  # the keys, as the YAML reader counts them
        return {
            k: (v if k == "matrix" and not path else substitute_matrix(v, cell, locate, source, (*path, k), budget=budget))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [substitute_matrix(v, cell, locate, source, (*path, i), budget=budget) for i, v in enumerate(value)]
    return value
