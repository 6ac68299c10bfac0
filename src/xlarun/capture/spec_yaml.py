"""Reading a run spec from YAML: where each key and value stands (file:line:col in every
error), ${VAR} interpolation, matrix cells, and the models of capture/spec.py validated with those positions."""

from __future__ import annotations

import difflib
import errno
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from xlarun.capture.matrix import cell_label, dotted_path, expand_matrix, substitute_matrix
from xlarun.capture.spec import RunSpec
from xlarun.capture.spec_reader import MAX_MATRIX_CHARS, MAX_MATRIX_VALUES, MAX_SPEC_BYTES, Budget, read_spec_file, read_yaml
from xlarun.errors import SpecError


@dataclass
class LoadedSpec:
    """A validated spec with where it came from and its paths resolved on this host."""

    spec: RunSpec
    path: Path  # the spec file (absolute)
    text: str  # the file as written
    script: Path  # absolute
    workdir: Path  # absolute
    python: str  # interpreter for local runs
    matrix_values: dict[str, Any] | None = None  # the cell of a matrix spec this is

    @property
    def base_dir(self) -> Path:
        return self.path.parent


# --- YAML with positions -------------------------------------------------------------------------

Mark = tuple[int, int]  # 1-based line, column


def _positions(node: yaml.Node, path: tuple, keys: dict, values: dict) -> None:
    values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            key_path = (*path, key)
            keys[key_path] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _positions(value_node, key_path, keys, values)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _positions(item, (*path, i), keys, values)


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$\{[^}]*\}?")


class InterpolationError(ValueError):
    """A ``${...}`` that cannot be substituted: the message names the variable, never its value."""


def interpolate(text: str, environ: dict[str, str]) -> str:
    """Substitute ``${VAR}`` as a shell does, with ``${VAR:-default}`` / ``${VAR-default}`` (when unset or empty / unset)
    and ``${VAR:?message}`` / ``${VAR?message}`` (an error with that message); ``$$`` is a literal ``$``.

    Raises :class:`InterpolationError` for an unset variable without a default, a ``?`` form whose variable is
    missing, and any other ``${...}`` (a typo such as ``${VAR:+x}`` must not reach the job as written).
    """

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, word = match.group(1), match.group(2), match.group(3)
        if name is None:
            raise InterpolationError(
                f"{match.group(0)!r} is not a substitution xlarun knows: use ${{VAR}}, ${{VAR:-default}} or "
                "${VAR:?message}, and $$ for a literal $"
            )
        value = environ.get(name)
        if value is not None and (value != "" or operator is None or not operator.startswith(":")):
            return value
        if operator is None:
            raise InterpolationError(f"environment variable {name} is not set (write ${{{name}:-default}} to give a default)")
        if operator.endswith("-"):
            return word
        state = "is not set" if value is None else "is empty"
        raise InterpolationError(f"environment variable {name} {state}: {word or 'it is required'}")

    return _VAR.sub(substitute, text)


def _interpolate_tree(value: Any, path: tuple, environ: dict[str, str], problems: list[tuple[tuple, str]], budget: Budget) -> Any:
    if isinstance(value, str):
        try:
            out = interpolate(value, environ)
        except InterpolationError as exc:
            problems.append((path, str(exc)))
            return value
        budget.spend(chars=max(0, len(out) - len(value)))  # values from the environment count against the spec's size
        return out
    if isinstance(value, dict):
        return {k: _interpolate_tree(v, (*path, k), environ, problems, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate_tree(v, (*path, i), environ, problems, budget) for i, v in enumerate(value)]
    return value


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at ``path`` (for "did you mean")."""
    model: type[BaseModel] | None = RunSpec
    for part in path:
        if model is None or isinstance(part, int):
            return None
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return model


def _did_you_mean(path: tuple) -> str:
    owner = _model_at(path[:-1])
    if owner is None or not isinstance(path[-1], str):
        return ""
    close = difflib.get_close_matches(path[-1], list(owner.model_fields), n=1, cutoff=0.6)
    known = ", ".join(owner.model_fields)
    return f"; did you mean '{close[0]}'?" if close else f"; known keys: {known}"


def _locate(loc: tuple, keys: dict, values: dict, key_error: bool) -> Mark:
    table_order = (keys, values) if key_error else (values, keys)
    path = tuple(loc)
    while True:
        for table in table_order:
            if path in table:
                return table[path]
        if not path:
            return (1, 1)
        path = path[:-1]


def _clean_loc(loc: tuple) -> tuple:
    # pydantic puts union/validator tags such as 'literal[...]' or 'function-after[...]' into locations
    return tuple(p for p in loc if isinstance(p, int) or "[" not in p)


def _read_yaml(text: str, source: str) -> tuple[dict, dict, dict]:
    """The spec as Python data, and where each key and value sits in the file (read within spec_reader's limits)."""
    data, node = read_yaml(text, source)
    if node is None or data is None:
        raise SpecError(f"{source}:1:1 (top level): the spec is empty", "a spec needs at least 'name' and 'script'")
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}:1:1 (top level): a spec must be a mapping of keys, found {type(data).__name__}",
            "start with 'name: ...' and 'script: ...'",
        )
    keys: dict = {}
    values: dict = {}
    _positions(node, (), keys, values)
    return data, keys, values


def _validate(
    data: dict, keys: dict, values: dict, source: str, environ: dict[str, str], budget: Budget, context: str = ""
) -> RunSpec:
    problems: list[tuple[tuple, str]] = []
    data = _interpolate_tree(data, (), environ, problems, budget)
    located: list[tuple[Mark, str]] = []
    for path, message in problems:
        line, col = _locate(path, keys, values, key_error=False)
        located.append(((line, col), f"{source}:{line}:{col} {dotted_path(path)}{context}: {message}"))
    spec = None
    try:
        spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = _clean_loc(error["loc"])
            extra = error["type"] == "extra_forbidden"
            line, col = _locate(loc, keys, values, key_error=extra)
            if extra:
                message = f"unknown key{_did_you_mean(loc)}"
            elif error["type"] == "missing":
                message = "required key is missing"
            else:
                message = error["msg"].removeprefix("Value error, ")
            located.append(((line, col), f"{source}:{line}:{col} {dotted_path(loc)}{context}: {message}"))
    messages = [message for _mark, message in sorted(located, key=lambda item: item[0])]
    if messages:
        raise SpecError(messages[0], _more_hint(len(messages), source), problems=messages)
    assert spec is not None
    return spec


def parse_spec_text(text: str, source: str = "<spec>", environ: dict[str, str] | None = None) -> RunSpec:
    """Validate spec text; raise :class:`SpecError` listing every problem as ``source:line:col path: message``.

    A matrix spec is validated as its first cell (see :func:`parse_spec_cells` for all of them).
    """
    return parse_spec_cells(text, source, environ)[0][1]


def parse_spec_cells(
    text: str, source: str = "<spec>", environ: dict[str, str] | None = None
) -> list[tuple[dict[str, Any] | None, RunSpec]]:
    """Every cell of a spec: ``[(matrix values, spec)]``; a spec without a matrix is one cell with values None."""
    environ = dict(os.environ) if environ is None else environ
    data, keys, values = _read_yaml(text, source)
    matrix = data.get("matrix")
    if matrix is None:
        budget = Budget(f"{source}: the spec")
        budget.spend_on(data)
        return [(None, _validate(data, keys, values, source, environ, budget))]
    cells = expand_matrix(matrix, source, keys.get(("matrix",), (1, 1)))
    out: list[tuple[dict[str, Any] | None, RunSpec]] = []
    hint = "split the matrix into several specs, or make the values its cells repeat smaller"
    together = Budget(f"{source}: the matrix's {len(cells):,} cells together", MAX_MATRIX_VALUES, MAX_MATRIX_CHARS, hint=hint)

    def locate(path: tuple) -> Mark:
        return _locate(path, {}, values, key_error=False)

    for cell in cells:
        context = f" (matrix {cell_label(cell)})"
        budget = Budget(f"{source}: the cell{context}", parent=together, hint=hint)
        substituted = substitute_matrix(data, cell, locate, source, budget=budget)
        substituted["matrix"] = None
        out.append((cell, _validate(substituted, keys, values, source, environ, budget, context)))
    return out


def _more_hint(count: int, source: str) -> str:
    if count == 1:
        return "fix that key and run `xlarun validate` again"
    return f"and {count - 1} more problem(s): `xlarun validate {source}` lists them all"


def load_spec(path: str | Path, environ: dict[str, str] | None = None) -> LoadedSpec:
    """Read, validate and resolve the spec at ``path`` (paths in it are relative to its folder).

    A matrix spec is refused here: run its cells with :func:`xlarun.batch.run_batch` (`xlarun batch`).
    """
    cells = load_batch(path, environ)
    if len(cells) > 1 or cells[0].matrix_values is not None:
        raise SpecError(f"{path}: this spec has a matrix of {len(cells)} cell(s)", f"run it with `xlarun batch {path}`")
    return cells[0]


def load_batch(path: str | Path, environ: dict[str, str] | None = None) -> list[LoadedSpec]:
    """Every cell of the spec at ``path``, resolved (one cell for a spec without a matrix)."""
    spec_path = Path(path).expanduser()
    text = read_spec_file(spec_path)
    cells = parse_spec_cells(text, source=str(spec_path), environ=environ)
    out = []
    for values, spec in cells:
        loaded = resolve_spec(spec, spec_path, text)
        loaded.matrix_values = values
        out.append(loaded)
    return out


def resolve_spec(spec: RunSpec, spec_path: Path, text: str = "") -> LoadedSpec:
    """Resolve a validated spec's paths against its file's folder and check the script is a file and the workdir a folder."""
    spec_path = spec_path.resolve()
    base = spec_path.parent
    script = _resolve_path(base, spec.script, spec_path, "script")
    workdir = _resolve_path(base, spec.workdir, spec_path, "workdir") if spec.workdir else base
    script_mode = _mode(script, spec_path, "script")
    if script_mode is None or not stat.S_ISREG(script_mode):
        why = "not found" if script_mode is None else "is not a regular file"
        raise SpecError(
            f"{spec_path}: script: {spec.script} {why} (looked for {script})",
            "the script path is relative to the spec file's folder",
        )
    workdir_mode = _mode(workdir, spec_path, "workdir")
    if workdir_mode is None or not stat.S_ISDIR(workdir_mode):
        raise SpecError(f"{spec_path}: workdir: {workdir} is not a folder", "the workdir is relative to the spec file's folder")
    return LoadedSpec(spec=spec, path=spec_path, text=text, script=script, workdir=workdir, python=spec.python or sys.executable)


def _mode(path: Path, spec_path: Path, key: str) -> int | None:
    """The mode of what ``path`` names, or None when nothing is there; any other failure is the spec's error."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a name too long, a folder without permission
        raise SpecError(f"{spec_path}: {key}: cannot look at {path}: {exc.strerror}", "check the path") from None


def _resolve_path(base: Path, written: str, spec_path: Path, key: str) -> Path:
    try:
        return (base / written).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a loop of symbolic links (Python 3.11, 3.12)
        reason = "a loop of symbolic links" if isinstance(exc, RuntimeError) or getattr(exc, "errno", 0) == errno.ELOOP else exc
        raise SpecError(
            f"{spec_path}: {key}: {written} cannot be followed: {reason}", "point it at a real file or folder"
        ) from None


def spec_json_schema() -> dict:
    """The JSON Schema of run specs (for editors: yaml-language-server, VS Code)."""
    schema = RunSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "xlarun run spec"
    return schema


_FRAMEWORK_IMPORTS = (
    ("torch_xla", re.compile(r"^\s*(import|from)\s+torch_xla\b", re.M)),
    ("jax", re.compile(r"^\s*(import|from)\s+(jax|flax|optax)\b", re.M)),
    ("tensorflow", re.compile(r"^\s*(import|from)\s+(tensorflow|keras)\b", re.M)),
)


def detect_framework(script: Path) -> str | None:
    """The framework a script imports (torch_xla, then jax, then tensorflow), or None."""
    try:
        with script.open("rb") as file:
            source = file.read(MAX_SPEC_BYTES).decode("utf-8", errors="replace")  # imports are at the top
    except OSError:
        return None
    for name, pattern in _FRAMEWORK_IMPORTS:
        if pattern.search(source):
            return name
    return None
