"""Partitioned modules replayed on their N devices (replay/partitioned.py, placed.py, run.py, reference.py, multidevice.py).

Real captures: a 4-device step sharded with NamedSharding over a 2 x 2 mesh, and a 4-device shard_map step
with psum, dumped by jax with --xla_force_host_platform_device_count=4. The optimized module of each is
replayed on 4 devices and compared with the program's before_optimizations module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xlarun.replay import ReplayOptions
from xlarun.replay.fakedata import fake_arguments
from xlarun.replay.multidevice import ShardingLayout
from xlarun.replay.partitioned import Partitioning, assemble, partitioning_of_file, rewrite_for_devices, shard
from xlarun.replay.sources import entry_parameter_shapes, load_source
from xlarun.replay.worker import host_device_flags

STEPS = """
from functools import partial
import jax, jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(jax.devices()[:4], ("data",))
grid = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("batch", "model"))
w = jax.device_put(jnp.arange(64.0).reshape(8, 8) / 64, NamedSharding(grid, P(None, "model")))
x = jax.device_put(jnp.arange(128.0).reshape(16, 8) / 128, NamedSharding(grid, P("batch", None)))

@jax.jit
def named_step(w, x):
    h = jnp.tanh(x @ w)
    return w - 0.1 * (x.T @ h), jnp.sum(h * h)

@partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))
def grads(w, x):
    local = jax.grad(lambda w: jnp.sum((x @ w) ** 2))(w)
    return jax.lax.psum(local, "data"), jax.lax.psum(jnp.sum(x), "data")

@jax.jit
def psum_step(w, x):
    g, total = grads(w, x)
    return w - 1e-3 * g, total

@jax.jit
def collectives(x):
    def body(x):
        gathered = jax.lax.all_gather(x, "data", tiled=True)
        scattered = jax.lax.psum_scatter(jnp.tile(x, (4, 1)), "data", scatter_dimension=0, tiled=True)
        swapped = jax.lax.all_to_all(x, "data", 0, 0, tiled=True)
        shifted = jax.lax.ppermute(x, "data", perm=[(i, (i + 1) % 4) for i in range(4)])
        return gathered * 2, scattered, swapped, shifted + jax.lax.pmax(x, "data")
    specs = (P(), P("data"), P("data"), P("data"))
    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=specs, check_vma=False)(x)

print(named_step(w, x)[1], psum_step(w, x)[1], collectives(x)[0].shape)
"""


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("partitioned")
    (folder / "steps.py").write_text(STEPS)
    flags = "--xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_force_host_platform_device_count=4"
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={folder / 'dump'} {flags}", "JAX_PLATFORMS": "cpu"}
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    proc = subprocess.run([sys.executable, "steps.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder / "dump"


def _file(dump: Path, module: str, suffix: str) -> Path:
    (found,) = [p for p in dump.iterdir() if p.name.endswith(f".{module}.{suffix}")]
    return found


def _replay(path: Path, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "xlarun", "replay", str(path), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "XLA_FLAGS": ""},  # one host device here: the worker asks for the module's N itself
    )
    return proc.returncode, json.loads(proc.stdout)


# ---- fast: the pieces ----


def test_partitioning_is_read_from_the_text_header_and_the_proto(dump):
    for suffix in ("cpu_after_optimizations.txt", "cpu_after_optimizations.hlo.pb", "before_optimizations.hlo.pb"):
        assert partitioning_of_file(_file(dump, "jit_named_step", suffix)) == Partitioning(4, 1)
    assert partitioning_of_file(Path("nowhere.txt")).devices == 1


def test_a_tiled_array_is_cut_per_device_and_put_back():
    value = np.arange(24.0).reshape(4, 6)
    # a 2 x 2 tiling with the tiles on devices 0, 2, 1, 3 (transposed device order)
    layout = ShardingLayout("tiled", (2, 2), 1, (0, 2, 1, 3))
    pieces = shard(value, layout, (2, 3), 4)
    assert [p.tolist() for p in pieces][2] == value[0:2, 3:6].tolist()
    assert [p.tolist() for p in pieces][1] == value[2:4, 0:3].tolist()
    assert np.array_equal(assemble(pieces, layout, (4, 6)), value)
    # replicated on the last tile dimension: 2 tiles of rows, each on 2 devices
    copies = ShardingLayout("tiled", (2,), 2, (0, 1, 2, 3))
    rows = shard(np.arange(6.0), copies, (3,), 4)
    assert [r.tolist() for r in rows] == [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]]


def test_an_uneven_split_is_padded_and_cropped():
    layout = ShardingLayout("tiled", (4,), 1, (0, 1, 2, 3))
    pieces = shard(np.arange(10.0), layout, (3,), 4)
    assert pieces[3].tolist() == [9, 0, 0]
    assert assemble(pieces, layout, (10,)).tolist() == list(range(10))


def test_the_per_device_rewrite_makes_values_manual_and_splits_combined_collectives():
    text = """HloModule m, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[4]{0} parameter(0), sharding={devices=[2]<=[2]}
  p1 = f32[] parameter(1), sharding={replicated}
  ar = (f32[4]{0}, f32[]) all-reduce(p0, p1), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  ROOT t = f32[4]{0} get-tuple-element(ar), index=0, sharding={replicated}
}
"""
    rewritten = rewrite_for_devices(text)
    assert "devices=[2]" not in rewritten and "{replicated}" not in rewritten
    assert rewritten.count("sharding={manual}") == 3  # two parameters and the root
    assert "ar.part0 = f32[4]{0} all-reduce(p0), channel_id=1" in rewritten
    assert "ar.part1 = f32[] all-reduce(p1), channel_id=1" in rewritten
    assert "ar = (f32[4]{0}, f32[]) tuple(ar.part0, ar.part1)" in rewritten


def test_the_worker_sets_its_host_device_count():
    assert host_device_flags("--xla_dump_to=/d --xla_force_host_platform_device_count=2", 8) == (
        "--xla_dump_to=/d --xla_force_host_platform_device_count=8"
    )


# ---- slow: real replays on 4 devices ----


@pytest.mark.slow
@pytest.mark.parametrize("module", ["jit_named_step", "jit_psum_step"])
def test_the_optimized_module_replays_on_its_4_devices_and_matches_the_program(dump, module):
    code, result = _replay(_file(dump, module, "cpu_after_optimizations.hlo.pb"))
    assert code == 0, result
    assert result["verdict"] == "match"
    assert result["devices"] == 4 and result["partitioning"] == "4 partitions"
    assert result["fell_back_to"] is None and result["route"].startswith("per-device optimized module")
    against, copies = result["compared_with"]
    assert "before_optimizations" in against and copies == "the other devices' copies of each output"
    assert result["max_abs_error"] < 1e-4
    assert len(result["outputs"]) == 2 and result["outputs"][0]["type"] == "f32[8,8]"


@pytest.mark.slow
def test_the_saved_outputs_of_a_partitioned_replay_are_the_whole_values_the_program_computes(dump, tmp_path):
    """--save-outputs writes each output whole, put back together from the 4 devices' pieces: named_step computed by
    numpy on the replay's seeded global arguments."""
    saved = tmp_path / "outputs.npz"
    code, result = _replay(_file(dump, "jit_named_step", "cpu_after_optimizations.hlo.pb"), "--save-outputs", str(saved))
    assert (code, result["verdict"], result["devices"], result["arguments"]) == (0, "match", 4, "fake")
    before = load_source(_file(dump, "jit_named_step", "before_optimizations.hlo.pb"))
    w, x = fake_arguments(entry_parameter_shapes(before.module_proto), 0)
    h = np.tanh(x @ w)
    with np.load(saved) as outputs:
        assert sorted(outputs.files) == ["output_0", "output_1"]
        np.testing.assert_allclose(outputs["output_0"], w - np.float32(0.1) * (x.T @ h), atol=1e-5)
        np.testing.assert_allclose(outputs["output_1"], np.sum(h * h), rtol=1e-5)


@pytest.mark.slow
def test_the_named_step_is_compared_with_the_program_on_one_device(dump):
    """Without shard_map the before_optimizations module runs unpartitioned on one device: the partitioner's check."""
    _, result = _replay(_file(dump, "jit_named_step", "cpu_after_optimizations.hlo.pb"))
    before = _file(dump, "jit_named_step", "before_optimizations.hlo.pb").name
    assert result["compared_with"][0] == f"before_optimizations {before} on 1 device"


@pytest.mark.slow
def test_a_changed_optimized_module_is_a_mismatch(dump, tmp_path):
    """The comparison can fail: the optimized module with its learning rate doubled no longer matches the program."""
    original = _file(dump, "jit_psum_step", "cpu_after_optimizations.txt")
    changed = tmp_path / original.name
    text = original.read_text()
    assert "constant(0.001)" in text
    changed.write_text(text.replace("constant(0.001)", "constant(0.002)"))
    before = _file(dump, "jit_psum_step", "before_optimizations.hlo.pb")
    (tmp_path / before.name).write_bytes(before.read_bytes())
    code, result = _replay(changed)
    assert (code, result["verdict"], result["devices"]) == (1, "mismatch", 4)
    assert result["max_abs_error"] > 1e-4


def test_mesh_axes_replica_groups_are_spelled_out_with_their_device_order():
    """XLA's mesh-axes replica groups lose their device order on the StableHLO route: the rewrite lists the groups."""
    line = (
        "  %ag = f32[8,8]{0,1} all-gather(%w), channel_id=2, replica_groups=mesh['a'=1,'b'=2,'c'=2], "
        "device_ids=([2,2]T(1,0)) {'b'}, dimensions={1}, use_global_device_ids=true"
    )
    text = f"HloModule m, num_partitions=4\n\nENTRY main {{\n  %w = f32[8,4]{{1,0}} parameter(0)\n{line}\n}}\n"
    rewritten = rewrite_for_devices(text)
    # devices laid out (b, c) = [[0, 2], [1, 3]]; the groups run along b
    assert "replica_groups={{0,1},{2,3}}, dimensions={1}" in rewritten
    assert "replica_groups={{0,2},{1,3}}" in rewrite_for_devices(text.replace("{'b'}", "{'c'}"))


@pytest.mark.slow
def test_without_its_n_devices_the_replay_is_refused_naming_n(dump):
    """In xlarun's own process (--in-process) jax has one host device: the 4-device module is refused, exit 3."""
    path = _file(dump, "jit_named_step", "cpu_after_optimizations.hlo.pb")
    proc = subprocess.run(
        [sys.executable, "-m", "xlarun", "replay", str(path), "--in-process"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "XLA_FLAGS": ""},
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "partitioned for 4 devices, and cpu here has 1" in proc.stderr


def test_xla_runners_say_they_run_a_partitioned_module_on_one_device():
    from xlarun.replay.runner_verdict import result_from_run

    fixture = Path(__file__).parent / "fixtures" / "hlo" / "sharded" / "module_0006.jit_sharded.cpu_after_optimizations.txt"
    result = result_from_run("run_hlo_module", ["run_hlo_module", str(fixture)], 0, "", ReplayOptions(), fixture)
    assert any("compiled for 2 devices (2 partitions); run_hlo_module runs it on one device" in w for w in result.warnings)


@pytest.mark.slow
def test_the_zoo_8_device_step_replays_and_bisects_on_8_devices(cli, tmp_path):
    """examples/zoo/sharded captured for real: replay runs its optimized module on 8 devices and matches the program
    partitioned again (its shard_map body cannot run on one device); bisect runs its pass steps there too."""
    store = tmp_path / "store"
    spec = Path(__file__).parent.parent / "examples" / "zoo" / "sharded" / "spec.yaml"
    assert cli("capture", spec, "--store", store, "-q").exit_code == 0
    out = cli("replay", "jit_sharded_step", "--json", "--store", store)
    result = json.loads(out.stdout)
    assert out.exit_code == 0, result
    assert (result["verdict"], result["devices"], result["partitioning"]) == ("match", 8, "8 partitions")
    assert result["source"].endswith("cpu_after_optimizations.hlo.pb")
    against = result["compared_with"][0]
    assert against.endswith("partitioned again on 8 devices") and result["max_abs_error"] < 1e-4
    assert any("does not run on one device" in line for line in result["log"].splitlines())
    shown = cli("show", "jit_sharded_step", "--store", store)
    assert "cpu x8" in shown.stdout  # the recorded replay says it ran on 8 devices
    # bisect replays its pass steps on the 8 devices too: nothing moves on this stable step
    bisected = cli("bisect", "jit_sharded_step", "--json", "--store", store)
    found = json.loads(bisected.stdout)
    assert bisected.exit_code == 0 and (found["verdict"], found["culprit_pass"]) == ("no-divergence", None), found
    assert found["reference"] == "before_optimizations partitioned by XLA on 8 devices"
    assert found["largest"]["devices"] == 8 and found["largest"]["max_abs_error"] < 1e-5


DISAGREE = """HloModule disagree, is_scheduled=true, num_partitions=2

ENTRY main {
  p = f32[4]{0} parameter(0), sharding={replicated}
  id = u32[] partition-id()
  f = f32[] convert(id)
  b = f32[4]{0} broadcast(f), dimensions={}
  ROOT r = f32[4]{0} add(p, b), sharding={replicated}
}
"""


@pytest.mark.slow
@pytest.mark.parametrize(("added", "verdict"), [("b", "mismatch"), ("p", "match")])
def test_devices_holding_copies_of_a_replicated_output_must_agree(tmp_path, added, verdict):
    """Each device's copy is checked against device 0's: a value that differs per device is a mismatch."""
    path = tmp_path / "module_0001.disagree.cpu_after_optimizations.txt"
    path.write_text(DISAGREE.replace("add(p, b)", f"add(p, {added})"))
    code, result = _replay(path)
    assert (result["verdict"], result["devices"]) == (verdict, 2)
    assert result["compared_with"] == ["the other devices' copies of each output"]
    assert any("no before_optimizations dump" in w for w in result["warnings"])
    if verdict == "mismatch":
        assert code == 1 and result["mismatches"][0].startswith("output 0: device 1's copy differs from device 0's")


@pytest.mark.slow
def test_an_optimized_module_the_rewrite_cannot_express_falls_back_to_its_program_partitioned_by_xla():
    """The checked-in 2-device fixture calls LAPACK's Cholesky with a column-major operand, which StableHLO cannot carry."""
    fixture = Path(__file__).parent / "fixtures" / "hlo" / "sharded" / "module_0006.jit_sharded.cpu_after_optimizations.txt"
    code, result = _replay(fixture)
    assert (code, result["verdict"], result["devices"]) == (0, "match", 2)
    assert result["fell_back_to"].endswith("module_0006.jit_sharded.before_optimizations.txt")
    assert result["route"] == "partitioned by XLA (SPMD)"
    assert result["compared_with"][0] == "before_optimizations module_0006.jit_sharded.before_optimizations.txt on 1 device"
    assert any("cannot be recompiled for 2 devices" in w for w in result["warnings"])


@pytest.mark.slow
def test_an_optimized_module_and_a_before_dump_for_other_device_counts_are_refused_naming_both(tmp_path):
    """The checked-in 2-device optimized module beside a before_optimizations dump made for 4 devices: not one compile's
    dumps, so the replay is refused with both counts (exit 3), not a crash of the device assignment."""
    fixtures = Path(__file__).parent / "fixtures" / "hlo" / "sharded"
    optimized = tmp_path / "module_0006.jit_sharded.cpu_after_optimizations.txt"
    optimized.write_bytes((fixtures / optimized.name).read_bytes())
    before = (fixtures / "module_0006.jit_sharded.before_optimizations.txt").read_text()
    assert ", num_partitions=2," in before.splitlines()[0]
    (tmp_path / "module_0006.jit_sharded.before_optimizations.txt").write_text(
        before.replace(", num_partitions=2,", ", num_partitions=4,", 1)
    )
    code, result = _replay(optimized)
    assert (code, result["verdict"]) == (3, "engine-error")
    assert "compiled for 2 devices (2 partitions)" in result["error"] and "for 4 (4 partitions)" in result["error"]


def test_snapshot_inputs_are_refused_for_a_partitioned_module(dump):
    code, result = _replay(_file(dump, "jit_named_step", "cpu_after_optimizations.hlo.pb"), "--inputs", "snapshot")
    assert code == 2 and "partitioned over 4 devices" in result["error"]


@pytest.mark.slow
def test_every_collective_kind_computes_what_the_program_means_on_4_devices(dump):
    """all-gather, reduce-scatter, all-to-all, collective-permute and a max all-reduce, replayed on 4 devices and
    checked against numpy on the same fake input (not only against XLA partitioning the program again)."""
    from xlarun.replay.fakedata import fake_argument
    from xlarun.replay.literals import Shape, primitive_type

    code, result = _replay(_file(dump, "jit_collectives", "cpu_after_optimizations.hlo.pb"), "--print-literals")
    assert (code, result["verdict"], result["devices"]) == (0, "match", 4)
    x = fake_argument(Shape(primitive_type("f32").code, (16, 8)), 0, 0).astype(np.float64)
    blocks = x.reshape(4, 4, 8)  # device i holds rows 4i..4i+3
    expected = [
        2 * x,
        np.tile(blocks.sum(0), (4, 1)),
        blocks.transpose(1, 0, 2).reshape(16, 8),  # device i receives row i of every block
        np.roll(x, 4, axis=0) + np.tile(blocks.max(0), (4, 1)),
    ]
    for output, want in zip(result["outputs"], expected, strict=True):
        got = [float(v) for v in re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", output["literal"])]
        assert np.allclose(np.array(got).reshape(16, 8), want, atol=1e-5), output["index"]


@pytest.mark.slow
def test_one_worker_serves_one_device_and_partitioned_modules_restarting_only_to_add_devices():
    from xlarun.replay.worker import ReplayWorker

    fixtures = Path(__file__).parent / "fixtures" / "hlo"
    one = next((fixtures / "mlp").glob("*before_optimizations.txt"))
    two = fixtures / "sharded" / "module_0006.jit_sharded.before_optimizations.txt"
    with ReplayWorker() as worker:
        results = [worker.replay(path, ReplayOptions()) for path in (one, two, one)]
        assert [r.devices for r in results] == [1, 2, 1]
        assert worker.starts == 2  # the second child, with 2 host devices, also replayed the one-device module


# from XLA's tests (collective_ops_e2e_test.cc, collective_quantizer_test.cc): per-device code without output shardings
NO_OUTPUTS = "HloModule pjit_f, entry_computation_layout={()->()}, num_partitions=2\n\nENTRY main {\n  ROOT t = () tuple()\n}\n"
PER_DEVICE = """HloModule module, num_partitions=4

ENTRY entry {
  param = f32[8,4] parameter(0)
  scale = f32[] parameter(1), sharding={replicated}
  scale_bcast = f32[8,4] broadcast(scale), dimensions={}
  multiply = f32[8,4] multiply(param, scale_bcast)
  ROOT permuted = f32[8,4] collective-permute(multiply), source_target_pairs={{0,1},{2,3}}, channel_id=1
}
"""


@pytest.mark.slow
@pytest.mark.parametrize(("text", "verdict"), [(NO_OUTPUTS, "match"), (PER_DEVICE, "ran")], ids=["no-outputs", "per-device"])
def test_hand_written_partitioned_modules_are_never_compared_with_what_they_do_not_mean(tmp_path, text, verdict):
    """A module whose collectives are written out is per-device code: neither one device nor 'every copy alike'
    is a reference for it (XLA's corpus gave false mismatches before); a module returning () runs and matches."""
    path = tmp_path / "m.hlo"
    path.write_text(text)
    code, result = _replay(path)
    assert (code, result["verdict"]) == (0, verdict)
    if verdict == "ran":
        assert result["compared_with"] == [] and any("collectives, which are per-device code" in w for w in result["warnings"])
