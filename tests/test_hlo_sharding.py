"""How a module is partitioned (xlarun.hlo.sharding), on XLA's own partitioned test modules and a real 8-device
capture (the zoo's shard_map step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xlarun.hlo import load_hlo
from xlarun.hlo.sharding import COLLECTIVES, shape_bytes, sharding_of_text

from .corpus_support import ACCEPTED as CORPUS

ZOO_SPEC = Path(__file__).resolve().parents[1] / "examples" / "zoo" / "sharded" / "spec.yaml"


def test_bytes_of_shapes_as_xla_writes_them():
    assert shape_bytes("(f32[16,4]{1,0}, f32[])") == 260
    assert (shape_bytes("bf16[8]"), shape_bytes("f8e4m3fn[10]"), shape_bytes("pred[3]"), shape_bytes("c64[2]")) == (16, 10, 3, 16)


def test_a_one_device_module_says_nothing():
    found = sharding_of_text("HloModule m\n\nENTRY %e (p: f32[4]) -> f32[4] {\n  ROOT %p = f32[4]{0} parameter(0)\n}\n")
    assert not found.partitioned and found.lines() == []


@pytest.mark.usefixtures("xla_corpus")
def test_xlas_partitioned_test_modules_agree_with_the_full_parser():
    """Each of XLA's modules with num_partitions and collectives: the partitions are the header's, and the collectives
    counted by kind are the instructions the full parser reads with those opcodes (-start counted, -done not)."""
    checked = 0
    for line in CORPUS.read_text().splitlines():
        row = json.loads(line)
        text = row["text"]
        if "num_partitions=" not in text or not any(f" {c}" in text for c in COLLECTIVES):
            continue
        found = sharding_of_text(text)
        module = load_hlo(text.encode(), row["id"])
        by_kind: dict[str, int] = {}
        for instruction in module.instructions():
            kind = instruction.opcode.removesuffix("-start")
            if kind in COLLECTIVES and not instruction.opcode.endswith("-done"):
                by_kind[kind] = by_kind.get(kind, 0) + 1
        header = next(h for h in text.splitlines() if h.startswith("HloModule"))
        assert found.partitions == int(header.split("num_partitions=")[1].split(",")[0].split()[0]), row["origin"]
        assert {k: n for k, (n, _) in found.collectives.items()} == by_kind, row["origin"]
        checked += 1
    assert checked >= 30  # 42 such modules in the corpus checked out for CI


@pytest.mark.slow
def test_show_gives_the_partitions_mesh_and_collectives_of_a_real_8_device_step(cli, tmp_path):
    pytest.importorskip("jax")
    store = tmp_path / "store"
    assert cli("capture", ZOO_SPEC, "--store", store, "-q").exit_code == 0
    shown = cli("show", "sharded_step", "--store", store).stdout
    assert "8 partitions x 1 replicas = 8 devices; device meshes 8x1" in shown
    # shard_map's psum: the gradient's all-reduce (f32[16,4]) and the loss's combined with it (f32[16,4], f32[])
    assert "all-reduce 2 (516 B); 516 B per device per step" in shown
    assert "partitions" not in cli("show", "jit__normal", "--store", store).stdout  # a one-device module
