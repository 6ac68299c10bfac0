"""Tests for xlarun.hlo.proto: summaries of binary HloProto / HloModuleProto / HloSnapshot files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from xlarun.errors import InputError
from xlarun.hlo import read_hlo_file
from xlarun.hlo.proto import classify_proto, find_module_proto, proto_holds, shape_text, summarize_hlo_proto
from xlarun.hlo.protowire import fields_by_number

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
PAIRS = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.glob("*/*.hlo.pb"))


def fixture(pattern: str) -> Path:
    (path,) = FIXTURES.glob(pattern)
    return path


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint for ints, length-delimited for bytes."""
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_fixture_pairs_exist():
    assert len(PAIRS) == 11


@pytest.mark.parametrize("proto_path", PAIRS)
def test_text_and_proto_summaries_agree(proto_path):
    proto = read_hlo_file(FIXTURES / proto_path)
    text = read_hlo_file(FIXTURES / proto_path.replace(".hlo.pb", ".txt"))
    assert proto.parsed_from == "proto"
    assert proto.name == text.name
    assert proto.entry_computation == text.entry_computation
    assert proto.instruction_count() == text.instruction_count()
    assert proto.opcode_histogram() == text.opcode_histogram()
    assert proto.entry_signature == text.entry_signature
    assert sorted(proto.computations) == sorted(text.computations)  # the proto orders them differently
    for name, computation in text.computations.items():
        other = proto.computations[name]
        assert (other.is_entry, other.is_fusion, other.root) == (computation.is_entry, computation.is_fusion, computation.root)
        assert [p.name for p in other.parameters] == [p.name for p in computation.parameters]
    by_name = {i.name: i for i in proto.instructions()}
    for instruction in text.instructions():
        twin = by_name[instruction.name]
        assert (twin.opcode, twin.shape, twin.operands, twin.is_root) == (
            instruction.opcode,
            instruction.shape,
            instruction.operands,
            instruction.is_root,
        )
        assert twin.called_computations == instruction.called_computations
        assert (twin.op_name, twin.op_type, twin.source_file, twin.source_line) == (
            instruction.op_name,
            instruction.op_type,
            instruction.source_file,
            instruction.source_line,
        )
        for key in (
            "kind",
            "calls",
            "to_apply",
            "condition",
            "body",
            "branch_computations",
            "index",
            "custom_call_target",
            "direction",
            "backend_config",
            "iota_dimension",
        ):
            assert twin.attributes.get(key) == instruction.attributes.get(key), (instruction.name, key)


def test_proto_instruction_details():
    module = read_hlo_file(fixture("misc/*.cpu_after_optimizations.hlo.pb"))
    assert module.instruction_count() == 130
    assert module.opcode_histogram()["fusion"] == 13
    loop = module.find_instruction("while.4")
    # stored as (body, condition) in the proto, reported in the text's order
    assert loop.called_computations == ["region_1.3.clone.clone", "region_0.2.clone.clone.clone"]
    assert loop.attributes["body"] == "%region_0.2.clone.clone.clone"
    assert loop.op_name == "jit(misc)/while" and loop.source_line == 34
    gte = module.find_instruction("while.13")
    assert gte.attributes["index"] == "1" and gte.operands == ["call"]
    assert module.find_instruction("q.1").shape == "s8[6]{0}"
    assert module.find_instruction("flag.1").parameter_number == 3
    assert module.computations["fused_computation.6"].is_fusion


def test_tensorflow_proto_keeps_op_type_and_source():
    module = read_hlo_file(fixture("tf/*.before_optimizations.hlo.pb"))
    matmul = module.find_instruction("MatMul.2")
    assert (matmul.op_type, matmul.op_name, matmul.source_line) == ("MatMul", "MatMul", 1221)
    assert module.entry_signature == "(f32[4,8], f32[8,3]) -> (f32[4], f32[])"


def test_proto_constants_are_whole():
    elided_text = read_hlo_file(fixture("lookup_elided/*.before_optimizations.txt"))
    proto = read_hlo_file(fixture("lookup_elided/*.before_optimizations.hlo.pb"))
    assert elided_text.has_elided_constants()
    assert not proto.has_elided_constants()  # the proto dump carries the 200 values
    table = proto.find_instruction("constant.18")
    assert table.shape == "f32[200]{0}" and table.literal.startswith("sha256:")
    assert proto.find_instruction("constant.13").literal != table.literal


def test_proto_fingerprints():
    here = read_hlo_file(fixture("fp/*.before_optimizations.hlo.pb"))
    elsewhere = read_hlo_file(fixture("fp_elsewhere/*.before_optimizations.hlo.pb"))
    changed = read_hlo_file(fixture("fp_changed/*.before_optimizations.hlo.pb"))
    assert here.fingerprint() == elsewhere.fingerprint()
    assert here.fingerprint() != changed.fingerprint()
    after = [read_hlo_file(fixture(f"{d}/*.cpu_after_optimizations.hlo.pb")) for d in ("fp", "fp_elsewhere")]
    assert after[0].fingerprint() == after[1].fingerprint()
    # documented: proto and text summaries of one module fingerprint differently
    assert here.fingerprint() != read_hlo_file(fixture("fp/*.before_optimizations.txt")).fingerprint()


def test_accepts_hlo_proto_bare_module_and_snapshot(tmp_path):
    hlo_proto = fixture("mlp/*.before_optimizations.hlo.pb").read_bytes()
    module_bytes = fields_by_number(hlo_proto)[1][0]
    argument = field(1, field(2, 11)) + field(8, b"\x00\x00\x80\x3f")  # an f32 LiteralProto
    snapshot = field(1, hlo_proto) + field(2, argument) + field(4, b"Host")
    expected = summarize_hlo_proto(hlo_proto)
    for data in (module_bytes, snapshot):
        summary = summarize_hlo_proto(data)
        assert summary.fingerprint() == expected.fingerprint()
        assert summary.instruction_count() == 80
    zipped = tmp_path / "module_0014.jit_train_step.before_optimizations.hlo.pb.gz"
    zipped.write_bytes(gzip.compress(hlo_proto))
    assert read_hlo_file(zipped).fingerprint() == expected.fingerprint()
    snapshot_file = tmp_path / "module_0014.jit_train_step.snapshot.-3049.pb"
    snapshot_file.write_bytes(snapshot)
    assert read_hlo_file(snapshot_file).entry_computation == "main.6"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xff\xff", "not a protobuf"),
        (b"", "not an HloProto"),
        (field(1, b"hello") + field(2, 7), "not an HloProto"),
        (field(1, field(1, b"m") + field(3, field(1, b"c"))), "not an HloProto"),  # a computation without instructions
    ],
)
def test_rejects_other_protos(data, message):
    with pytest.raises(InputError, match=message) as caught:
        summarize_hlo_proto(data)
    assert caught.value.hint


def test_truncated_proto_file_names_the_path(tmp_path):
    cut = tmp_path / "module_0001.x.before_optimizations.hlo.pb"
    cut.write_bytes(fixture("misc/*.hlo.pb").read_bytes()[:5000])
    with pytest.raises(InputError, match=r"module_0001\.x\.before_optimizations\.hlo\.pb: "):
        read_hlo_file(cut)


def test_shape_text_layout_details():
    tile = field(1, 8) + field(1, 128)
    layout = field(1, 1) + field(1, 0) + field(6, tile) + field(8, 1)
    shape = field(2, 16) + field(3, 8) + field(3, 128) + field(5, layout)
    assert shape_text(shape) == "bf16[8,128]{1,0:T(8,128)S(1)}"
    assert shape_text(shape, with_layout=False) == "bf16[8,128]"
    dynamic = field(2, 4) + field(3, 10) + field(6, 1) + field(5, field(1, 0))
    assert shape_text(dynamic) == "s32[<=10]{0}"
    unbounded = field(2, 11) + field(3, 1 << 63) + field(3, 4) + field(6, 1) + field(6, 0)  # int64 min: XLA's "?"
    assert shape_text(unbounded, with_layout=False) == "f32[?,4]"
    tuple_shape = field(2, 13) + field(4, field(2, 17)) + field(4, field(2, 1) + field(5, b""))
    assert shape_text(tuple_shape) == "(token[], pred[])"


def test_find_module_proto_prefers_the_nested_module():
    hlo_proto = fixture("tf/*.cpu_after_optimizations.hlo.pb").read_bytes()
    assert 3 in fields_by_number(hlo_proto)  # the buffer assignment is there too
    module = find_module_proto(hlo_proto)
    assert module[1][0].startswith(b"a_inference_f_20__")


def test_unbounded_and_dynamic_dimensions_read_from_a_proto_xla_wrote():
    hlo = pytest.importorskip("jax._src.lib").xla_client.hlo
    text = "HloModule m\n\nENTRY e {\n  p = f32[?,<=4] parameter(0)\n  ROOT n = f32[?,<=4] negate(p)\n}\n"
    module = summarize_hlo_proto(hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto())
    assert module.entry_signature == "(f32[?,<=4]) -> f32[?,<=4]"
    assert module.find_instruction("n").shape.startswith("f32[?,<=4]")


SNAPSHOTS = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.glob("snapshots/*/*snapshot*.pb"))
BUFFER_ASSIGNMENT, BUFFER_ALIASES = 3, 2  # HloProto.buffer_assignment, BufferAssignmentProto.buffer_aliases


def _aliases(hlo_proto: bytes) -> int:
    fields = fields_by_number(hlo_proto)
    if BUFFER_ASSIGNMENT not in fields:
        return 0
    return len(fields_by_number(fields[BUFFER_ASSIGNMENT][0]).get(BUFFER_ALIASES, []))


def test_snapshot_fixtures_cover_both_frameworks_with_and_without_aliasing():
    versions = {path.split("/")[1] for path in SNAPSHOTS}
    assert versions == {"tf-2.16.2", "tf-2.21.0", "jax-0.4.30", "jax-0.10.2"}
    aliased = {path.split("/")[1] for path in SNAPSHOTS if _aliases(fields_by_number((FIXTURES / path).read_bytes())[1][0])}
    assert aliased == {"tf-2.16.2", "tf-2.21.0"}  # TF's snapshots carry the buffer assignment; jax's do not


@pytest.mark.parametrize("path", SNAPSHOTS)
def test_every_snapshot_is_read_as_a_snapshot_by_explain_index_and_replay(path):
    """One rule: the file's name (explain, the index), its content (classify_proto) and replay's loader agree."""
    from xlarun.hlo.names import decode_dump_name
    from xlarun.replay.sources import SNAPSHOT, load_source

    data = (FIXTURES / path).read_bytes()
    kind, module, fields = classify_proto(data)
    assert kind == proto_holds(data) == decode_dump_name(Path(path).name).kind == "snapshot"
    source = load_source(FIXTURES / path)
    assert source.file_format == SNAPSHOT and source.module_proto == module
    name = source.module_name or ""
    assert name.startswith("a_inference_step_25__" if path.startswith("snapshots/tf") else "jit_step")
    assert name.isprintable() and fields[1][0] == name.encode()
    assert [str(a.dtype) for a in source.arguments or []] == (
        ["float32", "float32", "float32"] if "jax" in path else ["float32", "float32"]  # jax: w, b, x; TF: x, the variable
    )


def test_an_hlo_proto_with_buffer_aliases_is_not_taken_for_a_module():
    """XLA's after-optimizations HloProto: its buffer assignment's aliases (field 3, then 2) once passed for a
    module's computations and instructions, so a snapshot holding it was read as an HloProto."""
    hlo_proto = fixture("misc/*.cpu_after_optimizations.hlo.pb").read_bytes()
    assert _aliases(hlo_proto) == 74
    assert classify_proto(hlo_proto)[0] == "hlo_proto"
    snapshot = field(1, hlo_proto) + field(2, field(1, field(2, 11)) + field(8, b"\x00\x00\x80\x3f"))
    kind, module, _ = classify_proto(snapshot)
    assert (kind, module) == ("snapshot", fields_by_number(hlo_proto)[1][0])
    assert summarize_hlo_proto(snapshot).name == "jit_misc"


@pytest.mark.parametrize(("name", "opcode"), [(b"\x0a\x03abc", b"add"), (b"m", b"\x0a\x02ab"), (b"m", b"Add"), (b"m", b"add-")])
def test_a_module_needs_text_names_and_a_word_for_an_opcode(name, opcode):
    instruction = field(1, b"x") + field(2, opcode)
    module = field(1, name) + field(3, field(1, b"c") + field(2, instruction))
    assert proto_holds(module) is None
    good = field(1, b"m") + field(3, field(1, b"c") + field(2, field(1, b"x") + field(2, b"get-tuple-element")))
    assert classify_proto(good)[0] == "module"
