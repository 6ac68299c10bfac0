"""Tests for xlarun.hlo.names: every real file name in the fixtures, every documented example, and garbage."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlarun.hlo.names import KINDS, DumpName, decode_dump_name

FIXTURES = Path(__file__).parent / "fixtures" / "names"
FIXTURE_FILES = sorted(FIXTURES.glob("*.txt"))
PUBLIC = FIXTURES / "public.txt"  # names quoted in public issues, docs and code, not made here
OTHER_VERSIONS = FIXTURES / "other_versions.txt"  # made here with the compat venvs (jax 0.4.30-0.6.2, TF 2.16, torch_xla)
MADE_HERE = [f for f in FIXTURE_FILES if f not in (PUBLIC, OTHER_VERSIONS)]  # by make_fixtures.py

# Real names that may decode as 'unknown', each with the reason; public.txt says the same beside the name.
EXPECTED_UNKNOWN: dict[str, str] = {
    "module_0000.jit_quad_roots.ir-with-opt.o": "not XLA's: a user's clang compile of XLA's .ir-with-opt.ll",
}

# The module names each real run produces (TF's numbers change from run to run); a name split at the
# wrong dot fails these full matches.
MODULE_NAMES = {
    "jax": re.compile(r"jit_convert_element_type|jit_broadcast_in_dim|jit_f|jit__reduce_sum|jit__lambda"),
    "tf2": re.compile(r"a_inference_[fg]_\d+__XlaMustCompile_true_config_proto_\d+_executor_type_\d+_\.\d+"),
    "tf1": re.compile(r"cluster_\d+__XlaCompiledKernel_true__XlaHasReferenceVars_false__XlaNumConstantArgs_\d+"
                      r"__XlaNumResourceArgs_\d+_\.\d+"),
}  # fmt: skip


def real_names(fixture: Path) -> list[str]:
    return [line for line in fixture.read_text().splitlines() if line and not line.startswith("#")]


def decoded(fixture_name: str) -> list[DumpName]:
    return [decode_dump_name(name) for name in real_names(FIXTURES / fixture_name)]


def expect(path: str, **fields) -> None:
    assert decode_dump_name(path) == DumpName(path=path, **fields)


# ---- (a) every real name --------------------------------------------------------------------


def test_fixtures_are_present_and_say_how_they_were_made():
    assert {f.name for f in FIXTURE_FILES} >= {"jax_cpu_passes.txt", "tf2_jit.txt", "tf1_autojit.txt", "jax_ir.txt",
                                                "public.txt"}  # fmt: skip
    for fixture in MADE_HERE:
        header = fixture.read_text().splitlines()[:2]
        assert header[0].startswith("# ") and "jax 0.10.2" in header[0] and "tensorflow-cpu 2.21" in header[0]
        assert len(real_names(fixture)) > 10


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda f: f.stem)
def test_every_real_name_decodes(fixture):
    for name in real_names(fixture):
        d = decode_dump_name(name)
        assert d.kind in KINDS
        if d.kind == "unknown":
            assert name in EXPECTED_UNKNOWN, f"undecoded real name: {name}"
        json.dumps(d.to_dict())
        assert d.describe()[0][0] == "kind"


@pytest.mark.parametrize("fixture", MADE_HERE, ids=lambda f: f.stem)
def test_real_module_names_are_never_split_at_the_wrong_dot(fixture):
    family = fixture.stem.split("_")[0]
    for d in decoded(fixture.name):
        if d.kind not in ("tf-graph", "jax-ir"):
            assert MODULE_NAMES[family].fullmatch(d.module_name or ""), d.path
            assert f"module_{d.module_id:04d}.{d.module_name}" in d.path


@pytest.mark.parametrize("fixture", ["jax_cpu_passes.txt", "jax_cpu_extras.txt", "tf2_jit.txt"])
def test_pass_steps_count_from_zero_without_gaps_per_module(fixture):
    steps = defaultdict(set)
    for d in decoded(fixture):
        if d.kind == "pass":
            steps[d.module_id].add(d.step)
    assert steps
    for module_id, seen in steps.items():
        assert seen == set(range(len(seen))), module_id


def test_the_jax_run_holds_every_kind_a_cpu_dump_has():
    kinds = {d.kind for d in decoded("jax_cpu_passes.txt")}
    assert kinds == {"hlo", "pass", "buffer-assignment", "buffer-assignment-values", "live-range",
                     "memory-usage-report", "debug-options", "snapshot", "codegen", "pjrt-compile-input"}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("module_0004.jit_f.before_optimizations.txt",
         dict(kind="hlo", format="text", module_id=4, module_name="jit_f", stage="before_optimizations")),
        ("module_0004.jit_f.cpu_after_optimizations.hlo.pb",
         dict(kind="hlo", format="proto", module_id=4, module_name="jit_f", stage="after_optimizations",
              backend="cpu")),
        ("module_0004.jit_f.cpu_after_optimizations.top_level.html",
         dict(kind="hlo", format="html", module_id=4, module_name="jit_f", stage="after_optimizations",
              backend="cpu", artifact="top_level")),
        ("module_0004.jit_f.cpu_after_optimizations-memory-usage-report.pb",
         dict(kind="memory-usage-report", format="pb", module_id=4, module_name="jit_f",
              stage="after_optimizations", backend="cpu")),
        ("module_0004.jit_f.cpu_after_optimizations-buffer-assignment-values.txt",
         dict(kind="buffer-assignment-values", format="txt", module_id=4, module_name="jit_f",
              stage="after_optimizations", backend="cpu")),
        ("module_0004.jit_f.0015.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt",
         dict(kind="pass", format="text", module_id=4, module_name="jit_f", stage="pass", step=15,
              pipeline="HLO_passes_after_layout_assignment", after_pass="fusion", before_pass="fusion-wrapper")),
        ("module_0004.jit_f.0014.after_layout_assignment.after_pipeline-start.before_pipeline-end.hlo.pb",
         dict(kind="pass", format="proto", module_id=4, module_name="jit_f", stage="pass", step=14,
              pipeline="after_layout_assignment", after_pass="pipeline-start", before_pass="pipeline-end")),
        # copy-insertion dumps its own steps: <step>.<pass>.<step name>, no after_/before_ pair
        ("module_0004.jit_f.0017.copy-insertion.after_adding_copies_to_resolve_interference.txt",
         dict(kind="pass", format="text", module_id=4, module_name="jit_f", stage="pass", step=17,
              pipeline="copy-insertion", artifact="after_adding_copies_to_resolve_interference")),
        ("module_0004.jit_f.debug_options",
         dict(kind="debug-options", format="pbtxt", module_id=4, module_name="jit_f")),
        ("module_0004.jit_f.obj-file.__compute_module_cosine_sine_fusion.o",
         dict(kind="codegen", format="o", module_id=4, module_name="jit_f", backend="cpu", pipeline="obj-file",
              artifact="__compute_module_cosine_sine_fusion")),
        ("module_0004.jit_f.broadcast_add_fusion_kernel_module.ir-with-opt.ll",
         dict(kind="codegen", format="ll", module_id=4, module_name="jit_f", pipeline="ir-with-opt",
              artifact="broadcast_add_fusion_kernel_module")),
        ("module_0004.jit_f/module.mlir",
         dict(kind="pjrt-compile-input", format="mlir", module_id=4, module_name="jit_f", artifact="module.mlir")),
    ],
)  # fmt: skip
def test_representative_jax_cpu_names(path, fields):
    assert path in real_names(FIXTURES / "jax_cpu_passes.txt")
    expect(path, **fields)


def test_representative_pjrt_snapshot_name():
    # PJRT numbers snapshots differently in every run: take the number from the fixture
    path = next(n for n in real_names(FIXTURES / "jax_cpu_passes.txt") if n.startswith("module_0004.jit_f.snapshot."))
    number = int(path.split(".")[3])
    expect(path, kind="snapshot", format="pb", module_id=4, module_name="jit_f", snapshot_id=number)


def test_representative_jax_cpu_extras():
    names = real_names(FIXTURES / "jax_cpu_extras.txt")
    timestamped = next(n for n in names if n.endswith(".jit_f.cpu_after_optimizations.hlo.pb.gz"))
    expect(timestamped, kind="hlo", format="proto.gz", timestamp_us=int(timestamped.split(".")[0]), module_id=4,
           module_name="jit_f", stage="after_optimizations", backend="cpu")  # fmt: skip
    url = next(n for n in names if n.endswith(".jit_f.before_optimizations.url"))
    assert decode_dump_name(url).format == "url"
    for path, fields in [
        ("main.1.module_0004.jit_f._fusion.html",
         dict(kind="hlo", format="html", module_id=4, module_name="jit_f", artifact="main.1")),
        ("module_0004.jit_f.__compute_module_cosine_sine_fusion-post-lowering.mlir",
         dict(kind="codegen", format="mlir", module_id=4, module_name="jit_f", backend="cpu",
              pipeline="post-lowering", artifact="__compute_module_cosine_sine_fusion")),
        ("module_0004.jit_f.broadcast_add_fusion_kernel_module.mlir-passes.log",
         dict(kind="codegen", format="log", module_id=4, module_name="jit_f", pipeline="mlir-passes",
              artifact="broadcast_add_fusion_kernel_module")),
    ]:  # fmt: skip
        assert path in names
        expect(path, **fields)


def test_representative_unoptimized_snapshot_names():
    names = real_names(FIXTURES / "jax_cpu_unoptimized_snapshots.txt")
    path = "module_0006.jit__reduce_sum.execution_0002.hlo_unoptimized_snapshot.txt"
    assert path in names
    expect(path, kind="snapshot", format="pbtxt", module_id=6, module_name="jit__reduce_sum",
           stage="before_optimizations", execution=2)  # fmt: skip
    expect("module_0004.jit_f/topology.textproto", kind="pjrt-compile-input", format="pbtxt", module_id=4,
           module_name="jit_f", artifact="topology.textproto")  # fmt: skip


def test_representative_tf_names():
    tf2 = real_names(FIXTURES / "tf2_jit.txt")
    suffix = ".cpu_after_optimizations.txt"
    path = next(n for n in tf2 if n.startswith("module_0000.a_inference_f_") and n.endswith(suffix))
    f_name = path.removeprefix("module_0000.").removesuffix(suffix)
    assert f_name.endswith("_.2")
    expect(path, kind="hlo", format="text", module_id=0, module_name=f_name, stage="after_optimizations",
           backend="cpu")  # fmt: skip
    tf1 = real_names(FIXTURES / "tf1_autojit.txt")
    # both the module name and the kernel end in a uniquifier: '..._.1' and '...fusion.1'
    kernel = "__compute_module_multiply_add_fusion.1"
    path = next(n for n in tf1 if n.startswith("module_0000.cluster_0_") and n.endswith(f".{kernel}.ir-no-opt.ll"))
    cluster = path.removeprefix("module_0000.").removesuffix(f".{kernel}.ir-no-opt.ll")
    assert cluster.endswith("_.1")
    expect(path, kind="codegen", format="ll", module_id=0, module_name=cluster, pipeline="ir-no-opt",
           artifact="__compute_module_multiply_add_fusion.1")  # fmt: skip
    assert "tf_graphs/mark_for_compilation_annotated_1.pbtxt" in tf1
    expect("tf_graphs/mark_for_compilation_annotated_1.pbtxt", kind="tf-graph", format="pbtxt", step=1,
           artifact="mark_for_compilation_annotated")  # fmt: skip
    expect("tf_graphs/before_mark_for_compilation.pbtxt", kind="tf-graph", format="pbtxt",
           artifact="before_mark_for_compilation")  # fmt: skip


def test_representative_jax_ir_names():
    names = real_names(FIXTURES / "jax_ir.txt")
    assert {"jax_ir/jax_ir0002_jit_f_compile.mlir", "jax_ir/jax_000004_<lambda>.jaxpr.txt"} <= set(names)
    expect("jax_ir/jax_ir0002_jit_f_compile.mlir", kind="jax-ir", format="mlir", step=2, module_name="jit_f",
           artifact="compile")  # fmt: skip
    expect("jax_ir/jax_ir0004_jit__lambda_compile.mlir", kind="jax-ir", format="mlir", step=4,
           module_name="jit__lambda", artifact="compile")  # fmt: skip
    expect("jax_ir/jax_000004_<lambda>.jaxpr.txt", kind="jax-ir", format="jaxpr", step=4, artifact="<lambda>")
    # JAX_DUMP_IR_TO pointed at the XLA dump folder itself
    expect("jax_000003__reduce_sum.jaxpr.html", kind="jax-ir", format="html", step=3, artifact="_reduce_sum")


# ---- (a2) names quoted in public issues, docs and code (fixtures/names/public.txt) ------------

_TF_CLUSTER = "cluster_4221__XlaCompiledKernel_true__XlaHasReferenceVars_true__XlaNumConstantArgs_0__XlaNumResourceArgs_0_.785"

PUBLIC_EXPECTED = {
    # libtpu's side files and its two stages around buffer assignment (xla#7193)
    "module_0021.jit_train_step.execution_options.txt":
        dict(kind="debug-options", format="pbtxt", module_id=21, module_name="jit_train_step",
             artifact="execution_options"),
    "module_0021.jit_train_step.flagfile":
        dict(kind="debug-options", format="flags", module_id=21, module_name="jit_train_step", artifact="flagfile"),
    "module_0021.jit_train_step.hlo_module_config.txt":
        dict(kind="debug-options", format="txt", module_id=21, module_name="jit_train_step",
             artifact="hlo_module_config"),
    "module_0021.jit_train_step.target_arguments.txt":
        dict(kind="debug-options", format="txt", module_id=21, module_name="jit_train_step",
             artifact="target_arguments"),
    "module_0021.jit_train_step.tpu_comp_env.txt":
        dict(kind="debug-options", format="pbtxt", module_id=21, module_name="jit_train_step", backend="tpu",
             artifact="tpu_comp_env"),
    "module_0023.jit_train_step.after_optimizations_before_buffer_assignment.txt":
        dict(kind="hlo", format="text", module_id=23, module_name="jit_train_step",
             stage="after_optimizations_before_buffer_assignment"),
    "module_0023.jit_train_step.after_optimizations_after_buffer_assignment.txt":
        dict(kind="hlo", format="text", module_id=23, module_name="jit_train_step",
             stage="after_optimizations_after_buffer_assignment"),
    "module_0023.jit_train_step.after_optimizations.txt":
        dict(kind="hlo", format="text", module_id=23, module_name="jit_train_step", stage="after_optimizations"),
    "module_0023.jit_train_step.after_optimizations-buffer-assignment.txt":
        dict(kind="buffer-assignment", format="txt", module_id=23, module_name="jit_train_step",
             stage="after_optimizations"),
    "module_0012.jit__unnamed_wrapped_function_.execution_options.txt":
        dict(kind="debug-options", format="pbtxt", module_id=12, module_name="jit__unnamed_wrapped_function_",
             artifact="execution_options"),
    # PyTorch/XLA: the graph number is part of the name, never a shard or a kernel
    "module_0001.SyncTensorsGraph.68.ir-no-opt.ll":
        dict(kind="codegen", format="ll", module_id=1, module_name="SyncTensorsGraph.68", pipeline="ir-no-opt"),
    "module_0001.SyncTensorsGraph.68.sm_9.0_gpu_after_optimizations.txt":
        dict(kind="hlo", format="text", module_id=1, module_name="SyncTensorsGraph.68", stage="after_optimizations",
             backend="gpu", target="sm_9.0"),
    "module_0001.SyncTensorsGraph.68.autotune_results.pbtxt":
        dict(kind="autotune", format="pbtxt", module_id=1, module_name="SyncTensorsGraph.68", backend="gpu"),
    "module_0001.SyncTensorsGraph.68.gpu_target_config.pbtxt":
        dict(kind="target-config", format="pbtxt", module_id=1, module_name="SyncTensorsGraph.68", backend="gpu"),
    # PyTorch/XLA on Neuron: the pid is kept apart from the module name
    "module_SyncTensorsGraph.387.pid_12643.execution_7496.hlo_snapshot.pb":
        dict(kind="snapshot", format="pb", module_name="SyncTensorsGraph.387", execution=7496, pid=12643),
    # an older JAX CPU dump: the whole module's object code, LLVM IR without constants
    "module_0000.jit_prim_fun.o":
        dict(kind="codegen", format="o", module_id=0, module_name="jit_prim_fun", backend="cpu", pipeline="obj-file"),
    "module_0000.jit_prim_fun.ir-no-opt-noconst.ll":
        dict(kind="codegen", format="ll", module_id=0, module_name="jit_prim_fun", pipeline="ir-no-opt-noconst"),
    "module_0000.jit_prim_fun.cpu_after_optimizations.top_level.html":
        dict(kind="hlo", format="html", module_id=0, module_name="jit_prim_fun", stage="after_optimizations",
             backend="cpu", artifact="top_level"),
    "module_0000.jit_prim_fun.before_optimizations.dot":
        dict(kind="hlo", format="dot", module_id=0, module_name="jit_prim_fun", stage="before_optimizations"),
    "module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot":
        dict(kind="pass", format="dot", module_id=1, stage="pass", backend="ipu", step=1, pipeline="IPU",
             after_pass="forward-allocation", before_pass="hlo-memory-scheduler"),
    "module_0335.jit__identity_fn.0001.spmd-partitioner.after_sharding-propagation.before_spmd-partitioning.txt":
        dict(kind="pass", format="text", module_id=335, module_name="jit__identity_fn", stage="pass", step=1,
             pipeline="spmd-partitioner", after_pass="sharding-propagation", before_pass="spmd-partitioning"),
    "module_0225.jit__apply_H_sparse.thunk_sequence.txt":
        dict(kind="thunk-sequence", format="txt", module_id=225, module_name="jit__apply_H_sparse", backend="gpu"),
    "module_0001.mosaic_gpu_uses_command_buffers.thunk_sequence_after_thunk_passes.txt":
        dict(kind="thunk-sequence", format="txt", module_id=1, module_name="mosaic_gpu_uses_command_buffers",
             backend="gpu", artifact="after_thunk_passes"),
    "module_0001.ir-no-opt.ll": dict(kind="codegen", format="ll", module_id=1, pipeline="ir-no-opt"),
    "module_0013.jit_compiled_batch.sm_8.9_gpu_after_optimizations-buffer-assignment.txt":
        dict(kind="buffer-assignment", format="txt", module_id=13, module_name="jit_compiled_batch",
             stage="after_optimizations", backend="gpu", target="sm_8.9"),
    f"module_5629.{_TF_CLUSTER}.gfx942_gpu_after_optimizations.txt":
        dict(kind="hlo", format="text", module_id=5629, module_name=_TF_CLUSTER, stage="after_optimizations",
             backend="gpu", target="gfx942"),
    "module_0002.jit__logsm_from_logmhalo_jax_kern.gpu_after_optimizations.txt":
        dict(kind="hlo", format="text", module_id=2, module_name="jit__logsm_from_logmhalo_jax_kern",
             stage="after_optimizations", backend="gpu"),
    "module_0016.jit_train_step.sm_8.0_gpu_after_optimizations.hlo.pb":
        dict(kind="hlo", format="proto", module_id=16, module_name="jit_train_step", stage="after_optimizations",
             backend="gpu", target="sm_8.0"),
    "module_0001.jit_train_step.sm_10.0a_gpu_after_optimizations.txt":
        dict(kind="hlo", format="text", module_id=1, module_name="jit_train_step", stage="after_optimizations",
             backend="gpu", target="sm_10.0a"),
    "module_0004.jit_program.obj-file.broadcast_multiply_fusion_kernel_module.o":
        dict(kind="codegen", format="o", module_id=4, module_name="jit_program", backend="cpu", pipeline="obj-file",
             artifact="broadcast_multiply_fusion_kernel_module"),
    "module_0000.jit__f_scan.__compute_module_add_bitcast_fusion.265.ir-no-opt.ll":
        dict(kind="codegen", format="ll", module_id=0, module_name="jit__f_scan", pipeline="ir-no-opt",
             artifact="__compute_module_add_bitcast_fusion.265"),
    "module_0000.jit__f_scan.__compute_module_add_bitcast_fusion.265-pre-optimization.mlir":
        dict(kind="codegen", format="mlir", module_id=0, module_name="jit__f_scan", backend="cpu",
             pipeline="pre-optimization", artifact="__compute_module_add_bitcast_fusion.265"),
    "module_0002.jit_scatter.wrapped_reduce-window_kernel_module-pre-optimization.mlir":
        dict(kind="codegen", format="mlir", module_id=2, module_name="jit_scatter", backend="cpu",
             pipeline="pre-optimization", artifact="wrapped_reduce-window_kernel_module"),
    "module_0002.jit_elem.input_reduce_fusion.mlir-passes.log":
        dict(kind="codegen", format="log", module_id=2, module_name="jit_elem", pipeline="mlir-passes",
             artifact="input_reduce_fusion"),
    "module_0001.test_module.debug_options":
        dict(kind="debug-options", format="pbtxt", module_id=1, module_name="test_module"),
    "module_0000.jit_step_fn.before_optimizations.hlo.pb":
        dict(kind="hlo", format="proto", module_id=0, module_name="jit_step_fn", stage="before_optimizations"),
}  # fmt: skip


def test_public_names_are_many_distinct_and_each_source_is_named():
    lines = PUBLIC.read_text().splitlines()
    names = real_names(PUBLIC)
    assert len(names) >= 60 and len(set(names)) == len(names)
    assert lines[0].startswith("# ") and sum(line.startswith("# source: ") for line in lines) >= 15
    assert lines[next(i for i, line in enumerate(lines) if not line.startswith("#")) - 1].startswith("# source: ")
    for name, why in EXPECTED_UNKNOWN.items():  # the fixture says why beside the name, too
        if name in names:
            assert "not XLA's" in lines[lines.index(name) - 1] and why.startswith("not XLA's")


@pytest.mark.parametrize("path", sorted(PUBLIC_EXPECTED))
def test_public_names_decode_to_exact_values(path):
    assert path in real_names(PUBLIC)
    expect(path, **PUBLIC_EXPECTED[path])


def test_public_names_keep_the_module_id_and_the_whole_module_name():
    checked = 0
    for name in real_names(PUBLIC):
        d = decode_dump_name(name)
        if d.kind == "unknown":
            continue
        if m := re.match(r"module_(\d+)\.", name):
            assert d.module_id == int(m[1]), name
            if d.module_name:  # the name is all of what follows the id, up to a suffix XLA adds
                assert name.startswith(f"module_{d.module_id:04d}.{d.module_name}."), name
                assert not re.search(r"\.(pid_\d+|execution_\d+|o|ir-\w+-opt)$", d.module_name), name
                checked += 1
    assert checked >= 55
    share = len(PUBLIC_EXPECTED) / len(real_names(PUBLIC))
    assert share >= 0.4  # exact values asserted for a good share, not just "not unknown"


# CPU object files across versions: real names from jax 0.4.30 and tensorflow-cpu 2.16.2 runs made here,
# and the 0.5.x spellings measured per version (XLA-FACTS section 8)
_TF216 = "a_inference_f_14__XlaMustCompile_true_config_proto_3175580994766145631_executor_type_11160318154034397263_.23"


@pytest.mark.parametrize(
    ("path", "module_id", "module_name"),
    [("module_0002.jit__lambda_.o", 2, "jit__lambda_"),  # jax 0.4.30
     ("module_0000.jit_convert_element_type.o", 0, "jit_convert_element_type"),  # jax 0.4.30
     (f"module_0000.{_TF216}.o", 0, _TF216),  # tensorflow-cpu 2.16.2
     ("module_0004.jit_f.obj-file..o", 4, "jit_f"),  # jax 0.5.0-0.5.1
     ("module_0004.jit_f.obj-file.o", 4, "jit_f"),  # jax 0.5.3-0.6.2
     ("module_0007.pmap__unnamed_wrapped_function_.186875.o", 7, "pmap__unnamed_wrapped_function_.186875"),
     ("module_0003.o", 3, None)],  # the name dropped past 255 characters
)  # fmt: skip
def test_whole_module_object_files_across_versions(path, module_id, module_name):
    expect(path, kind="codegen", format="o", module_id=module_id, module_name=module_name, backend="cpu",
           pipeline="obj-file")  # fmt: skip
    assert dict(decode_dump_name(path).describe())["codegen step"] == "obj-file (the whole module's object code)"


def test_names_from_other_versions_keep_whole_dotted_module_names():
    names = real_names(OTHER_VERSIONS)
    family = re.compile(r"jit_\w+|a_inference_f_\d+__\w+_\.\d+|SyncTensorsGraph\.\d+")
    objects = defaultdict(set)
    for name in names:
        d = decode_dump_name(name)
        assert d.kind != "unknown" and family.fullmatch(d.module_name or ""), name
        if d.module_id is not None:
            assert name.startswith(f"module_{d.module_id:04d}.{d.module_name}."), name
        if d.format == "o":
            objects[name[name.index(d.module_name) + len(d.module_name) :]].add(d.artifact)
    # every spelling of an object file: whole module ('.o', '.obj-file..o', '.obj-file.o') and per kernel
    assert {".o", ".obj-file..o", ".obj-file.o"} <= set(objects)
    assert all(objects[whole] == {None} for whole in (".o", ".obj-file..o", ".obj-file.o"))
    assert "broadcast.2_elemental_kernel_module" in set().union(*objects.values())  # a kernel with a dot
    assert {"part_00", "add_sine_fusion_kernel_module"} <= set().union(*objects.values())
    tf_snapshot = next(n for n in names if n.endswith(".execution_0000.hlo_snapshot.pb"))
    assert (
        decode_dump_name(tf_snapshot).module_id is None and f"module_0000.{decode_dump_name(tf_snapshot).module_name}.o" in names
    )


def test_an_object_compiled_from_dumped_llvm_ir_is_not_xlas():
    assert decode_dump_name("module_0000.jit_quad_roots.ir-with-opt.o").kind == "unknown"
    assert decode_dump_name("module_0000.jit_quad_roots.ir-no-opt-noconst.o").kind == "unknown"


def test_words_for_the_new_names():
    path = f"module_{_TF216}.execution_0000.hlo_snapshot.pb"  # tensorflow-cpu 2.16.2, made here
    expect(path, kind="snapshot", format="pb", module_name=_TF216, execution=0)
    words = dict(decode_dump_name(path).describe())
    assert words["module id"].startswith("not in the file name")
    words = dict(decode_dump_name("module_SyncTensorsGraph.387.pid_12643.execution_7496.hlo_snapshot.pb").describe())
    assert words["process"].startswith("12643 ")
    words = dict(decode_dump_name("module_0023.jit_train_step.after_optimizations_before_buffer_assignment.txt").describe())
    assert words["stage"] == "after optimizations, before buffer assignment (libtpu writes both)"
    words = dict(decode_dump_name("module_0021.jit_train_step.tpu_comp_env.txt").describe())
    assert (words["file"], words["backend"]) == ("tpu_comp_env (the TPU compilation environment)", "tpu")


def test_a_number_after_a_uniquified_name_is_not_a_gpu_shard():
    expect("module_0001.SyncTensorsGraph.68.ptx", kind="gpu-artifact", format="ptx", module_id=1,
           module_name="SyncTensorsGraph.68", backend="gpu", pipeline="ptx")  # fmt: skip
    tf = "a_inference_f_15__XlaMustCompile_true_config_proto_1356_executor_type_1116_.2"
    expect(f"module_0001.{tf}.ptx", kind="gpu-artifact", format="ptx", module_id=1, module_name=tf, backend="gpu",
           pipeline="ptx")  # fmt: skip


# ---- (b) the documented examples (XLA-FACTS section 2) --------------------------------------


def test_graphcore_ipu_pass_dumps():
    expect("module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot",
           kind="pass", format="dot", module_id=1, stage="pass", backend="ipu", step=1, pipeline="IPU",
           after_pass="forward-allocation", before_pass="hlo-memory-scheduler")  # fmt: skip
    expect("module_0001.0001.IPU.after_allocation-finder.before_forward-allocation.dot",
           kind="pass", format="dot", module_id=1, stage="pass", backend="ipu", step=1, pipeline="IPU",
           after_pass="allocation-finder", before_pass="forward-allocation")  # fmt: skip


def test_timestamped_pmap_with_a_dotted_name():
    expect("1624325116260738.module_0065.pmap__unnamed_wrapped_function_.186875.before_optimizations.txt",
           kind="hlo", format="text", timestamp_us=1624325116260738, module_id=65,
           module_name="pmap__unnamed_wrapped_function_.186875", stage="before_optimizations")  # fmt: skip


def test_documented_pass_dump():
    expect("module_0000.jit_f.0001.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt",
           kind="pass", format="text", module_id=0, module_name="jit_f", stage="pass", step=1,
           pipeline="HLO_passes_after_layout_assignment", after_pass="fusion", before_pass="fusion-wrapper")  # fmt: skip


@pytest.mark.parametrize(
    ("stage_part", "backend", "target"),
    [("cpu_after_optimizations", "cpu", None), ("sm_8.0_gpu_after_optimizations", "gpu", "sm_8.0"),
     ("sm_9.0a_gpu_after_optimizations", "gpu", "sm_9.0a"), ("gfx90a_gpu_after_optimizations", "gpu", "gfx90a"),
     ("after_optimizations", None, None)],
)  # fmt: skip
def test_after_optimizations_with_backend_prefixes(stage_part, backend, target):
    expect(f"module_0004.jit_f.{stage_part}.hlo.pb", kind="hlo", format="proto", module_id=4, module_name="jit_f",
           stage="after_optimizations", backend=backend, target=target)  # fmt: skip
    expect(f"module_0004.jit_f.{stage_part}-buffer-assignment.txt", kind="buffer-assignment", format="txt",
           module_id=4, module_name="jit_f", stage="after_optimizations", backend=backend, target=target)  # fmt: skip


def test_libtpu_changelist_names():
    expect("module_0336.jit__train_step.cl_813921542.0077.spmd-cleanup.after_pipeline-start.before_dce.txt",
           kind="pass", format="text", module_id=336, module_name="jit__train_step", stage="pass", backend="tpu",
           step=77, pipeline="spmd-cleanup", after_pass="pipeline-start", before_pass="dce",
           compilation="cl_813921542")  # fmt: skip
    expect("module_0336.jit__train_step.cl_813921542.after_optimizations.txt", kind="hlo", format="text",
           module_id=336, module_name="jit__train_step", stage="after_optimizations", backend="tpu",
           compilation="cl_813921542")  # fmt: skip


def test_snapshots_new_old_and_negative():
    expect("module_0006.jit_f.snapshot.304912769.pb", kind="snapshot", format="pb", module_id=6,
           module_name="jit_f", snapshot_id=304912769)  # fmt: skip
    expect("module_0006.jit_f.snapshot.-1875405467.pb", kind="snapshot", format="pb", module_id=6,
           module_name="jit_f", snapshot_id=-1875405467)  # fmt: skip
    expect("1624325116260738.module_0001.jit__lambda_.execution_0001.hlo_snapshot.pb", kind="snapshot",
           format="pb", timestamp_us=1624325116260738, module_id=1, module_name="jit__lambda_", execution=1)  # fmt: skip
    # the HloSnapshot overload without a module id puts the name where the id goes
    expect("module_jit_f.execution_0003.hlo_snapshot.pb", kind="snapshot", format="pb", module_name="jit_f",
           execution=3)  # fmt: skip


def test_name_dropped_when_too_long():
    expect("module_0003.before_optimizations.txt", kind="hlo", format="text", module_id=3,
           stage="before_optimizations")  # fmt: skip
    words = dict(decode_dump_name("module_0003.before_optimizations.txt").describe())
    assert "255" in words["module name"]


def test_dotted_framework_names():
    tf = "a_inference_f_15__XlaMustCompile_true_config_proto_1356_executor_type_1116_.2"
    expect(f"module_0001.{tf}.before_optimizations.txt", kind="hlo", format="text", module_id=1, module_name=tf,
           stage="before_optimizations")  # fmt: skip
    expect("module_0001.SyncTensorsGraph.105381.0003.simplification.after_algsimp.before_cse.hlo.pb",
           kind="pass", format="proto", module_id=1, module_name="SyncTensorsGraph.105381", stage="pass", step=3,
           pipeline="simplification", after_pass="algsimp", before_pass="cse")  # fmt: skip
    expect("module_0001.SyncTensorsGraph.105381.wrapped_add_kernel_module.ir-no-opt.ll", kind="codegen",
           format="ll", module_id=1, module_name="SyncTensorsGraph.105381", pipeline="ir-no-opt",
           artifact="wrapped_add_kernel_module")  # fmt: skip


def test_gpu_files():
    expect("module_0002.jit_f.thunk_sequence.txt", kind="thunk-sequence", format="txt", module_id=2,
           module_name="jit_f", backend="gpu")  # fmt: skip
    expect("module_0002.jit_f.autotune_results.pbtxt", kind="autotune", format="pbtxt", module_id=2,
           module_name="jit_f", backend="gpu")  # fmt: skip
    expect("module_0002.jit_f.gpu_target_config.pbtxt", kind="target-config", format="pbtxt", module_id=2,
           module_name="jit_f", backend="gpu")  # fmt: skip
    expect("module_0002.jit_f.ptx", kind="gpu-artifact", format="ptx", module_id=2, module_name="jit_f",
           backend="gpu", pipeline="ptx")  # fmt: skip
    # with parallel compilation XLA splits the LLVM module and numbers the shards
    expect("module_0002.jit_f.1.ptx", kind="gpu-artifact", format="ptx", module_id=2, module_name="jit_f",
           backend="gpu", pipeline="ptx", artifact="1")  # fmt: skip
    expect("module_0002.jit_f.gemm_fusion.3.ttir.txt", kind="gpu-artifact", format="mlir", module_id=2,
           module_name="jit_f", backend="gpu", pipeline="ttir", artifact="gemm_fusion.3")  # fmt: skip
    expect("module_0002.jit_f.ir-no-opt.ll", kind="codegen", format="ll", module_id=2, module_name="jit_f",
           pipeline="ir-no-opt")  # fmt: skip
    expect("module_0002.jit_f.ir-with-opt.1.ll", kind="codegen", format="ll", module_id=2, module_name="jit_f",
           pipeline="ir-with-opt", artifact="1")  # fmt: skip


def test_pjrt_compile_input_folders():
    expect("jit_f_1732212345123/module.mlir", kind="pjrt-compile-input", format="mlir", module_name="jit_f",
           timestamp_us=1732212345123000, artifact="module.mlir")  # fmt: skip
    expect("jit_f_1732212345123/compile_options.pb", kind="pjrt-compile-input", format="pb", module_name="jit_f",
           timestamp_us=1732212345123000, artifact="compile_options.pb")  # fmt: skip
    expect("unknown_module_1732212345123/topology.pb", kind="pjrt-compile-input", format="pb",
           timestamp_us=1732212345123000, artifact="topology.pb")  # fmt: skip


def test_torch_xla_and_poplar_files():
    expect("torch_xla/save_tensors.txt.0", kind="torch-xla", format="txt", target="xla:0", artifact="save_tensors.txt")
    expect("torch_xla/save_tensors.txt", kind="torch-xla", format="txt", artifact="save_tensors.txt")
    expect("poplar/profile.pop", kind="poplar-report", format="pop")
    expect("poplar/training/archive.a", kind="poplar-report", format="a", artifact="training")
    expect("tf_graphs/encapsulate_subgraphs_after.mlir", kind="tf-graph", format="mlir",
           artifact="encapsulate_subgraphs_after")  # fmt: skip


def test_paths_keep_their_folders_and_undecodable_names_are_unknown():
    expect("dump/module_0003.before_optimizations.txt", kind="hlo", format="text", module_id=3,
           stage="before_optimizations")  # fmt: skip
    for path in ["", "README", "module_0004", "module_0004.jit_f.bogus", "tf_graphs/", "notes.txt"]:
        d = decode_dump_name(path)
        assert d.kind == "unknown" and d.path == path


def test_describe_explains_each_field():
    d = decode_dump_name("module_0006.jit_f.0012.cpu.after_fusion.before_fusion-wrapper.txt")
    assert d.describe() == [
        ("kind", "pass: the HLO module as one pass left it"),
        ("format", "text: HLO text"),
        ("module id", "6 (module_0006; unique within one process only)"),
        ("module name", "jit_f"),
        ("stage", "after the pass 'fusion', before 'fusion-wrapper' (step 12 of pipeline 'cpu')"),
    ]
    words = dict(decode_dump_name("1624325116260738.module_0065.jit_f.sm_8.0_gpu_after_optimizations.txt").describe())
    assert words["timestamp"].endswith("(2021-06-22 01:25:16 UTC)")
    assert words["backend"] == "gpu (target sm_8.0)"
    words = dict(decode_dump_name("module_0001.0001.IPU.after_pipeline-start.before_pipeline-end.dot").describe())
    assert words["stage"] == "at the start of the pipeline, at its end (step 1 of pipeline 'IPU')"
    assert dict(decode_dump_name("module_0002.jit_f.1.ptx").describe())["LLVM module shard"] == "1"
    assert decode_dump_name("module_0002.jit_f.1.ptx").to_dict()["artifact"] == "1"


# ---- (c) garbage never raises ---------------------------------------------------------------

TOKENS = st.sampled_from([
    "module_", "0001", "-1", "42", ".", "/", "_", "-", "jit_f", "after_", "before_", "pipeline-start", "cl_7",
    "before_optimizations", "cpu_after_optimizations", "sm_8.0_gpu_after_optimizations", "after_optimizations",
    "-buffer-assignment", ".txt", ".hlo.pb", ".gz", ".dot", ".html", "top_level", "snapshot", "execution_0001",
    "hlo_snapshot", "obj-file", "ir-no-opt", ".ll", ".o", "-pre-optimization", ".mlir", "ptx", "ttir", "tf_graphs/",
    "jax_ir/", "torch_xla/", "poplar/", "jax_ir0001_", "jax_000001_", "module.mlir", "1732212345123", "\\", " ",
    "é", "\x00", "pid_7", "obj-file.", ".obj-file..o", "flagfile", "tpu_comp_env", "_before_buffer_assignment",
    "SyncTensorsGraph", "ir-with-opt", "thunk_sequence_after_thunk_passes",
])  # fmt: skip


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, database=None)
@given(st.text())
def test_random_text_never_raises(text):
    d = decode_dump_name(text)
    assert d.path == text and d.kind in KINDS


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, database=None)
@given(st.lists(TOKENS, max_size=24).map("".join))
def test_name_shaped_garbage_never_raises(text):
    d = decode_dump_name(text)
    assert d.path == text and d.kind in KINDS
    json.dumps(d.to_dict())
    d.describe()


def test_long_names_decode_quickly():
    started = time.process_time()  # CPU time: a loaded machine does not inflate it; quadratic work would take minutes
    for path in ["module_0001." + "0001.a." * 3000 + "txt", "module_0001." + "a" * 50000 + ".after_",
                 "tf_graphs/" + "_1" * 20000, "jax_ir/jax_ir0001_" + "_" * 20000 + ".mlir",
                 "module_x" + ".pid_1" * 10000 + ".execution_", "module_0001." + "obj-file." * 5000 + "x",
                 "module_0001." + "obj-file." * 5000 + "x.o", "module_0001." + "a." * 20000 + "ir-no-opt.o"]:  # fmt: skip
        decode_dump_name(path)
    assert time.process_time() - started < 10


@pytest.mark.parametrize(
    ("name", "kind", "fmt", "holds"),
    [
        ("module_0001.jit_f.snapshot.0.pb", "snapshot", "pb", "snapshot"),
        ("module_0001.jit_f.snapshot.-7.pb.gz", "snapshot", "pb.gz", "snapshot"),  # a negative snapshot number
        ("module_0003.jit_f.execution_2.hlo_snapshot.pb.gz", "snapshot", "pb.gz", "snapshot"),
        ("module_cluster_1.execution_0.hlo_snapshot.pb.gz", "snapshot", "pb.gz", "snapshot"),  # TF's, gzipped
        ("module_0001.jit_f.execution_1.hlo_unoptimized_snapshot.txt", "snapshot", "pbtxt", "unoptimized"),
        ("module_0001.jit_f.before_optimizations.txt", "hlo", "text", None),
        ("module_0001.jit_snapshot.before_optimizations.txt", "hlo", "text", None),  # a module named snapshot
    ],
)
def test_one_test_of_a_snapshots_name_agrees_with_the_decoder(name, kind, fmt, holds):
    """names, choose, the runners' command lines and the worker all ask snapshot_file: they cannot disagree."""
    from xlarun.hlo.names import snapshot_file
    from xlarun.replay.runner_argv import is_snapshot

    decoded = decode_dump_name(name)
    assert (decoded.kind, decoded.format, snapshot_file(name)) == (kind, fmt, holds)
    assert is_snapshot(name) is (holds == "snapshot")


def test_an_extracts_snapshot_is_a_snapshot_by_name():
    """xlarun extract writes OUTPUT.snapshot.pb: the runners must be told it is one (was read as HLO)."""
    from xlarun.hlo.names import snapshot_file
    from xlarun.replay.runner_argv import input_format

    assert snapshot_file("/tmp/out/mul.2.snapshot.pb") == "snapshot"
    assert input_format("hlo_runner_main", "/tmp/out/mul.2.snapshot.pb") == "snapshot_proto_binary"  # was proto_binary
