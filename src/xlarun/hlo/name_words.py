"""Words for humans about a dump file's name: what each kind, format and field of a :class:`DumpName` means."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from xlarun.hlo.process_dirs import xla_module_id

if TYPE_CHECKING:
    from xlarun.hlo.names import DumpName

_KIND_WORDS = {
    "hlo": "the whole HLO module at one stage",
    "pass": "the HLO module as one pass left it",
    "buffer-assignment": "buffer assignment of the optimized module",
    "buffer-assignment-values": "the values held by each buffer of the optimized module",
    "live-range": "live ranges of the optimized module's buffers",
    "memory-usage-report": "memory usage report of the optimized module",
    "debug-options": "the options the module was compiled with",
    "snapshot": "an HloSnapshot: the module with the arguments (and result) of one execution",
    "codegen": "code generated for the module (LLVM IR, MLIR, object code)",
    "gpu-artifact": "a GPU kernel or Triton fusion artifact",
    "autotune": "autotuning or profile results used while compiling",
    "target-config": "the GPU target description the module was compiled for",
    "thunk-sequence": "the sequence of thunks the GPU executable runs",
    "tf-graph": "a TensorFlow graph written to TF_DUMP_GRAPH_PREFIX",
    "jax-ir": "IR JAX wrote to JAX_DUMP_IR_TO",
    "pjrt-compile-input": "one input of a PJRT compilation (module, options, topology)",
    "torch-xla": "graphs PyTorch/XLA saved to XLA_SAVE_TENSORS_FILE",
    "poplar-report": "a Poplar report (POPLAR_ENGINE_OPTIONS autoReport)",
    "unknown": "a file whose name xlarun cannot decode",
}
_FORMAT_WORDS = {
    "text": "HLO text", "proto": "HloProto, binary", "proto.gz": "HloProto, gzip-compressed", "dot": "Graphviz DOT",
    "html": "HTML", "url": "a link to a rendered graph", "pbtxt": "protobuf text format", "pb": "binary protobuf",
    "pb.gz": "binary protobuf, gzip-compressed", "ll": "LLVM IR", "o": "object code", "mlir": "MLIR",
    "ptx": "PTX assembly", "txt": "plain text", "log": "MLIR after every pass", "jaxpr": "jaxpr text",
    "pprof": "pprof profile", "pop": "PopVision profile", "a": "ar archive",
    "flags": "command-line flags, as a flag file holds them",
}  # fmt: skip
# what each options file holds (libtpu writes the last five beside its dumps)
_OPTIONS_WORDS = {"config": "the compile config", "metadata": "the module's metadata",
                  "execution_options": "the ExecutionOptions it was compiled with",
                  "flagfile": "the flags the compiler ran with", "hlo_module_config": "its HloModuleConfig",
                  "target_arguments": "the arguments of the compile target",
                  "tpu_comp_env": "the TPU compilation environment"}  # fmt: skip
_ARTIFACT_LABEL = {"codegen": "kernel", "gpu-artifact": "kernel", "tf-graph": "graph", "pjrt-compile-input": "file",
                   "torch-xla": "file", "poplar-report": "report folder", "debug-options": "file"}  # fmt: skip


def _stage_words(d: DumpName) -> str | None:
    if d.stage == "pass" and d.after_pass is None and d.artifact:
        return f"inside the pass '{d.pipeline}', at its step '{d.artifact}' (step {d.step})"
    if d.stage == "pass":
        start = d.after_pass == "pipeline-start"
        after = "at the start of the pipeline" if start else f"after the pass '{d.after_pass}'"
        before = "at its end" if d.before_pass == "pipeline-end" else f"before '{d.before_pass}'"
        return f"{after}, {before} (step {d.step} of pipeline '{d.pipeline}')"
    if d.stage == "before_optimizations":
        return "before optimizations (as the framework handed it to XLA)"
    if d.stage == "after_optimizations":
        return "after optimizations" + (f" for {d.backend}" if d.backend else " (no backend prefix: TPU or older XLA)")
    if d.stage and d.stage.startswith("after_optimizations_"):
        point = "before" if d.stage.endswith("before_buffer_assignment") else "after"
        return f"after optimizations, {point} buffer assignment (libtpu writes both)"
    return None


def describe(d: DumpName) -> list[tuple[str, str]]:
    out = [("kind", f"{d.kind}: {_KIND_WORDS.get(d.kind, d.kind)}")]
    if d.format:
        out.append(("format", f"{d.format}: {_FORMAT_WORDS.get(d.format, d.format)}"))
    if d.timestamp_us is not None:
        out.append(("timestamp", f"{d.timestamp_us} microseconds since the epoch{_utc(d.timestamp_us)}"))
    if d.module_id is not None:
        where = "unique within one process only" if d.process is None else f"process {d.process}'s module_"
        where += "" if d.process is None else f"{xla_module_id(d.module_id, d.process):04d} as XLA named it"
        out.append(("module id", f"{d.module_id} (module_{d.module_id:04d}; {where})"))
    elif d.kind == "snapshot" and d.module_name:
        out.append(("module id", "not in the file name (the index ties it to the run's one module of this name)"))
    if d.module_name:
        out.append(("module name", d.module_name))
    elif d.module_id is not None and d.stage:
        why = "Graphcore's IPU dumps leave it out" if d.backend == "ipu" else "XLA drops it past 255 characters"
        out.append(("module name", f"not in the file name ({why})"))
    if stage := _stage_words(d):
        out.append(("stage", stage))
    elif d.kind in ("codegen", "gpu-artifact") and d.pipeline:
        whole = d.pipeline == "obj-file" and not d.artifact
        out.append(("codegen step", d.pipeline + (" (the whole module's object code)" if whole else "")))
    if d.backend:
        out.append(("backend", d.backend + (f" (target {d.target})" if d.target else "")))
    elif d.target:
        out.append(("device", f"{d.target} (the ordinal PyTorch/XLA appends)"))
    if d.compilation:
        out.append(("compilation", f"{d.compilation} (changelist of the internal build, e.g. libtpu)"))
    if d.execution is not None:
        out.append(("execution", f"{d.execution} (execution_{d.execution:04d}; counted from 0 per module)"))
    if d.snapshot_id is not None:
        out.append(("snapshot", f"{d.snapshot_id} (PJRT's number for this execution; may be negative)"))
    if d.pid is not None:
        out.append(("process", f"{d.pid} (the pid of the process that ran it, as PyTorch/XLA on Neuron names it)"))
    if d.stage != "pass" and d.step is not None:
        what = "JAX's dump counter" if d.kind == "jax-ir" else f"TF's _{d.step}: the name was dumped before"
        out.append(("step", f"{d.step} ({what})"))
    if d.artifact and not (d.stage == "pass" and d.after_pass is None):
        words = _OPTIONS_WORDS.get(d.artifact) if d.kind == "debug-options" else None
        out.append((_artifact_label(d), d.artifact + (f" ({words})" if words else "")))
    return out


def _utc(timestamp_us: int) -> str:
    try:
        return datetime.fromtimestamp(timestamp_us / 1e6, timezone.utc).strftime(" (%Y-%m-%d %H:%M:%S UTC)")
    except (OverflowError, OSError, ValueError):  # garbage digits: no date to show
        return ""


def _artifact_label(d: DumpName) -> str:
    if d.kind in ("codegen", "gpu-artifact") and d.artifact and d.artifact.isdigit():
        return "LLVM module shard"
    if d.kind == "jax-ir":
        return "JAX stage" if d.format == "mlir" else "function"
    if d.kind == "hlo":
        return "view" if d.artifact == "top_level" else "computation"
    return _ARTIFACT_LABEL.get(d.kind, "artifact")
