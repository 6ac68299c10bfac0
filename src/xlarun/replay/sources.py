"""Read one dump file into what a replay needs: the module, and the snapshot's literals if any.

Accepted inputs (gzip-compressed too): HLO text (``.txt``, ``.hlo``), a binary ``HloProto``
(XLA's ``.hlo.pb``), a bare ``HloModuleProto``, and an ``HloSnapshot`` (``*.snapshot.*.pb``, the
module plus the argument literals and the result of one execution). Like ``run_hlo_module``, a
``.pb`` is tried as HloSnapshot, then HloProto, then HloModuleProto, by its structure.
Field numbers: HloSnapshot{hlo=1, arguments=2, result=3, execution_platform=4},
HloProto{hlo_module=1}, HloModuleProto{name=1, entry_computation_name=2, computations=3}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlarun.errors import InputError
from xlarun.hlo import gunzip, looks_like_hlo_text, looks_like_text
from xlarun.hlo.proto import classify_proto
from xlarun.hlo.protowire import as_bytes, as_str, fields_by_number, first
from xlarun.replay import literals

#: ``{...}``: a constant printed without its values (dumped without --xla_dump_large_constants).
ELIDED_CONSTANT = re.compile(r"constant\(\{\.\.\.\}\)")
ELIDED_WARNING = (
    "WARNING: {name} was dumped without --xla_dump_large_constants: its large constants are "
    "printed as {{...}} and XLA's parser fills them with GARBAGE, so this replay computes on "
    "made-up constants. Replay the .hlo.pb or a snapshot, or capture again with --xla_dump_large_constants."
)
_OPTIMIZED_NAME = re.compile(r"(^|[._])([\w.\-]*_)?after_optimizations([.\-]|$)")
_OPTIMIZED_HEADER = re.compile(r"^HloModule [^\n]*\bis_scheduled=true", re.MULTILINE)

TEXT, HLO_PROTO, MODULE_PROTO, SNAPSHOT = "text", "hlo_proto", "module_proto", "snapshot"
_MODULE_NAME, _MODULE_COMPUTATIONS, _MODULE_HOST_PROGRAM_SHAPE, _MODULE_SCHEDULE = 1, 3, 4, 7
_PROGRAM_SHAPE_PARAMETERS, _PROGRAM_SHAPE_RESULT = 1, 2
_COMPUTATION_INSTRUCTIONS, _INSTRUCTION_NAME, _INSTRUCTION_OPCODE, _INSTRUCTION_IS_HOST_TRANSFER = 2, 1, 2, 47
#: What follows the module's ``module_NNNN.<name>`` prefix in an optimized dump or a snapshot.
_OPTIMIZED_SUFFIX = re.compile(
    r"\.(?:snapshot\.-?\d+\.pb|execution_\d+\.hlo_snapshot\.pb"
    r"|(?:sm_\d+\.\d+_gpu_|(?:[A-Za-z0-9\-]+_)*)after_optimizations\.(?:txt|hlo\.pb|pbtxt))(?:\.gz)?$"
)


@dataclass
class ReplaySource:
    """One dump file read for replay."""

    path: Path
    file_format: str  # text | hlo_proto | module_proto | snapshot
    text: str | None = None  # the HLO text as read, for text inputs
    module_proto: bytes | None = None  # serialized HloModuleProto, for binary inputs
    arguments: list | None = None  # decoded argument literals (snapshots only)
    result: object = None  # decoded result literal (snapshots only)
    execution_platform: str | None = None
    module_name: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: The module proto carries a schedule: XLA wrote it after optimization (snapshots always do).
    scheduled: bool = False

    @property
    def has_elided_constants(self) -> bool:
        return self.text is not None and bool(ELIDED_CONSTANT.search(self.text))

    @property
    def optimized(self) -> bool:
        """Dumped after XLA's optimization passes (it cannot be recompiled as-is)."""
        if self.scheduled or _OPTIMIZED_NAME.search(self.path.name):
            return True
        return self.text is not None and bool(_OPTIMIZED_HEADER.search(self.text))

    @property
    def input_kind(self) -> str:
        """snapshot | proto | text-large-constants | text-elided-constants."""
        if self.file_format == SNAPSHOT:
            return "snapshot"
        if self.file_format in (HLO_PROTO, MODULE_PROTO):
            return "proto"
        return "text-elided-constants" if self.has_elided_constants else "text-large-constants"


def read_dump_bytes(path: Path, data: bytes | None = None) -> bytes:
    """The file's bytes, gunzipped when compressed (``--xla_dump_compress_protos``)."""
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    return gunzip(data, str(path))


def load_source(path: str | Path, data: bytes | None = None) -> ReplaySource:
    """Read a dump file (or its ``data``, for files read from the store) for replay."""
    path = Path(path)
    raw = read_dump_bytes(path, data)
    if looks_like_hlo_text(raw):
        text = raw.decode("utf-8", errors="replace")
        header = _MODULE_NAME_LINE.search(text)
        return ReplaySource(path, TEXT, text=text, module_name=header.group(1) if header else None)
    if looks_like_text(raw):
        raise InputError(
            f"{path.name} is text but not an HLO module",
            "replay takes HLO text (.txt), HloProto (.hlo.pb) or HloSnapshot (.snapshot.*.pb) dumps",
        )
    return _load_binary(path, raw)


_MODULE_NAME_LINE = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.MULTILINE)


def _load_binary(path: Path, raw: bytes) -> ReplaySource:
    try:
        kind, module, _fields = classify_proto(raw)  # the rule the index and render read protos by
    except InputError as exc:
        raise InputError(
            f"{path.name} is neither HLO text nor an HloSnapshot, HloProto or HloModuleProto ({exc.message})",
            "replay takes .txt, .hlo.pb or .snapshot.*.pb dumps",
        ) from None
    if kind == "snapshot":
        return _snapshot_source(path, fields_by_number(raw), module)
    return ReplaySource(
        path,
        HLO_PROTO if kind == "hlo_proto" else MODULE_PROTO,
        module_proto=module,
        module_name=_module_name(module),
        scheduled=_is_scheduled(module),
    )


def _module_name(module_proto: bytes) -> str | None:
    return as_str(first(fields_by_number(module_proto), _MODULE_NAME))


def _is_scheduled(module_proto: bytes) -> bool:
    return _MODULE_SCHEDULE in fields_by_number(module_proto)


def _program_shape(module_proto: bytes) -> dict:
    program_shape = first(fields_by_number(module_proto), _MODULE_HOST_PROGRAM_SHAPE)
    if not isinstance(program_shape, bytes):
        raise InputError("the module has no entry signature (host_program_shape)", "is it a complete HLO module?")
    return fields_by_number(program_shape)


def entry_parameter_shapes(module_proto: bytes) -> list[literals.Shape]:
    """Parameter shapes of the entry computation (HloModuleProto.host_program_shape.parameters)."""
    return [literals.decode_shape(raw) for raw in _program_shape(module_proto).get(_PROGRAM_SHAPE_PARAMETERS, [])]


def entry_result_shape(module_proto: bytes) -> literals.Shape | None:
    """The entry computation's result shape (host_program_shape.result), ``None`` when the proto has none."""
    raw = first(_program_shape(module_proto), _PROGRAM_SHAPE_RESULT)
    return literals.decode_shape(raw) if isinstance(raw, bytes) else None


def module_opcodes(module_proto: bytes) -> dict[str, str]:
    """Opcode -> the name of its first instruction, over every computation of the module.

    A host transfer (``send``/``recv`` with ``is_host_transfer``) is listed as ``host-send``/``host-recv``.
    """
    found: dict[str, str] = {}
    for computation in fields_by_number(module_proto).get(_MODULE_COMPUTATIONS, []):
        for raw in fields_by_number(as_bytes(computation)).get(_COMPUTATION_INSTRUCTIONS, []):
            instruction = fields_by_number(as_bytes(raw))
            opcode = as_str(first(instruction, _INSTRUCTION_OPCODE)) or "?"
            if opcode in ("send", "recv") and first(instruction, _INSTRUCTION_IS_HOST_TRANSFER):
                opcode = f"host-{opcode}"
            found.setdefault(opcode, as_str(first(instruction, _INSTRUCTION_NAME)) or "?")
    return found


def unoptimized_sibling(path: Path) -> Path | None:
    """The same module's ``before_optimizations`` dump next to an optimized dump or a snapshot.

    Prefers the proto (whole constants) to the text. ``None`` when there is none on disk.
    """
    match = _OPTIMIZED_SUFFIX.search(path.name)
    if not match:
        return None
    prefix = path.name[: match.start()]
    for suffix in (".before_optimizations.hlo.pb", ".before_optimizations.hlo.pb.gz", ".before_optimizations.txt"):
        candidate = path.with_name(prefix + suffix)
        if candidate.is_file():
            return candidate
    return None


def _snapshot_source(path: Path, top: dict, module: bytes) -> ReplaySource:
    arguments = [literals.decode_literal(raw) for raw in top.get(2, [])]
    result_raw = first(top, 3)
    result = literals.decode_literal(result_raw) if isinstance(result_raw, bytes) else None
    source = ReplaySource(
        path,
        SNAPSHOT,
        scheduled=_is_scheduled(module),
        module_proto=module,
        arguments=arguments,
        result=result,
        execution_platform=as_str(first(top, 4)),
        module_name=_module_name(module),
    )
    if result is not None and _result_missing(result, module):
        result = source.result = None
    if result is None:
        source.warnings.append(f"{path.name}: {NO_RESULT}")
    return source


#: Why a snapshot can hold arguments but no result: XLA reads the result back after the run, and a donated
#: argument's buffer is by then the output's (jaxlib 0.10+ writes an empty tuple; older XLA aborts the job just after writing the snapshot).
NO_RESULT = (
    "the snapshot recorded no result (XLA could not read the outputs back, as when arguments are donated: "
    "jax.jit(..., donate_argnums=...))"
)


def _result_missing(result: Any, module: bytes) -> bool:
    """An empty tuple where the module returns something: XLA wrote a placeholder, not the result."""
    if not isinstance(result, list) or result:  # a tuple literal decodes to a list
        return False
    try:
        expected = entry_result_shape(module)
    except InputError:
        return False
    return expected is not None and not (expected.is_tuple and not expected.tuple_shapes)
