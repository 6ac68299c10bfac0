"""Replay-mode bisect of partitioned modules (bisect/sharded_replayer.py, replay/sharded_run.py).

One real capture, pass by pass, of three steps sharded over 4 host CPU devices: a NamedSharding step on a 2 x 2
mesh (no collectives before the partitioner: the reference runs on one device), a shard_map step with psum (per-device
code in the program: the reference is partitioned on 4 devices too), and a sum made on purpose so that its order
matters (huge values of opposite signs on different devices), which the SPMD partitioner splits into per-device
partial sums: the numbers move at the partitioner, and bisect names it. And an elementwise residual that algsimp
folds after the partitioner: the culprit is a per-device step, and its first moving instruction is found on 4 devices.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sharded_steps"  # docs/bisect.md bisects it too
STEPS = (EXAMPLE / "steps.py").read_text()


@pytest.fixture(scope="module")
def sharded_store(tmp_path_factory):
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    folder = tmp_path_factory.mktemp("sharded-bisect")
    store = LocalStore.open(folder / "store", create=True)
    result = capture(EXAMPLE / "spec.yaml", store)
    assert result.ok, result.warnings
    return folder / "store"


def test_the_entry_layout_is_read_whole_and_steps_run_where_the_plan_says():
    from xlarun.bisect.bisect_plan import DevicePlan, _entry_layout
    from xlarun.replay.partitioned import Partitioning

    line = "HloModule f, entry_computation_layout={(f32[16,4]{1,0}, f32[4,16]{1,0})->f32[]}, num_partitions=4\n"
    assert _entry_layout(line) == "entry_computation_layout={(f32[16,4]{1,0}, f32[4,16]{1,0})->f32[]}"
    assert _entry_layout("HloModule f\nentry_computation_layout={()->f32[]}") is None  # only the HloModule line
    plan = DevicePlan(Partitioning(4, 1), first_per_device=3, reference_devices=1)
    assert [plan.step_devices(i) for i in (-1, 0, 2, 3, 9)] == [1, 1, 1, 4, 4]
    assert DevicePlan(Partitioning(4, 1), None, 4).step_devices(7) == 4


def _bisect(cli, store, *args):
    result = cli("bisect", *args, "--json", "--store", store)
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.slow
def test_a_named_sharding_step_runs_its_per_device_steps_on_4_devices_and_nothing_moves(cli, sharded_store):
    code, data = _bisect(cli, sharded_store, "named_step", "--linear")
    assert data["error"] is None, data
    assert code == 0 and data["verdict"] == "no-divergence"
    assert data["devices"] == 4 and data["reference_devices"] == 1
    assert data["reference"] == "before_optimizations on 1 device"
    first = data["per_device_from_step"]
    assert first is not None and first > 0
    steps = data["steps"]
    assert len(steps) == data["steps_total"] and all(s["error"] is None for s in steps)
    assert {s["devices"] for s in steps if s["step"] >= first} == {4}  # after the partitioner: per-device code on 4
    assert {s["devices"] for s in steps if s["step"] < first} == {1}  # whole-program steps: as the reference runs
    assert max(s["max_abs_error"] for s in steps) < 1e-5
    assert max(s["max_abs_error"] for s in steps if s["step"] >= first) > 0  # the 4 devices did add in another order


@pytest.mark.slow
def test_a_shard_map_step_runs_every_step_on_4_devices(cli, sharded_store):
    code, data = _bisect(cli, sharded_store, "psum_step", "--linear")
    assert data["error"] is None, data
    assert code == 0 and data["verdict"] == "no-divergence"
    assert data["reference"] == "before_optimizations partitioned by XLA on 4 devices"
    assert {s["devices"] for s in data["steps"]} == {4} and len(data["steps"]) == data["steps_total"]
    assert all(s["error"] is None and s["max_abs_error"] < 1e-5 for s in data["steps"])
    assert any("has no one-device form" in w and "all-reduce" in w for w in data["warnings"])
    assert "spmd-partitioning" not in data["disabled_passes"] and "shardy-xla" not in data["disabled_passes"]


@pytest.mark.slow
def test_a_sum_split_over_devices_names_the_spmd_partitioner(cli, sharded_store):
    code, data = _bisect(cli, sharded_store, "split_sum")
    assert data["error"] is None, data
    assert code == 1 and data["verdict"] == "diverged"
    assert data["culprit_pass"] == "spmd-partitioning" and data["culprit_pipeline"] == "spmd-partitioner"
    assert data["culprit_step"] == data["per_device_from_step"]
    assert data["error_before"]["max_abs_error"] == 0.0 and data["error_before"]["devices"] == 1
    assert data["error_after"]["devices"] == 4 and data["error_after"]["max_abs_error"] > 0.5
    assert "all-reduce +1" in " ".join(data["diff_summary"])  # the partitioner's diff: the partial sums' all-reduce
    assert data["first_move"] is None  # global values do not pair with per-device pieces: said, not done
    assert any("first moving instruction was not looked for" in w for w in data["warnings"])


@pytest.mark.slow
def test_a_culprit_after_the_partitioner_is_found_with_its_first_moving_instruction_on_4_devices(cli, sharded_store):
    code, data = _bisect(cli, sharded_store, "sharded_residual")
    assert data["error"] is None, data
    assert code == 1 and data["culprit_pass"] == "algsimp" and data["culprit_pipeline"] == "simplification"
    assert data["culprit_step"] > data["per_device_from_step"] and data["error_after"]["devices"] == 4
    assert data["error_before"]["max_abs_error"] == 0.0  # partitioning an elementwise program moves nothing
    moved = data["first_move"]["moved"]
    # the per-device module's own multiply (4096 values over 4 devices), on the program's line, fed by algsimp's constant
    assert moved["opcode"] == "multiply" and moved["shape"].startswith("f32[1024]")
    line = STEPS.split("\n").index("    return ((r / 3.0) * 3.0 - r) * 1e6") + 1
    assert moved["source"].endswith(f"steps.py:{line}") and moved["new_operands"]
    assert data["first_move"]["visible"]["max_abs_error"] > 1e-5


@pytest.mark.slow
def test_the_terminal_report_says_how_many_devices(cli, sharded_store):
    result = cli("bisect", "split_sum", "-q", "--store", sharded_store)
    assert result.exit_code == 1
    assert "devices       4: steps from" in result.stdout
    assert "pass spmd-partitioning (spmd-partitioner) (partitioned module, steps run on 4 devices)" in result.stdout


@pytest.mark.slow
def test_refusals_name_the_devices_and_what_to_do(cli, sharded_store):
    from xlarun.replay.pjrt import available_platforms

    if "cuda" not in available_platforms():  # no GPU here: 4 cuda devices cannot be had
        code, data = _bisect(cli, sharded_store, "split_sum", "--platform", "cuda")
        assert code == 3 and "partitioned for 4 devices" in data["error"] and "4 cuda devices" in data["error"]
    code, data = _bisect(cli, sharded_store, "split_sum", "--reference", "snapshot")
    assert code == 2 and "partitioned for 4 devices" in data["error"]
    code, data = _bisect(cli, sharded_store, "split_sum", "--recompile", "all")
    assert code == 2 and "SPMD partitioner" in data["error"]
