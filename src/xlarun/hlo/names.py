"""Decode the names of the files in a dump: which module, which stage, what the bytes are.

XLA names its files ``[<timestamp>.]module_<id4>[.<module name>][.cl_<n>].<suffix>``. Module names
contain dots (``pmap__unnamed_wrapped_function_.186875``, TF's ``..._executor_type_..._.2``), so a name
is read from the right: the suffix scheme is recognised first, and the module name is whatever lies
between ``module_XXXX.`` and that suffix. The other tools' files are told apart by the folder the
archive keeps them in: ``tf_graphs/``, ``jax_ir/``, ``torch_xla/``, ``poplar/``; a folder holding
``module.mlir`` is a PJRT compile input.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from typing import Any

from xlarun.hlo.patterns import LazyPattern
from xlarun.hlo.process_dirs import process_of_dir, run_module_id

KINDS = (
    "hlo", "pass", "buffer-assignment", "buffer-assignment-values", "live-range",
    "memory-usage-report", "debug-options", "snapshot", "codegen", "gpu-artifact", "autotune",
    "target-config", "thunk-sequence", "tf-graph", "jax-ir", "pjrt-compile-input", "torch-xla",
    "poplar-report", "unknown",
)  # fmt: skip


@dataclass(frozen=True)
class DumpName:
    """What one dump file's name says. Fields the name does not carry are None."""

    path: str  # as given, relative to the dump root
    kind: str = "unknown"  # one of KINDS
    format: str | None = None  # what the bytes are: 'text' (HLO text), 'proto' (HloProto), 'll', ...
    timestamp_us: int | None = None
    module_id: int | None = None
    module_name: str | None = None
    stage: str | None = None  # 'before_optimizations' | 'after_optimizations' | 'pass'
    backend: str | None = None  # 'cpu' | 'gpu' | 'tpu' | 'ipu'
    target: str | None = None  # 'sm_8.0', 'gfx90a'; 'xla:<n>' for PyTorch/XLA's device ordinal
    step: int | None = None  # per-module dump step; JAX's dump counter; TF's _<n> uniquifier
    pipeline: str | None = None  # the pipeline (or pass, or codegen step) XLA wrote in the name
    after_pass: str | None = None
    before_pass: str | None = None
    compilation: str | None = None  # 'cl_813921542' (internal builds such as libtpu)
    execution: int | None = None  # execution_<n>, counted from 0 per module
    snapshot_id: int | None = None  # PJRT snapshot number, may be negative
    pid: int | None = None  # pid_<n>: the process PyTorch/XLA on Neuron names in its snapshots
    artifact: str | None = None  # kernel, fusion, graph, function, folder: what the file is about
    process: int | None = None  # the job's process whose dump folder (process-K/) holds it; module_id is the run's

    def describe(self) -> list[tuple[str, str]]:
        """Ordered (label, words) pairs that explain every field the name carries."""
        from xlarun.hlo.name_words import describe  # words for humans: only `explain` and `show` need them

        return describe(self)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict."""
        return asdict(self)


# Every name of a file holding an HloSnapshot (a module as it ran, with its arguments), gzipped or not: PJRT's
# '<...>.snapshot.<n>.pb', XLA's '<...>.execution_<n>.hlo_snapshot.pb' (TF's has no module id), xlarun extract's
# '<stem>.snapshot.pb' and a bare 'hlo_snapshot.pb'
_SNAPSHOT_FILE = LazyPattern(r"(?:^|[._-])(?:snapshot(?:\.-?\d+)?\.pb|hlo_snapshot\.pb)(?:\.gz)?$")
# an HloUnoptimizedSnapshot: another proto (the module before optimizations, arguments per partition)
_UNOPTIMIZED_SNAPSHOT_FILE = LazyPattern(r"(?:^|[._-])hlo_unoptimized_snapshot\.(?:pb|txt)(?:\.gz)?$")


def snapshot_file(name: str) -> str | None:
    """What a file's name says it holds: 'snapshot' (an HloSnapshot), 'unoptimized' (an HloUnoptimizedSnapshot),
    or None. The one test of a snapshot's name: the index, choose, the runners' command lines and the worker use it."""
    base = name.rsplit("/", 1)[-1]
    if _UNOPTIMIZED_SNAPSHOT_FILE.search(base):
        return "unoptimized"
    return "snapshot" if _SNAPSHOT_FILE.search(base) else None


@functools.lru_cache(maxsize=1 << 16)  # archive and index decode the same names; DumpName is immutable
def decode_dump_name(path: str) -> DumpName:
    """Decode a path relative to the dump root. Never raises; undecodable names get kind 'unknown'."""
    path = path if isinstance(path, str) else str(path)
    try:
        return DumpName(path=path, **_decode(path))
    except Exception:  # the promise is "never raises": a malformed name must not stop an ingest
        return DumpName(path=path)


# ---- XLA dump names ---------------------------------------------------------------------------

# module_<id> at the start of a dot-separated segment: the anchor of every name XLA's FilenameFor makes
_MODULE = LazyPattern(r"(?:^|\.)module_(?P<id>-?\d+)(?:\.|$)")
# .cl_<n> after the module name: the changelist Google-internal builds (libtpu) append
_CHANGELIST = LazyPattern(r"(?:^|\.)(?P<cl>cl_\d+)$")
# whole-module formats, one file per --xla_dump_hlo_as_* flag
_HLO_EXT = r"(?P<ext>txt|hlo\.pb\.gz|hlo\.pb|dot|top_level\.html|html|url)"
_HLO_FORMAT = {"txt": "text", "hlo.pb": "proto", "hlo.pb.gz": "proto.gz", "dot": "dot",
               "html": "html", "top_level.html": "html", "url": "url"}  # fmt: skip

# <stage>[-<report>].<ext>: the whole module before/after optimizations and the reports on the latter;
# libtpu adds after_optimizations_{before,after}_buffer_assignment (stages, never part of the module name)
_STAGE = LazyPattern(
    r"(?:^|\.)(?P<stage>before_optimizations|after_optimizations_(?:before|after)_buffer_assignment|after_optimizations"
    r"|(?:(?P<target>sm_\d+\.\d+[a-z]*|[A-Za-z0-9]+)_)?(?P<backend>cpu|gpu)_after_optimizations)"
    r"(?:-(?P<report>buffer-assignment-values|buffer-assignment|live-range|memory-usage-report))?"
    r"\.(?P<ext>txt|hlo\.pb\.gz|hlo\.pb|pb\.gz|pb|dot|top_level\.html|html|url|fdo_profile)$"
)
# <step>.<pipeline>.after_<pass>.before_<next>.<ext>: between two passes (Graphcore's IPU dumps too)
_BETWEEN_PASSES = LazyPattern(
    r"(?:^|\.)(?P<step>\d{4,})\.(?P<pipeline>[^.]+)\.after_(?P<after>[^.]+)\.before_(?P<before>[^.]+)\." + _HLO_EXT + "$"
)
# <step>.<pass>.<step name>.<ext>: a pass dumping its own intermediate state (copy-insertion does)
_DURING_PASS = LazyPattern(r"(?:^|\.)(?P<step>\d{4,})\.(?P<pipeline>[^.]+)\.(?P<during>[^.]+)\." + _HLO_EXT + "$")
# debug_options, config.pbtxt, metadata.textproto: what the module was compiled with; libtpu also writes
# the options, flags, config, target arguments and compilation environment it compiled with (xla#7193)
_OPTIONS = LazyPattern(
    r"(?:^|\.)(?P<what>debug_options|config\.pbtxt|metadata\.textproto|execution_options\.txt|flagfile"
    r"|hlo_module_config\.txt|target_arguments\.txt|tpu_comp_env\.txt)$"
)
# file -> (format, backend): the formats of the files _OPTIONS names; libtpu's are text protos or plain text
_OPTIONS_FILES = {"debug_options": ("pbtxt", None), "config.pbtxt": ("pbtxt", None),
                  "metadata.textproto": ("pbtxt", None), "execution_options.txt": ("pbtxt", None),
                  "flagfile": ("flags", None), "hlo_module_config.txt": ("txt", None),
                  "target_arguments.txt": ("txt", None), "tpu_comp_env.txt": ("pbtxt", "tpu")}  # fmt: skip
# snapshot.<n>.pb: the HloSnapshot PJRT's CPU client writes per execution
_PJRT_SNAPSHOT = LazyPattern(r"(?:^|\.)snapshot\.(?P<snapshot>-?\d+)\.(?P<ext>pb(?:\.gz)?)$")
# execution_<n>[.hlo_snapshot|.hlo_unoptimized_snapshot].<pb|txt>: XLA's per-execution protos
_EXECUTION = LazyPattern(
    r"(?:^|\.)execution_(?P<execution>\d+)(?:\.(?P<what>hlo_snapshot|hlo_unoptimized_snapshot))?\.(?P<ext>pb|txt|pb\.gz)$"
)
# module_<name>[.pid_<n>].execution_<n>.hlo_snapshot.pb: the snapshot overload that has no module id
# (TensorFlow's); PyTorch/XLA on Neuron puts its process id before the execution
_NAMED_SNAPSHOT = LazyPattern(
    r"^module_(?P<name>.+?)(?:\.pid_(?P<pid>\d+))?\.execution_(?P<execution>\d+)\.hlo_snapshot\.(?P<ext>pb(?:\.gz)?)$"
)
# thunk_sequence.txt, autotune_results.pbtxt, gpu_target_config.pbtxt: one per module on GPU
_GPU_MODULE_KIND = {"thunk_sequence.txt": ("thunk-sequence", "txt"), "autotune_results.pbtxt": ("autotune", "pbtxt"),
                    "gpu_target_config.pbtxt": ("target-config", "pbtxt"),
                    "thunk_sequence_after_thunk_passes.txt": ("thunk-sequence", "txt")}  # fmt: skip
_GPU_MODULE_FILE = LazyPattern(r"(?:^|\.)(?P<what>" + "|".join(map(re.escape, _GPU_MODULE_KIND)) + ")$")
# obj-file.<kernel>.o: the CPU object code of one kernel
_OBJ_FILE = LazyPattern(r"(?:^|\.)obj-file\.(?P<kernel>.+)\.o$")
# the CPU object code of the whole module: '.o' (jax 0.4.30, TF), '.obj-file..o' (jax 0.5.0-0.5.1),
# '.obj-file.o' (jax 0.5.3-0.6.2)
_WHOLE_OBJ_FILE = LazyPattern(r"(?:^|\.)(?:obj-file\.{1,2})?o$")
# what a module name never ends with: an LLVM IR step (a '.ir-with-opt.o' is the user's own compile of XLA's .ll)
_LLVM_STEP_TAIL = LazyPattern(r"(?:^|\.)ir-(?:no|with)-opt(?:-noconst)?$")
# [<kernel or shard>.]ir-<no|with>-opt[.<shard>|.part_<nn>][-noconst].ll: LLVM IR (newer XLA puts the kernel
# first; jax 0.4.38-0.5 and TF 2.18 split the CPU module into parts after the step)
_LLVM_IR = LazyPattern(r"(?:^|\.)(?P<step>ir-(?:no|with)-opt)(?:\.(?P<shard>\d+|part_\d+))?(?P<noconst>-noconst)?\.ll$")
# <kernel>-<pre-optimization|post-optimization|post-lowering>.mlir: the CPU fusion emitter's MLIR
_EMITTER_MLIR = LazyPattern(r"-(?P<step>pre-optimization|post-optimization|post-lowering)\.mlir$")
# <kernel>.mlir-passes.log: the emitter's MLIR after every pass (--xla_dump_emitter_re)
_PASSES_LOG = LazyPattern(r"\.(?P<step>mlir-passes)\.log$")
# [<shard>.]ptx, <fusion>[.before_validation].ttir.txt, <fusion>.hlo: GPU kernels and Triton fusions
_GPU_KERNEL = LazyPattern(r"(?:^|\.)(?:(?P<step>ptx|hlo)|(?P<ttir>(?:before_validation\.)?ttir)\.txt)$")
_GPU_KERNEL_FORMAT = {"ptx": "ptx", "hlo": "text", "ttir": "mlir", "before_validation.ttir": "mlir"}
# [<computation>.]module_XXXX.<name>._fusion.html: --xla_dump_fusion_visualization
_FUSION_HTML = LazyPattern(r"(?:^|\.)_fusion\.html$")
# <prefix>.module_XXXX.<name>.mlir: an MLIR module dumped under a prefix such as lmhlo
_MLIR_MODULE = LazyPattern(r"(?:^|\.)mlir$")

_CL_SEGMENT = LazyPattern(r"cl_\d+")
# names XLA always uniquifies with '.<n>': PyTorch/XLA's graphs and TF's functions and clusters
_UNIQUIFIED = LazyPattern(r"^SyncTensorsGraph$|__Xla.*_$")


def _split_head(head: str) -> dict[str, Any]:
    """The module name and the libtpu changelist that precede a suffix."""
    match = _CHANGELIST.search(head)
    if match:
        head = head[: match.start()]
    return {"module_name": head or None, "compilation": match["cl"] if match else None}


def _split_kernel(body: str, shard_last: bool = False) -> tuple[str, str | None]:
    """Split '<module name>[.cl_<n>].<kernel>' where both may hold dots.

    A module name is its first segment plus the all-digit segments XLA's uniquifier adds
    (``SyncTensorsGraph.105381``, ``..._.2``); kernel names start with a letter or '_'. With
    ``shard_last`` and no kernel, a trailing number is a GPU LLVM shard (``jit_f.1.ptx``), except
    after the names that always carry a uniquifier (PyTorch/XLA's ``SyncTensorsGraph``, TF's
    ``...__Xla..._``); any other name the uniquifier ends reads wrongly there, which its file name
    alone cannot settle.
    """
    segments = body.split(".")
    n = 1
    if not _CL_SEGMENT.fullmatch(segments[0]):
        while n < len(segments) and segments[n].isdigit():
            n += 1
        if n < len(segments) and _CL_SEGMENT.fullmatch(segments[n]):
            n += 1
    if shard_last and n == len(segments) and n > 1 and segments[-1].isdigit() and not _UNIQUIFIED.search(segments[-2]):
        n -= 1
    return ".".join(segments[:n]), ".".join(segments[n:]) or None


def _stage_fields(m: re.Match, head: str) -> dict[str, Any]:
    report, ext = m["report"], m["ext"]
    stage = m["stage"] if m["stage"].startswith(("before_", "after_")) else "after_optimizations"
    fields = {"stage": stage, "backend": m["backend"], "target": m["target"], **_split_head(head)}
    if ext == "fdo_profile":  # the feedback-directed profile the module was compiled with
        return {**fields, "kind": "autotune", "artifact": "fdo_profile"}
    if report:
        return {**fields, "kind": report, "format": ext}  # txt, pb or pb.gz
    top_level = "top_level" if ext == "top_level.html" else None
    return {**fields, "kind": "hlo", "format": _HLO_FORMAT[ext], "artifact": top_level}


def _pass_fields(m: re.Match, head: str) -> dict[str, Any]:
    fields = {"kind": "pass", "stage": "pass", "format": _HLO_FORMAT[m["ext"]], "step": int(m["step"]),
              "pipeline": m["pipeline"], **_split_head(head)}  # fmt: skip
    if "during" in m.groupdict():  # a pass's own step: no after_/before_ pair
        return {**fields, "artifact": m["during"]}
    backend = "ipu" if m["pipeline"] == "IPU" else None
    return {**fields, "after_pass": m["after"], "before_pass": m["before"], "backend": backend}


def _options_fields(m: re.Match, head: str) -> dict[str, Any]:
    artifact = None if m["what"] == "debug_options" else m["what"].split(".")[0]
    fmt, backend = _OPTIONS_FILES[m["what"]]
    return {"kind": "debug-options", "format": fmt, "backend": backend, "artifact": artifact, **_split_head(head)}


def _snapshot_fields(m: re.Match, head: str) -> dict[str, Any]:
    groups = m.groupdict()
    if "snapshot" in groups:
        return {"kind": "snapshot", "format": m["ext"], "snapshot_id": int(m["snapshot"]), **_split_head(head)}
    stage = "before_optimizations" if m["what"] == "hlo_unoptimized_snapshot" else None
    return {"kind": "snapshot", "format": "pbtxt" if m["ext"] == "txt" else m["ext"], "execution": int(m["execution"]),
            "stage": stage, **_split_head(head)}  # fmt: skip


def _gpu_module_fields(m: re.Match, head: str) -> dict[str, Any]:
    kind, fmt = _GPU_MODULE_KIND[m["what"]]
    after = "after_thunk_passes" if "after_thunk_passes" in m["what"] else None  # the sequence the thunk passes left
    return {"kind": kind, "format": fmt, "backend": "gpu", "artifact": after, **_split_head(head)}


def _obj_file_fields(m: re.Match, head: str) -> dict[str, Any]:
    fields = {"kind": "codegen", "format": "o", "backend": "cpu", "pipeline": "obj-file", "artifact": m["kernel"]}
    return {**fields, **_split_head(head)}


def _whole_obj_file_fields(m: re.Match, head: str) -> dict[str, Any] | None:
    if _LLVM_STEP_TAIL.search(head):  # not XLA's: an object the user compiled from a dumped .ll
        return None
    return {"kind": "codegen", "format": "o", "backend": "cpu", "pipeline": "obj-file", **_split_head(head)}


def _llvm_ir_fields(m: re.Match, head: str) -> dict[str, Any]:
    head, kernel = _split_kernel(head) if head else ("", None)  # XLA puts a shard after 'ir-...-opt'
    step = m["step"] + (m["noconst"] or "")
    return {"kind": "codegen", "format": "ll", "pipeline": step, "artifact": m["shard"] or kernel,
            **_split_head(head)}  # fmt: skip


def _kernel_fields(m: re.Match, head: str) -> dict[str, Any] | None:
    if not head:  # these suffixes always follow a kernel name
        return None
    head, kernel = _split_kernel(head)
    fmt, backend = ("mlir", "cpu") if m["step"] != "mlir-passes" else ("log", None)
    return {"kind": "codegen", "format": fmt, "backend": backend, "pipeline": m["step"], "artifact": kernel,
            **_split_head(head)}  # fmt: skip


def _gpu_kernel_fields(m: re.Match, head: str) -> dict[str, Any]:
    step = m["step"] or m["ttir"]
    head, kernel = _split_kernel(head, shard_last=step == "ptx") if head else ("", None)
    return {"kind": "gpu-artifact", "format": _GPU_KERNEL_FORMAT[step], "backend": "gpu", "pipeline": step,
            "artifact": kernel, **_split_head(head)}  # fmt: skip


def _html_or_mlir_fields(m: re.Match, head: str) -> dict[str, Any]:
    kind, fmt = ("hlo", "html") if m.group().endswith(".html") else ("codegen", "mlir")
    return {"kind": kind, "format": fmt, **_split_head(head)}


# Tried in order: the specific suffixes before the loose ones (a pass's own step name is anything).
_XLA_SCHEMES = (
    (_STAGE, _stage_fields), (_BETWEEN_PASSES, _pass_fields), (_OPTIONS, _options_fields),
    (_PJRT_SNAPSHOT, _snapshot_fields), (_EXECUTION, _snapshot_fields), (_GPU_MODULE_FILE, _gpu_module_fields),
    (_OBJ_FILE, _obj_file_fields), (_WHOLE_OBJ_FILE, _whole_obj_file_fields), (_LLVM_IR, _llvm_ir_fields),
    (_EMITTER_MLIR, _kernel_fields), (_PASSES_LOG, _kernel_fields), (_GPU_KERNEL, _gpu_kernel_fields), (_FUSION_HTML, _html_or_mlir_fields),
    (_MLIR_MODULE, _html_or_mlir_fields), (_DURING_PASS, _pass_fields),
)  # fmt: skip


# the ending a scheme needs, checked before its search: '.+\.o$' tried at every 'obj-file.' is quadratic
_REQUIRED_END = {_OBJ_FILE: ".o"}


def _xla_suffix(rest: str) -> dict[str, Any] | None:
    """Fields from the part after 'module_XXXX.', or None when no scheme matches."""
    for pattern, fields_of in _XLA_SCHEMES:
        if not rest.endswith(_REQUIRED_END.get(pattern, "")):
            continue
        if (m := pattern.search(rest)) and (fields := fields_of(m, rest[: m.start()])):
            return fields
    return None


def _decode_xla(name: str) -> dict[str, Any]:
    """Fields of a file XLA named; kind 'unknown' (with whatever could be read) otherwise."""
    match = _MODULE.search(name)
    if not match:
        if m := _NAMED_SNAPSHOT.match(name):
            pid = {"pid": int(m["pid"])} if m["pid"] else {}
            return {"kind": "snapshot", "format": m["ext"], "module_name": m["name"], "execution": int(m["execution"]), **pid}
        return {}
    prefix, rest = name[: match.start()], name[match.end() :]
    known: dict[str, Any] = {"module_id": int(match["id"])}
    if prefix.isdigit():
        known["timestamp_us"] = int(prefix)
    fields = _xla_suffix(rest) if rest else None
    if fields is None:
        return known
    if prefix and not prefix.isdigit():  # a computation or proto name XLA put before module_
        fields["artifact"] = fields.get("artifact") or prefix
    if fields.get("compilation"):
        fields["backend"] = fields.get("backend") or "tpu"
    return {**known, **{k: v for k, v in fields.items() if v is not None}}


# ---- the other tools' files -------------------------------------------------------------------

# <graph>[_<n>].<ext>: a TF_DUMP_GRAPH_PREFIX graph; TF adds _1, _2, ... when a name repeats
_TF_GRAPH = LazyPattern(r"^(?P<graph>.+?)(?:_(?P<n>[1-9]\d*))?\.(?P<ext>pbtxt|pb|mlir|txt)$")
# jax_ir<n>_<module>[_<jax stage>].mlir: StableHLO written to JAX_DUMP_IR_TO
_JAX_MLIR = LazyPattern(
    r"^jax_ir(?P<step>\d+)_(?P<module>.*?)"
    r"(?:_(?P<stage>compile|export|verification|before_refine_polymorphic_shapes))?\.mlir$"
)
# jax_<n>_<function>.<jaxpr.txt|jaxpr.html|eqn_count_pprof>: jaxprs, JAX_DUMP_IR_MODES=jaxpr,...
_JAXPR = LazyPattern(r"^jax_(?P<step>\d+)_(?P<function>.+?)\.(?P<ext>jaxpr\.txt|jaxpr\.html|eqn_count_pprof)$")
_JAXPR_FORMAT = {"jaxpr.txt": "jaxpr", "jaxpr.html": "html", "eqn_count_pprof": "pprof"}
# the files of a PJRT compile-input folder (text protos when only --xla_dump_hlo_as_text is on)
_PJRT_FILES = {"module.mlir": "mlir", "compile_options.pb": "pb", "topology.pb": "pb",
               "compile_options.textproto": "pbtxt", "topology.textproto": "pbtxt"}  # fmt: skip
# <module name>_<unix ms>: XLA's PJRT compile-input folder (jax 0.10.2 writes module_XXXX.<name>)
_PJRT_FOLDER = LazyPattern(r"^(?P<name>.+)_(?P<ms>\d{13})$")
# <file>.<ordinal>: PyTorch/XLA appends the device ordinal to XLA_SAVE_TENSORS_FILE
_TORCH_FILE = LazyPattern(r"^(?P<file>.+)\.(?P<ordinal>\d+)$")


def _extension(name: str) -> str | None:
    return name.rsplit(".", 1)[1] if "." in name.strip(".") else None


def _decode_tf_graph(name: str) -> dict[str, Any]:
    m = _TF_GRAPH.match(name)
    if not m:
        return {"kind": "tf-graph", "format": _extension(name), "artifact": name}
    step = int(m["n"]) if m["n"] else None
    return {"kind": "tf-graph", "format": m["ext"], "artifact": m["graph"], "step": step}


def _decode_jax_ir(name: str) -> dict[str, Any] | None:
    if m := _JAX_MLIR.match(name):
        return {"kind": "jax-ir", "format": "mlir", "step": int(m["step"]), "module_name": m["module"] or None,
                "artifact": m["stage"]}  # fmt: skip
    if m := _JAXPR.match(name):
        fmt = _JAXPR_FORMAT[m["ext"]]
        return {"kind": "jax-ir", "format": fmt, "step": int(m["step"]), "artifact": m["function"]}
    return None


def _decode_pjrt(folder: str, name: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"kind": "pjrt-compile-input", "format": _PJRT_FILES[name], "artifact": name}
    if m := _MODULE.match(folder):  # jax 0.10.2: module_XXXX.<name>
        return {**fields, "module_id": int(m["id"]), "module_name": folder[m.end() :] or None}
    if m := _PJRT_FOLDER.match(folder):  # XLA writes unknown_module for a module without a name
        module_name = None if m["name"] == "unknown_module" else m["name"]
        return {**fields, "module_name": module_name, "timestamp_us": int(m["ms"]) * 1000}
    return {**fields, "artifact": f"{folder}/{name}"}


def _decode(path: str) -> dict[str, Any]:
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        return {}
    top, name = parts[0], parts[-1]
    if len(parts) > 1 and (process := process_of_dir(top)) is not None:  # one process of a many-process job
        fields = _decode("/".join(parts[1:]))  # process K's module N is module K * PROCESS_STRIDE + N of the run
        return {**fields, "process": process, "module_id": run_module_id(process, fields.get("module_id"))}
    if top == "tf_graphs" and len(parts) > 1:
        return _decode_tf_graph(name)
    if top == "jax_ir" and len(parts) > 1:
        return _decode_jax_ir(name) or {"kind": "jax-ir", "format": _extension(name), "artifact": name}
    if top == "torch_xla" and len(parts) > 1:
        m = _TORCH_FILE.match(name)
        return {"kind": "torch-xla", "format": "txt", "artifact": m["file"] if m else name,
                "target": f"xla:{m['ordinal']}" if m else None}  # fmt: skip
    if top == "poplar" and len(parts) > 1:
        return {"kind": "poplar-report", "format": _extension(name), "artifact": "/".join(parts[1:-1]) or None}
    if len(parts) > 1 and name in _PJRT_FILES:
        return _decode_pjrt(parts[-2], name)
    if fields := _decode_xla(name):
        return fields
    if ir_fields := _decode_jax_ir(name):  # JAX_DUMP_IR_TO pointed at the XLA dump folder itself
        return ir_fields
    if name.endswith(".pbtxt"):  # TF_DUMP_GRAPH_PREFIX pointed at the XLA dump folder itself
        return _decode_tf_graph(name)
    return {}
