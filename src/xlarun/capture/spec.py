"""Run specs: the YAML file that says what to run, where, and what to dump.

``load_spec(path)`` reads a spec, substitutes ``${VAR}`` / ``${VAR:-default}`` from the
environment, validates it with pydantic, and resolves its paths. Every problem is reported as
``file:line:col key.path: message``; unknown keys get a "did you mean".
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from xlarun.capture.backends.docker_options import DockerOptions
from xlarun.capture.matrix import cell_label, dotted_path, expand_matrix, substitute_matrix
from xlarun.errors import SpecError

Framework = Literal["auto", "jax", "tensorflow", "torch_xla"]
DumpFormat = Literal["text", "proto", "dot", "html", "url"]
BackendKind = Literal["local", "docker", "docker-cpu", "docker-gpu", "docker-ipu"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def _check_regex(value: str | None) -> str | None:
    if value is None:
        return value
    try:
        re.compile(value)
    except re.error as exc:
        hint = ""
        if value.startswith("*") or value.endswith("*"):
            hint = f"; a glob is not a regex: did you mean '{_glob_to_regex(value)}'?"
        raise ValueError(f"invalid regular expression {value!r}: {exc}{hint}") from None
    return value


def _glob_to_regex(glob: str) -> str:
    return re.sub(r"(?<!\.)\*", ".*", glob)


class DumpSpec(_Strict):
    """What XLA and the frameworks should dump (XLA_FLAGS and friends)."""

    formats: list[DumpFormat] = Field(
        default_factory=lambda: list[DumpFormat](["text"]),
        description="HLO formats: text (.txt), proto (.hlo.pb), dot, html, url (url needs a renderer open-source XLA lacks).",
    )
    compress_protos: bool = Field(False, description="--xla_dump_compress_protos: write .hlo.pb.gz.")
    snapshots: bool = Field(
        False, description="--xla_dump_hlo_snapshots: module + arguments + result per execution (best replay input)."
    )
    pass_re: str | None = Field(
        None, description="--xla_dump_hlo_pass_re: dump before/after every pass matching this regex ('.*' = all; many files)."
    )
    module_re: str | None = Field(None, description="--xla_dump_hlo_module_re: only modules whose name matches.")
    pipeline_re: str | None = Field(None, description="--xla_dump_hlo_pipeline_re: only pipelines whose name matches.")
    large_constants: bool = Field(
        True,
        description="--xla_dump_large_constants. On by default: without it text dumps print big constants as {...} and replays compute on garbage.",
    )
    timestamps: bool = Field(False, description="--xla_dump_include_timestamp: prefix file names with a microsecond timestamp.")
    max_modules: int | None = Field(None, ge=1, description="--xla_dump_max_hlo_modules: stop dumping after N modules.")
    module_metadata: bool = Field(False, description="--xla_dump_module_metadata.")
    disable_metadata: bool = Field(False, description="--xla_dump_disable_metadata: drop op_name/source metadata from dumps.")
    extra_xla_flags: list[str] = Field(
        default_factory=list, description="Raw XLA flags added as they are, e.g. ['--xla_cpu_use_thunk_runtime=false']."
    )
    tf_graphs: bool = Field(False, description="TensorFlow GraphDef dumps (TF_DUMP_GRAPH_PREFIX) into the run folder.")
    jax_ir: list[Literal["jaxpr", "stablehlo"]] = Field(
        default_factory=list, description="JAX_DUMP_IR_TO / JAX_DUMP_IR_MODES into the run folder."
    )
    torch_xla: Literal["off", "text", "hlo", "dot", "stablehlo"] = Field(
        "off", description="PyTorch/XLA XLA_SAVE_TENSORS_FILE in this format."
    )
    torch_xla_post_optimizations: bool = Field(False, description="XLA_DUMP_POST_OPTIMIZATIONS=1 for PyTorch/XLA.")
    poplar_reports: bool = Field(False, description="Graphcore POPLAR_ENGINE_OPTIONS autoReport.all into the run folder.")

    _re = field_validator("pass_re", "module_re", "pipeline_re")(classmethod(lambda cls, v: _check_regex(v)))

    @field_validator("extra_xla_flags")
    @classmethod
    def _flags_look_like_flags(cls, flags: list[str]) -> list[str]:
        for flag in flags:
            if not flag.startswith("--xla_"):
                raise ValueError(f"{flag!r} is not an XLA flag: XLA flags start with '--xla_'")
            if flag.startswith("--xla_dump_to"):
                raise ValueError("--xla_dump_to is set by xlarun (the dump goes into the run's folder); remove it")
        return flags


class LoggingSpec(_Strict):
    """Framework and XLA logging (TF_CPP_* and Poplar variables)."""

    min_log_level: int | None = Field(None, ge=0, le=3, description="TF_CPP_MIN_LOG_LEVEL (0 all, 3 errors only).")
    vlog_level: int | None = Field(
        None,
        ge=0,
        description="Verbose logging: sets both TF_CPP_MIN_VLOG_LEVEL (older TF) and TF_CPP_MAX_VLOG_LEVEL (newer XLA/TSL).",
    )
    vmodule: dict[str, int] = Field(
        default_factory=dict,
        description="Per source file vlog level, e.g. {xla_compiler: 2, poplar_compiler: 1} -> TF_CPP_VMODULE.",
    )
    poplar_vlog_level: int | None = Field(None, ge=0, description="TF_POPLAR_VLOG_LEVEL: Poplar backend logging only.")

    @field_validator("vmodule")
    @classmethod
    def _vmodule_names(cls, value: dict[str, int]) -> dict[str, int]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_*?.\-]+", name):
                raise ValueError(f"vmodule key {name!r} must be a source file name such as 'xla_compiler' (no '=' or ',')")
        return value


class TensorFlowSpec(_Strict):
    """TF_XLA_FLAGS. xlarun only passes flags TF 2.21 knows: an unknown one aborts TensorFlow."""

    auto_jit: Literal[-1, 0, 1, 2] | None = Field(None, description="--tf_xla_auto_jit (2 = cluster everything possible).")
    cpu_global_jit: bool = Field(False, description="--tf_xla_cpu_global_jit: let auto-jit cluster on CPU too.")
    clustering_debug: bool = Field(
        False, description="--tf_xla_clustering_debug: dump clustering GraphDefs (needs dump.tf_graphs)."
    )
    min_cluster_size: int | None = Field(None, ge=1, description="--tf_xla_min_cluster_size.")
    extra_flags: list[str] = Field(
        default_factory=list, description="Raw TF_XLA_FLAGS entries, e.g. ['--tf_xla_max_cluster_size=50']."
    )

    @field_validator("extra_flags")
    @classmethod
    def _no_graph_prefix(cls, flags: list[str]) -> list[str]:
        for flag in flags:
            if flag.startswith("--tf_dump_graph_prefix"):
                raise ValueError("--tf_dump_graph_prefix in TF_XLA_FLAGS aborts TensorFlow 2.21; use dump.tf_graphs: true")
            if not flag.startswith("--tf_"):
                raise ValueError(
                    f"{flag!r} is not a TF_XLA_FLAGS flag (they start with '--tf_'); XLA flags go in dump.extra_xla_flags"
                )
        return flags


class JaxSpec(_Strict):
    """JAX settings for the capture."""

    disable_compilation_cache: bool = Field(
        True, description="Turn JAX's persistent compilation cache off: a cache hit compiles nothing and dumps nothing."
    )
    detailed_logging_min_ops: int | None = Field(
        None, ge=0, description="JAX_COMPILER_DETAILED_LOGGING_MIN_OPS (0 = log every compile)."
    )


class TorchXlaSpec(_Strict):
    """PyTorch/XLA debugging variables."""

    ir_debug: bool = Field(False, description="XLA_IR_DEBUG=1: Python frames in IR metadata.")
    hlo_debug: bool = Field(False, description="XLA_HLO_DEBUG=1: propagate that metadata into HLO.")
    debug_level: int | None = Field(None, ge=0, le=2, description="PT_XLA_DEBUG_LEVEL.")


class PoplarSpec(_Strict):
    """Graphcore IPU settings."""

    flags: list[str] = Field(
        default_factory=list, description="TF_POPLAR_FLAGS entries, e.g. ['--use_ipu_model', '--executable_cache_path=/tmp/c']."
    )
    engine_options: dict[str, str] = Field(
        default_factory=dict, description="Extra POPLAR_ENGINE_OPTIONS entries (autoReport.* is set by dump.poplar_reports)."
    )


class BackendSpec(DockerOptions):
    """Where the job runs. ``local`` runs a subprocess; the docker kinds run a container, configured by
    the container options beside ``kind`` (image, user, gpus, shm_size, ipu_device_id, mem_limit, ...)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    kind: BackendKind = Field(
        "local", description="local (a subprocess), docker-cpu, docker-gpu, docker-ipu, or docker (every option explicit)."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"kind": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _container_options_need_a_container(self) -> BackendSpec:
        if self.kind == "local":
            given = sorted(self.model_fields_set - {"kind"})
            if given:
                raise ValueError(
                    f"{', '.join(given)}: container options need a docker kind (kind: docker-cpu, docker-gpu, docker-ipu or docker)"
                )
        return self


class RunSpec(_Strict):
    """A run spec as written (after ${VAR} substitution), with defaults filled in."""

    name: str = Field(..., description="A short name for the run; runs are listed and found by it.")
    description: str | None = None
    script: str = Field(..., description="The Python script to run, relative to the spec file.")
    args: list[str] = Field(default_factory=list, description="Arguments passed to the script.")
    python: str | None = Field(
        None, description="Interpreter to run the script with (default: the Python running xlarun; in a container: python3)."
    )
    workdir: str | None = Field(
        None, description="Working directory of the job, relative to the spec file (default: the spec file's folder)."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the job.")
    framework: Framework = Field("auto", description="jax, tensorflow, torch_xla, or auto (read from the script's imports).")
    backend: BackendSpec = Field(default_factory=BackendSpec)
    timeout: float | None = Field(None, gt=0, description="Seconds (or '90s', '10m', '2h') before the job is killed.")
    tags: dict[str, str] = Field(default_factory=dict, description="Free labels recorded with the run.")
    dump: DumpSpec = Field(default_factory=DumpSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    tensorflow: TensorFlowSpec = Field(default_factory=TensorFlowSpec)
    jax: JaxSpec = Field(default_factory=JaxSpec)
    torch_xla: TorchXlaSpec = Field(default_factory=TorchXlaSpec)
    poplar: PoplarSpec = Field(default_factory=PoplarSpec)
    matrix: dict[str, Any] | None = Field(
        None,
        description="Run the spec once per cell: axes of values (product), plus 'include' and 'exclude' lists as in GitHub Actions. "
        "Write ${matrix.AXIS} anywhere in the spec to use a cell's value, e.g. backend: ${matrix.backend}.",
    )
    fail_fast: bool = Field(
        False, description="In a batch, stop starting new cells (and stop running ones) after the first failure."
    )
    executor: Literal["local", "ray"] = Field(
        "local",
        description="Where a batch's cells run: local (threads of this process) or ray (tasks on a Ray cluster; `xlarun batch --address`).",
    )

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}", value):
            raise ValueError("use letters, digits, '_', '-' and '.', starting with a letter or digit (at most 100)")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                    raise ValueError(
                        f"{key!r} is not an environment variable name (letters, digits and '_', not starting with a digit)"
                    )
                if isinstance(item, (dict, list)):
                    raise ValueError(f"{key}: a variable's value is a string, number or boolean, not a {type(item).__name__}")
            return {
                k: v if isinstance(v, str) else ("" if v is None else str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in value.items()
            }
        return value

    @field_validator("args", mode="before")
    @classmethod
    def _args_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(v) for v in value]
        return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """'90' -> 90.0, '90s' -> 90.0, '10m' -> 600.0, '2h' -> 7200.0, '500ms' -> 0.5."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration: use seconds or a number with ms, s, m or h")
    number, unit = float(match.group(1)), match.group(2) or "s"
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


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
