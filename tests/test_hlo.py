"""Tests for xlarun.hlo: the HLO text parser and module summary, on real dumps in tests/fixtures/hlo."""

from __future__ import annotations

import gzip
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlarun.errors import InputError
from xlarun.hlo import parse_hlo_text, read_hlo_file, scan_hlo_text, strip_layouts, unquote

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
PROGRAMS = FIXTURES / "programs.py"


def fixture(pattern: str) -> Path:
    (path,) = FIXTURES.glob(pattern)
    return path


def program_line(number: int) -> str:
    return PROGRAMS.read_text().splitlines()[number - 1]


# --- JAX MLP training step ------------------------------------------------------------------------


def test_jax_mlp_before_optimizations_summary():
    module = read_hlo_file(fixture("mlp/*.before_optimizations.txt"))
    assert module.name == "jit_train_step"
    assert module.entry_computation == "main.6"
    assert len(module.computations) == 6
    assert module.instruction_count() == 80
    assert sum(1 for _ in module.instructions()) == 80
    histogram = module.opcode_histogram()
    assert histogram["parameter"] == 16
    assert histogram["dot"] == 5
    assert histogram["tanh"] == 1
    assert histogram["reduce"] == 5
    assert next(iter(histogram)) == "parameter"  # most frequent first
    assert module.entry_signature == (
        "(f32[16,32], f32[32], f32[32,4], f32[4], f32[8,16], f32[8,4]) -> (f32[16,32], f32[32], f32[32,4], f32[4], f32[])"
    )
    assert not module.has_elided_constants()
    assert module.parsed_from == "text"


def test_jax_metadata_resolves_stack_frames_to_the_users_line():
    module = read_hlo_file(fixture("mlp/*.before_optimizations.txt"))
    tanh = module.find_instruction("%tanh.1")
    assert tanh.opcode == "tanh"
    assert tanh.shape == "f32[8,32]{1,0}"
    assert tanh.operands == ["add.11"]
    assert tanh.op_name == "jit(train_step)/jvp()/tanh"
    assert tanh.op_type is None
    assert tanh.stack_frame_id == 10
    assert tanh.source_file == "/tmp/xlarun-fixtures/src/programs.py"
    assert tanh.source_line == 21
    assert "jnp.tanh(x @ w1 + b1)" in program_line(tanh.source_line)


def test_jax_mlp_after_optimizations_fusions():
    module = read_hlo_file(fixture("mlp/*.cpu_after_optimizations.txt"))
    assert module.header_attributes["is_scheduled"] == "true"
    assert module.instruction_count() == 106
    assert len(module.computations) == 15
    assert module.opcode_histogram()["fusion"] == 11
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    for fusion in fusions:
        (callee,) = fusion.called_computations
        assert module.computations[callee].is_fusion
        assert fusion.attributes["kind"] in ("kLoop", "kOutput", "kInput", "kCustom")
    ynn = [f for f in fusions if f.attributes["kind"] == "kCustom"]
    assert ynn and ynn[0].attributes["backend_config"] == (
        '{"outer_dimension_partitions":[],"fusion_config":{"kind":"__ynn_fusion"}}'
    )


# --- fusion-heavy after-optimizations module with while, cond, scatter, gather, bf16/s8/pred -------


def test_after_optimizations_control_flow_and_fusions():
    module = read_hlo_file(fixture("misc/*.cpu_after_optimizations.txt"))
    assert module.instruction_count() == 130
    assert len(module.computations) == 23
    histogram = module.opcode_histogram()
    assert (histogram["fusion"], histogram["parameter"], histogram["while"], histogram["conditional"]) == (13, 40, 1, 1)
    assert (histogram["scatter"], histogram["gather"], histogram["reduce"]) == (1, 1, 3)
    assert module.entry_signature == (
        "(f32[8,4], s32[2], f32[2,4], pred[], bf16[4], s8[6]) -> (f32[2,4], f32[4], f32[], s32[], f32[4])"
    )

    loop = module.find_instruction("while.4")
    assert loop.is_root and loop.computation == "while.3_computation"
    assert loop.called_computations == ["region_1.3.clone.clone", "region_0.2.clone.clone.clone"]
    assert loop.attributes["condition"] == "%region_1.3.clone.clone"
    assert loop.attributes["backend_config"] == (
        '{"known_trip_count":{"n":"5"},"known_init_step":{"init":"0","step":"1"},'
        '"known_induction_variable":{"tuple_index":"0"},"dynamic_variables":[]}'
    )
    assert loop.source_line == 34 and "fori_loop" in program_line(34)

    cond = module.find_instruction("cond.1.clone")
    assert cond.operands == ["wrapped_convert", "tuple.6", "tuple.6"]
    assert cond.called_computations == ["region_2.4", "region_3.5"]
    assert cond.shape == "(f32[8,4]{1,0})"
    assert "lax.cond" in program_line(cond.source_line)

    entry = module.entry
    assert entry.is_entry and not entry.is_fusion
    assert [p.name for p in entry.parameters] == ["x.1", "idx.1", "upd.1", "flag.1", "h.1", "q.1"]
    assert [p.parameter_number for p in entry.parameters] == list(range(6))
    assert entry.root == "tuple.5"
    assert module.computations["wrapped_scatter_computation"].is_fusion  # fused by use, not by name
    assert not module.computations["region_4.6"].is_fusion  # the scatter's to_apply
    call = module.find_instruction("call")
    assert call.attributes["frontend_attributes"] == '{xla_cpu_small_call="true"}'
    assert module.find_instruction("constant.25").literal == "1.5"


# --- TensorFlow ----------------------------------------------------------------------------------


def test_tensorflow_module():
    module = read_hlo_file(fixture("tf/*.before_optimizations.txt"))
    assert module.name.startswith("a_inference_f_20__XlaMustCompile_true_config_proto_") and module.name.endswith("_.3")
    assert module.entry_computation == module.name  # TF names the entry computation like the module
    assert module.instruction_count() == 31
    assert module.opcode_histogram()["convert"] == 6
    assert module.entry_signature == "(f32[4,8], f32[8,3]) -> (f32[4], f32[])"
    assert module.header_attributes["alias_passthrough_params"] == "true"
    matmul = module.find_instruction("MatMul.2")
    assert (matmul.opcode, matmul.op_type, matmul.op_name) == ("dot", "MatMul", "MatMul")
    # TF records its own frame, not the user's
    assert matmul.source_file.endswith("tensorflow/python/framework/ops.py") and matmul.source_line == 1221
    assert matmul.attributes["frontend_attributes"] == '{grad_x="false",grad_y="false"}'
    arg = module.find_instruction("arg0.1")
    assert arg.attributes["parameter_replication"] == "{false}" and arg.op_name == "XLA_Args"
    after = read_hlo_file(fixture("tf/*.cpu_after_optimizations.txt"))
    assert after.instruction_count() == 29 and after.opcode_histogram()["fusion"] == 2


# --- constants elided as {...} -------------------------------------------------------------------


def test_elided_constant_is_flagged():
    module = read_hlo_file(fixture("lookup_elided/*.before_optimizations.txt"))
    assert module.has_elided_constants()
    table = module.find_instruction("constant.18")
    assert (table.shape, table.literal, table.has_elided_constant) == ("f32[200]{0}", "{...}", True)
    assert [i.name for i in module.instructions() if i.has_elided_constant] == ["constant.18"]
    small = module.find_instruction("constant.13")
    assert (small.literal, small.has_elided_constant) == ("{199}", False)
    assert read_hlo_file(fixture("lookup_elided/*.cpu_after_optimizations.txt")).has_elided_constants()


def test_large_constants_dump_is_not_elided():
    module = read_hlo_file(fixture("lookup_large/*.before_optimizations.txt"))
    assert not module.has_elided_constants()
    table = module.find_instruction("constant.18")
    assert table.literal.startswith("{-1, -0.970151305, ")
    assert table.literal.count(",") == 199
    elided = read_hlo_file(fixture("lookup_elided/*.before_optimizations.txt"))
    assert module.instruction_count() == elided.instruction_count() == 40
    assert module.fingerprint() != elided.fingerprint()  # the literal is part of the fingerprint


def test_missing_stack_frame_leaves_source_empty():
    text = SMALL.replace(
        'metadata={op_name="x" source_file="/home/me/a.py" source_line=3}', 'metadata={op_name="x" stack_frame_id=7}'
    )
    x = parse_hlo_text(text).find_instruction("x")
    assert (x.op_name, x.stack_frame_id, x.source_file, x.source_line) == ("x", 7, None, None)


# --- sharding, custom calls, escaped strings ------------------------------------------------------


def test_sharding_custom_calls_and_escaped_strings():
    module = read_hlo_file(fixture("sharded/*.before_optimizations.txt"))
    assert module.header_attributes["num_partitions"] == "2"
    assert module.header_attributes["frontend_attributes"] == '{xla.sdy.meshes={mesh = #sdy.mesh<["x"=2]>}}'
    constraint = module.find_instruction("sharding_constraint.1")
    assert constraint.opcode == "custom-call"
    assert unquote(constraint.attributes["custom_call_target"]) == "Sharding"
    assert constraint.attributes["sharding"] == "{devices=[2,1]<=[2]}"
    assert constraint.attributes["frontend_attributes"] == (
        '{xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{\\"x\\"}, {}]>]>"}'
    )
    cholesky = module.find_instruction("cholesky.9")
    assert cholesky.attributes["output_to_operand_aliasing"] == "{{0}: (0, {})}"
    assert cholesky.attributes["api_version"] == "API_VERSION_TYPED_FFI"
    # a computation and an instruction may share a name
    assert "sort.3" in module.computations and module.find_instruction("sort.3").opcode == "parameter"

    after = read_hlo_file(fixture("sharded/*.cpu_after_optimizations.txt"))
    assert after.entry_computation == "main.2_spmd"
    assert after.entry_signature == "(f32[2,4], f32[6]) -> (f32[4,4], f32[6], f32[2])"
    assert after.find_instruction("param").attributes["sharding"] == "{devices=[2,1]<=[2]}"
    topk = after.find_instruction("custom-call")
    assert topk.called_computations == ["compare-greater-than.1.clone"]
    assert after.find_instruction("cholesky.27").attributes["backend_config"] == "{uplo = 76 : ui8}"


def test_attributes_after_one_that_needs_the_bracket_walk_are_all_read():
    """The one-step attribute and instruction patterns hand over to the bracket walk and back."""
    text = (
        "HloModule m, is_scheduled=true, entry_computation_layout={(f32[2]{0}, /*index=1*/f32[2]{0})->f32[2]{0}}, "
        "allow_spmd_sharding_propagation_to_output={true}\n\n"
        "ENTRY %main (a: f32[2], b: f32[2]) -> f32[2] {\n"
        "  %a = f32[2]{0} parameter(0)\n"
        "  %b = f32[2]{0} parameter(1)\n"
        '  %t = (f32[2]{0}, f32[2]{0}) tuple(f32[2]{0} %a, /*index=1*/f32[2]{0} %b), backend_config={"x":{"y":1}}, '
        'metadata={op_name="jit(f)/t" source_line=3}\n'
        '  ROOT %s = f32[2]{0} add(%a, %b), sharding={replicated}, metadata={op_name="jit(f)/add"}\n'
        "}\n"
    )
    module = parse_hlo_text(text)
    assert set(module.header_attributes) == {
        "is_scheduled",
        "entry_computation_layout",
        "allow_spmd_sharding_propagation_to_output",
    }
    assert module.entry_signature == "(f32[2], f32[2]) -> f32[2]"
    t, s = module.find_instruction("t"), module.find_instruction("s")
    assert (
        t.operands == ["a", "b"]
        and t.attributes["backend_config"] == '{"x":{"y":1}}'
        and t.op_name == "jit(f)/t"
        and t.source_line == 3
    )
    assert (
        s.operands == ["a", "b"]
        and s.attributes == {"sharding": "{replicated}", "metadata": '{op_name="jit(f)/add"}'}
        and s.is_root
    )


# --- fingerprint ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["before_optimizations", "cpu_after_optimizations"])
def test_fingerprint_is_stable_across_processes_module_ids_and_paths(stage):
    here = fixture(f"fp/*.{stage}.txt")
    elsewhere = fixture(f"fp_elsewhere/*.{stage}.txt")
    assert here.name.startswith("module_0004.") and elsewhere.name.startswith("module_0012.")
    a, b = read_hlo_file(here), read_hlo_file(elsewhere)
    tanh_a, tanh_b = (next(i for i in m.instructions() if i.opcode == "tanh") for m in (a, b))
    assert tanh_a.source_file == "/tmp/xlarun-fixtures/src/programs.py"
    assert tanh_b.source_file == "/tmp/xlarun-fixtures/elsewhere/app/programs.py"
    assert here.read_text() != elsewhere.read_text()
    assert a.fingerprint() == b.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", a.fingerprint())


def test_fingerprint_changes_with_a_constant():
    a = read_hlo_file(fixture("fp/*.before_optimizations.txt"))
    changed = read_hlo_file(fixture("fp_changed/*.before_optimizations.txt"))
    assert a.find_instruction("constant.2").literal == "3"
    assert changed.find_instruction("constant.2").literal == "4"
    assert a.fingerprint() != changed.fingerprint()


SMALL = """HloModule m.7, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

%add_f (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main.3 (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0), metadata={op_name="x" source_file="/home/me/a.py" source_line=3}
  %y = f32[4]{0} parameter(1)
  %c = f32[] constant(2)
  %b = f32[4]{0} broadcast(%c), dimensions={}
  %m = f32[4]{0} multiply(%x, %b), metadata={op_name="jit(f)/mul" source_file="/home/me/a.py" source_line=4}
  ROOT %r = f32[4]{0} subtract(%m, %y)
}
"""


def renamed(text: str) -> str:
    """Every module, computation and instruction name changed, metadata moved to another path."""
    text = re.sub(r"%([\w.]+)", r"%\1_run2", text).replace("HloModule m.7", "HloModule other.99")
    text = re.sub(r"\((\w+): ", r"(\1_run2: ", text)
    return text.replace("/home/me/a.py", "/app/a.py").replace("source_line=4", "source_line=40")


@pytest.mark.parametrize(
    "change",
    [
        ("constant(2)", "constant(3)"),
        ("multiply(%x, %b)", "multiply(%b, %x)"),  # wiring
        ("subtract(%m, %y)", "add(%m, %y)"),  # opcode
        ("%m = f32[4]{0}", "%m = f16[4]{0}"),  # shape
        ("dimensions={}", "dimensions={0}"),  # attribute
        ("ROOT %s = f32[] add(%a, %b)", "ROOT %s = f32[] maximum(%a, %b)"),  # a called computation
    ],
)
def test_fingerprint_ignores_names_and_metadata_but_not_semantics(change):
    base = parse_hlo_text(SMALL)
    assert parse_hlo_text(renamed(SMALL)).fingerprint() == base.fingerprint()
    assert parse_hlo_text(SMALL.replace(*change)).fingerprint() != base.fingerprint()


def test_canonical_form_uses_positional_names():
    form = parse_hlo_text(SMALL).canonical_form()
    assert "main" not in form and "%" not in form and "source" not in form
    assert "  ROOT v8 = f32[4]{0} subtract(v7, v4)" in form.splitlines()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax")
def test_fingerprint_live_two_processes(tmp_path):
    """Dump one function from two processes (different module ids and script paths) and compare."""
    fingerprints = []
    for run, warmup in (("a", "0"), ("b", "2")):
        script_dir = tmp_path / run / "scripts"
        script_dir.mkdir(parents=True)
        script = script_dir / "programs.py"
        script.write_text(PROGRAMS.read_text())
        dump = tmp_path / run / "dump"
        env = dict(
            os.environ,
            JAX_ENABLE_COMPILATION_CACHE="false",
            JAX_PLATFORMS="cpu",
            XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text",
        )
        subprocess.run(
            [sys.executable, str(script), "fp", "--warmup", warmup], env=env, check=True, capture_output=True, timeout=300
        )
        (text,) = dump.glob("module_*.jit_f.before_optimizations.txt")
        fingerprints.append((text.name.split(".")[0], read_hlo_file(text).fingerprint()))
    (id_a, fp_a), (id_b, fp_b) = fingerprints
    assert id_a != id_b
    assert fp_a == fp_b


# --- syntax seen outside CPU dumps and in hand-written HLO ---------------------------------------

HANDWRITTEN = r"""// a comment line
HloModule tpu_like, entry_computation_layout={(bf16[8,128]{1,0:T(8,128)(2,1)}, s32[])->(bf16[8,128]{1,0:T(8,128)(2,1)}, /*index=1*/s32[])}

fused_add {
  p0 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0)
  p1 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT a = bf16[8,128]{1,0:T(8,128)(2,1)} add(p0, p1)
}

main {
  x = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0), sharding={devices=[2,1]0,1}
  n = s32[] parameter(1)
  f = bf16[8,128]{1,0:T(8,128)(2,1)} fusion(bf16[8,128]{1,0:T(8,128)(2,1)} %x, %x), kind=kLoop,
      calls=fused_add, backend_config="{\"flag\": \"a,b}\"}"
  cc = (bf16[8,128], s32[]) custom-call(f, n), custom_call_target="my \"quoted\", target", metadata={op_name="a, \"b\" /* not a comment */"}
  t = (bf16[8,128]{1,0:T(8,128)(2,1)}, s32[], s32[], s32[], s32[], /*index=5*/s32[]) tuple(f, n, n, n, n, /*index=5*/n)
  g = s32[] get-tuple-element(t), index=5 /* the last one */
  tuple.1 = (bf16[8,128]{1,0:T(8,128)(2,1)}, s32[]) tuple(f, g)
}
"""


def test_handwritten_and_tpu_syntax():
    module = parse_hlo_text(HANDWRITTEN)
    assert module.entry_computation == "main"  # no ENTRY keyword: the last computation
    assert module.entry.root == "tuple.1"  # no ROOT: the last instruction
    assert module.computations["fused_add"].is_fusion
    assert module.entry_signature == "(bf16[8,128], s32[]) -> (bf16[8,128], s32[])"
    f = module.find_instruction("f")
    assert f.shape == "bf16[8,128]{1,0:T(8,128)(2,1)}"
    assert f.operands == ["x", "x"]
    assert f.called_computations == ["fused_add"]
    assert f.attributes["backend_config"] == r'"{\"flag\": \"a,b}\"}"'
    assert unquote(f.attributes["backend_config"]) == '{"flag": "a,b}"}'
    cc = module.find_instruction("cc")
    assert unquote(cc.attributes["custom_call_target"]) == 'my "quoted", target'
    assert cc.op_name == 'a, "b" /* not a comment */'
    t = module.find_instruction("t")
    assert t.shape == "(bf16[8,128]{1,0:T(8,128)(2,1)}, s32[], s32[], s32[], s32[], s32[])"
    assert t.operands == ["f", "n", "n", "n", "n", "n"]
    assert module.find_instruction("x").attributes["sharding"] == "{devices=[2,1]0,1}"
    assert module.find_instruction("g").attributes == {"index": "5"}
    assert module.instruction_count() == 10


def test_unquote_and_strip_layouts():
    assert unquote(r'"caf\303\251 \"x\" \\ \n"') == 'café "x" \\ \n'
    assert strip_layouts("(f32[8,4]{1,0}, /*index=1*/s32[]{:T(128)}, pred[])") == "(f32[8,4], s32[], pred[])"


# --- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("HloModule m\n\nENTRY %e () -> f32[] {\n  %c = f32[] constant(1)\n", "line 4: computation %e is not closed"),
        ("HloModule m\n\nENTRY %e () -> f32[] {\n  %c = f32[] constant(1\n}\n", "line 4: unbalanced"),
        ("HloModule m\nENTRY %e () -> f32[] {\n  %c = constant(1)\n}\n", "line 3: expected a shape"),
        ("HloModule m\nENTRY %e () -> f32[] {\n  %c = f32[] \n}\n", "line 3: expected an opcode"),
        ("HloModule m\nENTRY %e () -> f32[] {\n  garbage here\n}\n", "line 3: expected '%name = shape"),
        ("HloModule m\n%x = f32[] constant(1)\n", "line 2: unexpected text outside a computation"),
        ("BufferAssignment:\nallocation 0: size 4\n", "line 1: expected 'HloModule <name>'"),
        ('HloModule m\nENTRY %e () -> f32[] {\n  %c = f32[] constant(1), metadata={op_name="x}\n}\n', "line 3"),
        ("HloModule m\n\nHloModule n\n", "line 3: a second HloModule"),
    ],
)
def test_malformed_text_names_the_line(text, message):
    with pytest.raises(InputError) as caught:
        parse_hlo_text(text)
    assert message in caught.value.message
    assert caught.value.hint


def test_read_hlo_file_by_extension(tmp_path):
    source = fixture("fp/*.before_optimizations.txt")
    expected = read_hlo_file(source).fingerprint()
    as_hlo = tmp_path / "module.hlo"
    as_hlo.write_bytes(source.read_bytes())
    assert read_hlo_file(as_hlo).fingerprint() == expected
    zipped = tmp_path / "module.txt.gz"
    zipped.write_bytes(gzip.compress(source.read_bytes()))
    assert read_hlo_file(zipped).fingerprint() == expected
    unknown = tmp_path / "module.bin"
    unknown.write_bytes(b"\x00\x01")
    with pytest.raises(InputError, match="cannot tell the format"):
        read_hlo_file(unknown)
    with pytest.raises(InputError, match="no such HLO file"):
        read_hlo_file(tmp_path / "missing.txt")
    bad = tmp_path / "module_0001.x.before_optimizations.txt"
    bad.write_text("HloModule x\nENTRY %e () -> f32[] {\n  %c = f32[] bogus\n}\n")
    with pytest.raises(InputError, match=r"module_0001.x.before_optimizations.txt: HLO text line 3"):
        read_hlo_file(bad)


# --- speed --------------------------------------------------------------------------------------------


def synthetic_module(target_bytes: int) -> tuple[str, int]:
    """A module of many fused computations written the way XLA prints after-optimization text."""
    parts = ["HloModule big, is_scheduled=true, entry_computation_layout={(f32[1024,512]{1,0})->f32[1024,512]{1,0}}\n"]
    entry = ["ENTRY %main (p: f32[1024,512]) -> f32[1024,512] {", "  %p = f32[1024,512]{1,0} parameter(0)"]
    size, count, previous, n = len(parts[0]), 1, "p", 0
    while size < target_bytes:
        meta = f'metadata={{op_name="jit(step)/layer_{n}/mul" source_file="/app/model.py" source_line={n % 900 + 1}}}'
        body = (
            f"%fused_computation.{n} (param_0.{n}: f32[1024,512], param_1.{n}: f32[]) -> f32[1024,512] {{\n"
            f"  %param_0.{n} = f32[1024,512]{{1,0}} parameter(0)\n"
            f"  %param_1.{n} = f32[] parameter(1)\n"
            f"  %broadcast.{n} = f32[1024,512]{{1,0}} broadcast(%param_1.{n}), dimensions={{}}, {meta}\n"
            f"  %multiply.{n} = f32[1024,512]{{1,0}} multiply(%param_0.{n}, %broadcast.{n}), {meta}\n"
            f"  ROOT %tanh.{n} = f32[1024,512]{{1,0}} tanh(%multiply.{n}), {meta}\n}}\n\n"
        )
        parts.append(body)
        entry.append(f"  %constant.{n} = f32[] constant({n}.5)")
        entry.append(
            f"  %fusion.{n} = f32[1024,512]{{1,0}} fusion(%{previous}, %constant.{n}), kind=kLoop, "
            f'calls=%fused_computation.{n}, {meta}, backend_config={{"outer_dimension_partitions":["2"],"k":{{"n":"{n}"}}}}'
        )
        previous = f"fusion.{n}"
        size += len(body) + len(entry[-1]) + len(entry[-2])
        count += 7
        n += 1
    entry[-1] = "  ROOT " + entry[-1].lstrip()
    parts.append("\n".join(entry) + "\n}\n")
    return "".join(parts), count


@pytest.mark.slow
def test_parses_a_5_mb_module_quickly(capsys):
    text, count = synthetic_module(5 * 1024 * 1024)
    start = time.perf_counter()
    module = parse_hlo_text(text)
    elapsed = time.perf_counter() - start
    assert module.instruction_count() == count
    assert module.entry.root.startswith("fusion.")
    assert module.opcode_histogram()["fusion"] == (count - 1) // 7
    fingerprint_start = time.perf_counter()
    module.fingerprint()
    fingerprint_elapsed = time.perf_counter() - fingerprint_start
    with capsys.disabled():
        print(
            f"\n[hlo] parsed {len(text) / 1e6:.1f} MB, {count} instructions in {elapsed:.2f} s;"
            f" fingerprint {fingerprint_elapsed:.2f} s"
        )


# --- the summary parse (what the index keeps) -----------------------------------------------------


def _index_view(module):
    """Everything the index and `find` take from a parsed module."""
    return (
        module.instruction_count(),
        module.opcode_histogram(),
        module.entry_signature,
        module.has_elided_constants(),
        [
            (i.name, i.opcode, i.shape, i.is_root, i.op_name, i.op_type, i.source_file, i.source_line, i.parameter_number)
            for i in module.instructions()
        ],
        [(c.name, c.is_entry, c.root, [p.name for p in c.parameters]) for c in module.computations.values()],
    )


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/*.txt")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_summary_parse_reads_what_the_index_keeps_exactly_as_the_full_parse(path):
    text = path.read_text()
    summary, full = parse_hlo_text(text, summary=True), parse_hlo_text(text)
    assert _index_view(summary) == _index_view(full)
    # it did skip the work: array-shaped instructions' operands are left unread (tuple-shaped ones get the full parse)
    read = [i for i in summary.instructions() if i.operands]
    assert all(i.shape.startswith("(") or i.opcode == "constant" for i in read)
    assert len(read) < sum(1 for i in full.instructions() if i.operands)


def test_a_summary_parse_resolves_stack_frames_and_elided_constants():
    text = fixture("lookup_elided/*.cpu_after_optimizations.txt").read_text()
    module = parse_hlo_text(text, summary=True)
    assert module.has_elided_constants()
    sources = {
        (i.source_file, i.source_line)
        for i in parse_hlo_text(fixture("fp/*.before_optimizations.txt").read_text(), summary=True).instructions()
    }
    assert any(f and f.endswith("programs.py") and line for f, line in sources)


def test_a_summary_parse_has_no_fingerprint():
    module = parse_hlo_text(fixture("fp/*.before_optimizations.txt").read_text(), summary=True)
    with pytest.raises(ValueError, match="summary parse"):
        module.fingerprint()


# --- the whole-text scan (the index's facts of text as XLA prints it) ------------------------------


def _facts_by_parse(text: str):
    module = parse_hlo_text(text)
    instructions = list(module.instructions())
    return (
        module.instruction_count(),
        module.opcode_histogram(),
        {i.name for i in instructions},
        {i.op_name for i in instructions if i.op_name},
        {f"{i.source_file}:{i.source_line}" if i.source_line else i.source_file for i in instructions if i.source_file},
        module.has_elided_constants(),
        module.entry_signature,
    )


def _facts_by_scan(facts):
    return (
        facts.instructions,
        dict(facts.opcodes),
        facts.names,
        facts.op_names,
        facts.sources,
        facts.elided_constants,
        facts.entry_signature,
    )


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*/*.txt")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_scan_reads_the_same_facts_as_the_full_parse(path):
    facts = scan_hlo_text(path.read_bytes())
    assert facts is not None  # every fixture is laid out as XLA prints
    expected = _facts_by_parse(path.read_text())
    assert _facts_by_scan(facts)[:2] == expected[:2]  # count and opcode histogram (order aside)
    assert _facts_by_scan(facts) == (*expected[:1], dict(expected[1]), *expected[2:])


def test_the_scan_resolves_stack_frames_and_sees_elided_constants():
    facts = scan_hlo_text(fixture("fp/*.before_optimizations.txt").read_bytes())
    lines = {int(s.rpartition(":")[2]) for s in facts.sources if s.rpartition(":")[0].endswith("programs.py")}
    assert lines and all(program_line(n).strip() for n in lines)  # the user's lines, resolved through StackFrames
    assert scan_hlo_text(fixture("lookup_elided/*.cpu_after_optimizations.txt").read_bytes()).elided_constants
    assert scan_hlo_text(fixture("lookup_elided/*.before_optimizations.txt").read_bytes()).elided_constants
    assert not scan_hlo_text(fixture("lookup_large/*.before_optimizations.txt").read_bytes()).elided_constants


def _damaged(text: str, how: str) -> str:
    lines = text.split("\n")
    if how == "cut short":
        return text[: len(text) * 2 // 3]
    if how == "wrapped line":
        at = next(n for n, line in enumerate(lines) if line.startswith("  ") and ", metadata=" in line)
        head, _sep, tail = lines[at].partition(", metadata=")
        return "\n".join([*lines[:at], head + ",", "      metadata=" + tail, *lines[at + 1 :]])
    if how == "stray line":
        at = next(n for n, line in enumerate(lines) if line == "}")
        return "\n".join([*lines[: at + 1], "garbage here", *lines[at + 1 :]])
    if how == "no entry layout":
        return text.replace("entry_computation_layout=", "renamed_layout=", 1)  # the parse then reads the entry's parameters
    if how == "deep tuple":
        at = next(n for n, line in enumerate(lines) if re.match(r"  %\S+ = f32\[\] ", line))
        lines[at] = lines[at].replace(" = f32[] ", " = ((((f32[])))) ", 1)
        return "\n".join(lines)
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["cut short", "wrapped line", "stray line", "no entry layout", "deep tuple"])
def test_the_scan_declines_text_it_cannot_read_exactly(how):
    text = fixture("mlp/*.cpu_after_optimizations.txt").read_text()
    damaged = _damaged(text, how)
    assert damaged != text
    assert scan_hlo_text(damaged.encode()) is None  # the parse reads it, or says what is wrong
    if how in ("cut short", "stray line"):
        with pytest.raises(InputError, match="HLO text line"):
            parse_hlo_text(damaged)
    else:
        assert parse_hlo_text(damaged).instruction_count() == parse_hlo_text(text).instruction_count()


# --- everything XLA has printed since 2022, and hand-written HLO -------------------------------------


@pytest.mark.parametrize(
    ("name", "instructions", "computations"),
    # XLA's own counts (jaxlib 0.10.2's hlo_module_from_text) of dumps made by tests/fixtures/hlo/old/make_old.py
    [("jax-0.4.30.jit_step.before_optimizations.txt", 52, 6), ("jax-0.5.0.jit_step.cpu_after_optimizations.txt", 45, 7)],
)
def test_old_jax_dumps_closed_by_a_comment_are_read(name, instructions, computations):
    path = FIXTURES / "old" / name
    assert "\n} // " in path.read_text()  # what jax <= 0.5.0 printed after longer computations
    module = read_hlo_file(path)
    assert (module.instruction_count(), len(module.computations)) == (instructions, computations)
    assert module.entry_signature == "(f32[4,8], f32[8,8]) -> (f32[4,8], f32[8])"
    assert module.find_instruction("add.12").source_file.endswith("make_old.py")
    facts = scan_hlo_text(path.read_bytes())  # the index's fast path reads it too, with the same facts
    assert facts is not None and facts.instructions == instructions


def test_computation_closers_and_headings_of_every_era():
    text = (
        "HloModule m, is_scheduled=true\n\n"
        "%add.1 (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %a = f32[] add(f32[] %x, f32[] %y)\n} // add.1\n\n"
        '%side (p: f32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n}, execution_thread="host"\n\n'
        "ENTRY %main.9 (p0: f32[2]) -> f32[] {\n  %p0 = f32[2]{0} parameter(0)\n  %z = f32[] constant(0)\n"
        "  ROOT %r = f32[] reduce(f32[2]{0} %p0, f32[] %z), dimensions={0}, to_apply=%add.1\n} // main.9\n"
    )
    module = parse_hlo_text(text)
    assert (module.entry_computation, module.instruction_count(), len(module.computations)) == ("main.9", 7, 3)
    assert module.entry_signature == "(f32[2]) -> f32[]"
    assert module.header_attributes["is_scheduled"] == "true"


def test_hand_written_module_without_header_that_starts_with_comments():
    text = (
        "// RUN: hlo-opt %s --passes=foo | FileCheck %s\n/* a block\n   comment */\n\n"
        "add {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n  ROOT s = f32[] add(p0, p1)\n}\n"
        "fusion {\n  a = f32[16,784]{0,1} parameter(0)\n  c = f32[] constant(0)\n"
        "  ROOT r = f32[16] reduce(a, c), dimensions={1}, to_apply=add // trailing comment\n}\n"
        "ENTRY main {\n  %p = f32[16,784]{0,1} parameter(0)\n  ROOT f = f32[16] fusion(%p), kind=kInput, calls=fusion\n}\n"
    )
    module = parse_hlo_text(text)
    assert module.name == "module_main"  # as XLA names a module without an HloModule line
    assert (module.instruction_count(), len(module.computations), module.entry_computation) == (8, 3, "main")
    assert module.computations["fusion"].is_fusion
    assert module.entry_signature == "(f32[16,784]) -> f32[16]"
    no_entry = parse_hlo_text("c1 {\n  ROOT a = f32[] constant(1)\n}\nc2 {\n  ROOT b = f32[] constant(2)\n}\n")
    assert no_entry.entry_computation == "c2"  # XLA takes the last computation


def test_wrapped_header_statements_on_one_line_and_wrapped_attributes():
    text = (
        "HloModule m,\n  entry_computation_layout={(f32[2,3]{1,0})->\n    (f32[2,3]{1,0}, s32[])},\n"
        "  allow_spmd_sharding_propagation_to_output={true}\n\n"
        "ENTRY e {\n  p = f32[2,3] parameter(0)\n  b = f32[2,3,4] broadcast(p),\n  dimensions={0,1} c = s32[] constant(7)\n"
        '  ROOT t = (f32[2,3], s32[]) tuple(p,\n      c), frontend_attributes={\n    _xla_a="1",\n    _xla_b="2"}\n}\n'
    )
    for summary in (False, True):
        module = parse_hlo_text(text, summary=summary)
        assert [i.name for i in module.entry.instructions] == ["p", "b", "c", "t"]
        assert module.entry_signature == "(f32[2,3]) -> (f32[2,3], s32[])"
    assert (
        parse_hlo_text(text).find_instruction("t").attributes["frontend_attributes"].replace("\n", "").replace(" ", "")
        == '{_xla_a="1",_xla_b="2"}'
    )
    one_line = parse_hlo_text("HloModule t ENTRY e { ROOT c = f16[] constant(1) }")
    assert (one_line.name, one_line.instruction_count()) == ("t", 1)


def test_operands_written_as_instructions_are_built_as_xla_builds_them():
    text = (
        "HloModule m\n\nENTRY e {\n"
        "  ROOT t = (f32[8,7], s32[], f32[]) tuple(f32[8,7] reshape(f32[1,8,1,7] parameter(0)), s32[] constant(1),\n"
        "      add(f32[] constant(2), f32[] constant(3)))\n}\n"
    )
    module = parse_hlo_text(text)
    assert module.instruction_count() == 7  # as XLA's parser builds them: one per inline operand
    assert [i.opcode for i in module.entry.instructions] == [
        "parameter",
        "reshape",
        "constant",
        "constant",
        "constant",
        "add",
        "tuple",
    ]
    assert module.entry.parameters[0].shape == "f32[1,8,1,7]"
    assert module.entry_signature == "(f32[1,8,1,7]) -> (f32[8,7], s32[], f32[])"
    root = module.find_instruction("t")
    assert root.operands == ["reshape.anon", "constant.anon", "add.anon"]
    assert module.find_instruction("add.anon").operands == ["constant.anon.1", "constant.anon.2"]


def test_tuple_element_operands_of_jax_0_11_build_the_get_tuple_elements_xla_builds():
    # jax 0.11 prints element i of a tuple-shaped %x as the operand %x#i; XLA's parser (jaxlib 0.11.2 counted 159
    # instructions where the text has 156 lines) builds one get-tuple-element per element used, named x_i
    text = (
        "HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}\n\n"
        "f {\n  a = f32[4]{0} parameter(0)\n  n = f32[4]{0} negate(a)\n  ROOT t = (f32[4]{0}, /*index=1*/f32[2]{0}) tuple(n, n)\n}\n\n"
        "ENTRY e {\n  %p = f32[4]{0} parameter(0)\n  %c = (f32[4]{0}, f32[2]{0}) call(%p), to_apply=%f\n"
        "  %x = f32[4]{0} add(%c#0, %c#0)\n  ROOT %y = f32[4]{0} add(%x, %c#0)\n}\n"
    )
    for module in (parse_hlo_text(text), parse_hlo_text(text, summary=True), parse_hlo_text("// a comment first\n" + text)):
        assert module.instruction_count() == 8
        assert [i.name for i in module.entry.instructions] == ["p", "c", "c_0", "x", "y"]
    module = parse_hlo_text(text)
    gte = module.find_instruction("c_0")
    assert (gte.opcode, gte.shape, gte.operands, gte.attributes["index"]) == ("get-tuple-element", "f32[4]{0}", ["c"], "0")
    assert module.find_instruction("x").operands == ["c_0", "c_0"]
    scanned = scan_hlo_text(text.encode())
    assert (scanned.instructions, scanned.opcodes["get-tuple-element"]) == (8, 1) and "c_0" in scanned.names
    # the element a later instruction already has the name of: XLA makes the name unique, the scan leaves it to the parse
    clash = text.replace("%x = f32[4]{0} add(%c#0, %c#0)", "%c_0 = f32[4]{0} add(%c#0, %c#0)").replace("add(%x,", "add(%c_0,")
    assert scan_hlo_text(clash.encode()) is None
    assert parse_hlo_text(clash).instruction_count() == 8


def test_async_start_of_a_plain_op_builds_the_wrapped_computation():
    text = (
        "HloModule m\n\nENTRY e {\n  p = f32[2]{0} parameter(0)\n"
        '  s = ((f32[2]{0}), f32[2]{0}, s32[]) custom-call-start(p), custom_call_target="foo"\n'
        "  ROOT d = f32[2]{0} custom-call-done(s)\n}\n"
    )
    module = parse_hlo_text(text)
    assert list(module.computations) == ["async_wrapped", "e"]  # as XLA's parser adds it
    wrapped = module.computations["async_wrapped"]
    assert [(i.opcode, i.shape) for i in wrapped.instructions] == [("parameter", "f32[2]{0}"), ("custom-call", "f32[2]{0}")]
    assert wrapped.instructions[-1].attributes["custom_call_target"] == '"foo"'
    assert module.instruction_count() == 5
    assert scan_hlo_text(text.encode()) is None  # the scan would count 3: it declines, the parse reads it
    own_ops = parse_hlo_text(text.replace("custom-call-start", "all-gather-start").replace("custom-call-done", "all-gather-done"))
    assert len(own_ops.computations) == 1  # all-gather-start is an opcode of its own


def test_shapes_xla_prints_and_hand_written_ones():
    text = (
        "HloModule m, entry_computation_layout={(f32[8,128]{1,0:T(8,128)S(1)}, s32[<=4]{0}, f32[?,2])->b(f32[2, 4])}\n\n"
        "ENTRY e {\n  a = f32[8,128]{1,0:T(8,128)S(1)} parameter(0), sharding={devices=[2,1]<=[2]}\n"
        "  d = s32[<=4]{0} parameter(1)\n  u = f32[?,2] parameter(2)\n"
        "  g = f32[4,4]{0,1} all-gather(a), channel_id=1, replica_groups=mesh['x'=1,'y'=2] {'y'}, dimensions={1}\n"
        '  ROOT b = b(f32[2,4]) custom-call(), custom_call_target="CreateBuffer", api_version=API_VERSION_TYPED_FFI\n}\n'
    )
    module = parse_hlo_text(text)
    assert module.entry_signature == "(f32[8,128], s32[<=4], f32[?,2]) -> b(f32[2,4])"
    assert module.find_instruction("a").shape == "f32[8,128]{1,0:T(8,128)S(1)}"
    assert module.find_instruction("g").attributes["replica_groups"] == "mesh['x'=1,'y'=2] {'y'}"
    spaced = parse_hlo_text(
        "HloModule m\nENTRY e {\n  p = f32[3, 12288] parameter(0)\n  ROOT b = f32[3, 12288] {1, 0} bitcast(p)\n}\n"
    )
    assert spaced.entry_signature == "(f32[3,12288]) -> f32[3,12288]"


def test_instructions_written_without_a_shape_get_the_shape_xla_infers():
    text = (
        "HloModule m\n\nENTRY e {\n  p = (f32[4,8], s32[]) parameter(0)\n  a = get-tuple-element(p), index=0\n"
        "  t = transpose(a), dimensions={1,0}\n  d = dot(a, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  c = compare(d, d), direction=LT\n  i = get-tuple-element(p), index=1\n  ROOT r = tuple(c, d, negate(i))\n}\n"
    )
    module = parse_hlo_text(text)
    assert module.entry_signature == "((f32[4,8], s32[])) -> (pred[4,4], f32[4,4], s32[])"
    with pytest.raises(InputError, match="line 3: expected a shape"):
        parse_hlo_text("HloModule m\nENTRY e {\n  ROOT c = constant(1)\n}\n")


def test_index_comments_metadata_and_a_computation_written_in_place():
    text = (
        "HloModule m\n\nENTRY main {\n  a = (s32[], s32[]) parameter(0)\n"
        "  ROOT c = s32[] call(a), to_apply={\n    x = (s32[], s32[]) parameter(0)\n"
        '    g0 = s32[] get-tuple-element(x), index=0, metadata={op_name="jit(f)/add" source_file="f.py" source_line=3}\n'
        "    g1 = s32[] get-tuple-element(/*index=0*/x), index=1\n    ROOT s = s32[] add(g0, g1)\n  }\n}\n"
    )
    module = parse_hlo_text(text)
    assert (module.instruction_count(), len(module.computations)) == (6, 2)
    assert module.find_instruction("c").called_computations == ["c.to_apply"]
    assert module.find_instruction("g0").source_file == "f.py" and module.find_instruction("g0").source_line == 3


@pytest.mark.parametrize(
    "text",
    [
        "HloModule m\nENTRY e {\n  ROOT r = f32[] negate(" + "negate(" * 100_000 + "p" + ")" * 100_001 + "\n}\n",
        "HloModule m\nENTRY e {\n  ROOT c = f32[] constant(" + "{" * 100_000 + "\n}\n",
        "HloModule m\n" + "ENTRY e {\n" * 20_000,
        "x = " * 50_000,
        'HloModule m\nENTRY e {\n  a = f32[] parameter(0), metadata={op_name="unterminated\n}\n',
    ],
    ids=["nested operands", "unbalanced literal", "headers only", "no module", "open string"],
)
def test_what_cannot_be_read_is_refused_quickly_with_an_input_error(text):
    started = time.process_time()  # CPU time: a loaded machine does not inflate it; quadratic work would take hours
    with pytest.raises(InputError, match="HLO text line"):
        parse_hlo_text(text)
    assert time.process_time() - started < 30


def test_deep_tuple_shapes_are_read_without_recursion():
    text = "HloModule m\nENTRY e {\n  ROOT p = " + "(" * 100_000 + "f32[]" + ")" * 100_000 + " parameter(0)\n}\n"
    started = time.process_time()  # CPU time, as above
    assert parse_hlo_text(text).instruction_count() == 1
    with pytest.raises(InputError, match="nested more than"):  # the grammar reader, like XLA's, has a limit
        parse_hlo_text(text.replace("HloModule m\n", ""))
    assert time.process_time() - started < 30


def test_one_loader_reads_text_that_starts_with_comments_everywhere(tmp_path):
    from xlarun.hlo import load_hlo, looks_like_hlo_text
    from xlarun.render import RenderOptions, content_kind, graph_of
    from xlarun.replay.sources import TEXT, load_source

    text = fixture("fp/*.before_optimizations.txt").read_text()
    commented = "// RUN: hlo-opt %s\n/* from XLA's tests */\n" + text
    data = commented.encode()
    assert looks_like_hlo_text(data) and looks_like_hlo_text(gzip.compress(data)) is False
    expected = parse_hlo_text(text).fingerprint()
    assert load_hlo(data).fingerprint() == load_hlo(gzip.compress(data), "m.txt.gz").fingerprint() == expected
    proto = fixture("fp/*.before_optimizations.hlo.pb").read_bytes()
    assert (
        load_hlo(proto).instruction_count()
        == load_hlo(gzip.compress(proto)).instruction_count()
        == parse_hlo_text(text).instruction_count()
    )
    assert content_kind("module.txt", data) == "hlo-text"
    assert graph_of(data, "module.txt", RenderOptions()).nodes
    path = tmp_path / "module_0001.f.before_optimizations.txt"
    path.write_bytes(data)
    source = load_source(path)
    assert source.file_format == TEXT and source.module_name == "jit_f"
    with pytest.raises(InputError, match="text but not an HLO module"):
        load_hlo(b"BufferAssignment:\nallocation 0: size 4\n", "x.log")
