"""Reading a run spec from YAML: where each key and value stands (file:line:col in every
error), ${VAR} interpolation, matrix cells, and the models of capture/spec.py validated with those positions."""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from xlarun.capture.matrix import cell_label, dotted_path, expand_matrix, substitute_matrix
from xlarun.capture.spec import RunSpec
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


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(text: str, environ: dict[str, str]) -> str:
    """Substitute ``${VAR}`` and ``${VAR:-default}``; ``$$`` is a literal ``$``. Raises KeyError(VAR) when unset."""

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise KeyError(name)
            return default
        return value

    return _VAR.sub(substitute, text)


def _interpolate_tree(value: Any, path: tuple, environ: dict[str, str], problems: list[tuple[tuple, str]]) -> Any:
    if isinstance(value, str):
        try:
            return interpolate(value, environ)
        except KeyError as missing:
            problems.append(
                (
                    path,
                    f"environment variable {missing.args[0]} is not set (write ${{{missing.args[0]}:-default}} to give a default)",
                )
            )
            return value
    if isinstance(value, dict):
        return {k: _interpolate_tree(v, (*path, k), environ, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate_tree(v, (*path, i), environ, problems) for i, v in enumerate(value)]
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
    """The spec as Python data, and where each key and value sits in the file."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise SpecError(f"{where} YAML syntax error: {exc.problem or exc}", "fix the YAML syntax at that position") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: not valid YAML: {exc}", "fix the YAML syntax") from None
    except RecursionError:
        raise SpecError(f"{source}: nested too deeply to read", "a spec is a flat mapping of a few levels") from None
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


def _validate(data: dict, keys: dict, values: dict, source: str, environ: dict[str, str], context: str = "") -> RunSpec:
    problems: list[tuple[tuple, str]] = []
    data = _interpolate_tree(data, (), environ, problems)
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
        return [(None, _validate(data, keys, values, source, environ))]
    cells = expand_matrix(matrix, source, keys.get(("matrix",), (1, 1)))
    out: list[tuple[dict[str, Any] | None, RunSpec]] = []
    for cell in cells:
        substituted = substitute_matrix(data, cell, lambda path: _locate(path, {}, values, key_error=False), source)
        substituted["matrix"] = None
        context = f" (matrix {cell_label(cell)})"
        out.append((cell, _validate(substituted, keys, values, source, environ, context)))
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


def _read_spec_file(spec_path: Path) -> str:
    try:
        return spec_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{spec_path}: no such spec file", "check the path; `ls configs/` shows the bundled examples") from None
    except IsADirectoryError:
        raise SpecError(f"{spec_path}: is a folder, not a spec file", "give the path of a .yaml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"{spec_path}: cannot read the spec: {exc}", "check the file's permissions and encoding (UTF-8)"
        ) from None


def load_batch(path: str | Path, environ: dict[str, str] | None = None) -> list[LoadedSpec]:
    """Every cell of the spec at ``path``, resolved (one cell for a spec without a matrix)."""
    spec_path = Path(path).expanduser()
    text = _read_spec_file(spec_path)
    cells = parse_spec_cells(text, source=str(spec_path), environ=environ)
    out = []
    for values, spec in cells:
        loaded = resolve_spec(spec, spec_path, text)
        loaded.matrix_values = values
        out.append(loaded)
    return out


def resolve_spec(spec: RunSpec, spec_path: Path, text: str = "") -> LoadedSpec:
    """Resolve a validated spec's paths against its file's folder and check the script exists."""
    spec_path = spec_path.resolve()
    base = spec_path.parent
    script = (base / spec.script).resolve()
    workdir = (base / spec.workdir).resolve() if spec.workdir else base
    if not script.is_file():
        raise SpecError(
            f"{spec_path}: script: {spec.script} not found (looked for {script})",
            "the script path is relative to the spec file's folder",
        )
    if not workdir.is_dir():
        raise SpecError(f"{spec_path}: workdir: {workdir} is not a folder", "the workdir is relative to the spec file's folder")
    return LoadedSpec(spec=spec, path=spec_path, text=text, script=script, workdir=workdir, python=spec.python or sys.executable)


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
        source = script.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for name, pattern in _FRAMEWORK_IMPORTS:
        if pattern.search(source):
            return name
    return None
