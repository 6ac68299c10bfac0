"""How a module is partitioned (xlarun.hlo.sharding), on XLA's own partitioned test modules and a real 8-device
capture (the zoo's shard_map step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xlarun.hlo import load_hlo
from xlarun.hlo.sharding import COLLECTIVES, count_annotation_calls, is_annotation_target, shape_bytes, sharding_of_text

from .conftest import write_spec
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
    assert "8 partitions x 1 replicas = 8 devices; mesh data=8" in shown  # Mesh(devices, ("data",))
    # shard_map's psum: the gradient's all-reduce (f32[16,4]) and the loss's combined with it (f32[16,4], f32[])
    assert "all-reduce 2 (516 B); 516 B per device per step" in shown
    assert "partitions" not in cli("show", "jit__normal", "--store", store).stdout  # a one-device module


def test_the_mesh_is_named_by_its_axes_where_shardy_wrote_them_else_its_shape_once():
    named = (
        'HloModule jit_f, num_partitions=8, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["data"=4, "model"=2]>}}\n'
        "ENTRY %e (p: f32[32,8]) -> f32[32,8] {\n"
        "  ROOT %p = f32[32,8]{1,0} parameter(0), sharding={devices=[4,2]<=[8]}\n}\n"
    )
    assert sharding_of_text(named).mesh == "data=4, model=2"
    two = named.replace('mesh = #sdy.mesh<["data"=4, "model"=2]>', 'a = #sdy.mesh<["x"=8]>, b = #sdy.mesh<[], device_ids=[0]>')
    assert sharding_of_text(two).mesh == "x=8"  # a mesh of no axes (one device) says nothing
    # GSPMD keeps no names: the shape the tile assignments are cut from, once, whatever form each takes
    gspmd = named.split(", frontend_attributes")[0] + "\n" + named.split("\n", 1)[1]
    tiles = [
        "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}",
        "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
        "{devices=[4,2]<=[8]}",
        "{devices=[4,1,2]0,2,4,6,1,3,5,7 last_tile_dim_replicate}",
    ]
    for tile in tiles:
        assert sharding_of_text(gspmd.replace("{devices=[4,2]<=[8]}", tile)).mesh == "4x2 (axis names not in the HLO)", tile
    assert sharding_of_text(gspmd.replace("{devices=[4,2]<=[8]}", "{replicated}")).mesh is None


def test_sharding_annotations_are_told_from_custom_calls_that_compute():
    assert [is_annotation_target(t) for t in ('"Sharding"', "SPMDFullToShardShape", "xla.sdy.FuncResultSharding")] == [True] * 3
    assert not is_annotation_target('"__cublas$gemm"') and not is_annotation_target("cu_threefry2x32")
    text = b'  %a = f32[8] custom-call(%p), custom_call_target="Sharding", sharding={replicated}\n'
    text += b'  %b = f32[8] custom-call(%a), custom_call_target="xla.sdy.FuncResultSharding"\n'
    text += b'  %c = f32[8] custom-call(%b), custom_call_target="lapack_sgetrf"\n'
    assert count_annotation_calls(text) == 2


MESH_PROGRAM = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

noise = jax.random.normal(jax.random.key(0), (32, 16))  # no mesh: jit__normal, hundreds of instructions, no dot
mesh = jax.make_mesh((4, 2), ("data", "model"))  # Explicit axes: JAX annotates every op's sharding
with jax.set_mesh(mesh):
    x = jax.device_put(noise, NamedSharding(mesh, P("data", None)))
    w = jax.device_put(jnp.ones((16, 8)), NamedSharding(mesh, P(None, "model")))

    @jax.jit
    def named_step(w, x):
        return jnp.tanh(x @ w).sum()

    print("loss", float(named_step(w, x)))
    rows = jnp.squeeze(x.reshape(1, 32, 16), 0)  # jit_reshape, jit__squeeze: sharding annotations only
jax.config.update("jax_use_shardy_partitioner", False)  # GSPMD: the HLO keeps no axis names
auto = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
xs = jax.device_put(noise, NamedSharding(auto, P("data", None)))
ws = jax.device_put(jnp.ones((16, 8)), NamedSharding(auto, P(None, "model")))


@jax.jit
def gspmd_step(w, x):
    return jnp.tanh(x @ w).sum()


print("loss", float(gspmd_step(ws, xs)), rows.shape)
"""


@pytest.mark.slow
def test_a_data_4_model_2_mesh_is_shown_by_name_and_its_annotations_rank_as_no_compute(cli, tmp_path):
    pytest.importorskip("jax")
    text = "name: mesh\nscript: job.py\nframework: jax\ntimeout: 3m\ndump:\n  formats: [text]\n"
    text += '  extra_xla_flags: ["--xla_force_host_platform_device_count=8"]\n'
    store = tmp_path / "store"
    assert cli("capture", write_spec(tmp_path, text, MESH_PROGRAM), "--store", store, "-q").exit_code == 0
    assert "8 partitions x 1 replicas = 8 devices; mesh data=4, model=2\n" in cli("show", "named_step", "--store", store).stdout
    shown = cli("show", "gspmd_step", "--store", store).stdout
    assert "8 partitions x 1 replicas = 8 devices; mesh 4x2 (axis names not in the HLO)\n" in shown
    modules = json.loads(cli("modules", "--store", store, "--json").stdout)["modules"]
    by_name = {m["name"]: m for m in modules}
    # the step's custom-calls are all Sharding annotations: its compute is its one dot
    step = by_name["jit_named_step"]
    assert step["opcodes_before"]["custom-call"] >= 2 and step["compute_ops"] == step["opcodes_before"]["dot"] == 1
    assert by_name["jit__squeeze"]["opcodes_before"]["custom-call"] == 2 and by_name["jit__squeeze"]["compute_ops"] == 0
    # so a 6-instruction reshard no longer ranks above the 264-instruction RNG module
    names = [m["name"] for m in modules]
    assert names[:2] == ["jit_named_step", "jit_gspmd_step"]
    assert names.index("jit__normal") < names.index("jit__squeeze") and names.index("jit__normal") < names.index("jit_reshape")
