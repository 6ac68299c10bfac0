"""Run specs: the YAML file that says what to run, where, and what to dump.

``load_spec(path)`` reads a spec, substitutes ``${VAR}`` / ``${VAR:-default}`` from the
environment, validates it with pydantic, and resolves its paths. Every problem is reported as
``file:line:col key.path: message``; unknown keys get a "did you mean".
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from xlarun.capture.backends.docker_options import DockerOptions

Framework = Literal["auto", "jax", "tensorflow", "torch_xla"]
DumpFormat = Literal["text", "proto", "dot", "html", "url"]
BackendKind = Literal["local", "docker", "docker-cpu", "docker-gpu", "docker-ipu"]


def _nul_free(value: Any, where: str = "") -> Any:
    """``value`` unchanged, or ValueError naming where a NUL byte sits (never the value: it may be a secret)."""
    if isinstance(value, str):
        if "\0" in value:
            raise ValueError(
                f"{where + ' ' if where else ''}contains a NUL byte (\\0), which no command line, environment or file name can hold"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _nul_free(key, f"the key {str(key).replace(chr(0), '<NUL>')!r}")
            _nul_free(item, f"{where}.{key}".lstrip(".") if where else f"'{key}'")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _nul_free(item, f"{where}[{i}]" if where else f"item {i}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    _no_nul = field_validator("*")(classmethod(lambda cls, v: _nul_free(v)))


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


class ProfileSpec(_Strict):
    """A profile of the job (JAX's or TensorFlow's profiler), archived and indexed with the dump: ``profile: true`` traces the
    whole script; ``profile: {duration: 30s}`` stops the trace that long after it started."""

    enabled: bool = Field(False, description="Record a profile of the job (JAX or TensorFlow; the script is not changed).")
    duration: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Stop the trace this long after it started ('30s'); default: at exit."
    )
    python_tracer: bool = Field(False, description="Also trace every Python call (many events: slows the job down).")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, bool):  # profile: true
            return {"enabled": value}
        if isinstance(value, dict) and value and "enabled" not in value:  # profile: {duration: 10s} means on
            return {**value, "enabled": True}
        return value

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, bool):  # a bool is an int to Python: true would be 1 s
            raise ValueError(f"{str(value).lower()} is not a duration: use seconds or a number with ms, s, m or h")
        return parse_duration(value) if isinstance(value, str) else value


class BackendSpec(DockerOptions):
    """Where the job runs. ``local`` runs a subprocess; the docker kinds run a container, configured by
    the container options beside ``kind`` (image, user, gpus, shm_size, ipu_device_id, mem_limit, ...)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    _no_nul = field_validator("*")(classmethod(lambda cls, v: _nul_free(v)))

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
    timeout: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Seconds (or '90s', '10m', '2h') before the job is killed."
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Free labels recorded with the run.")
    remote: str | None = Field(
        None,
        min_length=1,
        description="A remote named by `xlarun remote add` (or an s3:// URL): each run is pushed there once it is "
        "committed; a failed push keeps the run here (exit 3, `xlarun push RUN --remote NAME` sends it).",
    )
    dump: DumpSpec = Field(default_factory=DumpSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    tensorflow: TensorFlowSpec = Field(default_factory=TensorFlowSpec)
    jax: JaxSpec = Field(default_factory=JaxSpec)
    torch_xla: TorchXlaSpec = Field(default_factory=TorchXlaSpec)
    poplar: PoplarSpec = Field(default_factory=PoplarSpec)
    profile: ProfileSpec = Field(
        default_factory=ProfileSpec,
        description="true, or {duration: 30s, python_tracer: false}: also record a JAX profile of the job "
        "(op times per module, `xlarun profile`); off by default.",
    )
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

    processes: int = Field(
        1,
        ge=1,
        le=64,
        description="Launch the script as this many processes of one job on this machine (jax.distributed on loopback); "
        "each gets XLARUN_PROCESS_ID, XLARUN_NUM_PROCESSES and XLARUN_COORDINATOR, and dumps into dump/process-K/. Local backend only.",
    )

    @model_validator(mode="after")
    def _processes_run_here(self) -> RunSpec:
        if self.processes > 1 and self.backend.kind != "local":
            raise ValueError(
                f"processes: {self.processes} needs backend: local (the processes of one job are launched on this machine; "
                f"a {self.backend.kind} container runs one process)"
            )
        if self.processes > 1 and self.executor == "ray":
            raise ValueError(f"processes: {self.processes} with executor: ray is not supported: use executor: local")
        return self

    @field_validator("name")
    @classmethod
    def _name_is_simple(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}", value):
            raise ValueError("use letters, digits, '_', '-' and '.', starting with a letter or digit (at most 100)")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, bool):  # YAML's true is a bool, and a bool is an int to Python: 1 s
            raise ValueError(f"{str(value).lower()} is not a duration: use seconds or a number with ms, s, m or h")
        if isinstance(value, int) and value.bit_length() > 64:
            raise ValueError(f"a number of {len(str(value)):,} digits is not a duration a job can wait")
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
        # numbers and booleans become the words a shell would pass (1 -> '1', true -> 'true'); nothing else is an argument
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is None or isinstance(item, (dict, list)):
                    kind = "null" if item is None else "a mapping" if isinstance(item, dict) else "a list"
                    raise ValueError(f"item {i} is {kind}: an argument is a string or a number (quote it: '...')")
            return [v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v) for v in value]
        return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """'90' -> 90.0, '90s' -> 90.0, '10m' -> 600.0, '2h' -> 7200.0, '500ms' -> 0.5."""
    shown = repr(text) if len(text) <= 40 else repr(text[:20] + "...")
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{shown} is not a duration: use seconds or a number with ms, s, m or h")
    number, unit = float(match.group(1)), match.group(2) or "s"
    seconds = number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    if not math.isfinite(seconds):
        raise ValueError(f"{shown} ({len(text):,} characters) is too long a duration for a job to wait")
    return seconds
