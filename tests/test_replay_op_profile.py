"""replay/op_profile.py: ``xlarun replay --profile`` times each op of a real captured JAX step."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("jax")


@pytest.mark.slow
def test_replay_profile_times_each_op_of_the_step_once_per_iteration(jax_run, cli):
    store, _ = jax_run
    iterations = 4
    result = cli("replay", "train_step", "--store", store.root, "-n", str(iterations), "--profile", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    profile = data["profile"]
    assert data["verdict"] == "match" and profile["module"] == "jit_train_step" and profile["iterations"] == iterations
    ops = profile["ops"]
    assert len(ops) > 10  # the step's fusions, dots and transposes
    # every op ran once per iteration (the step has no loop) and joined the module XLA compiled for the replay by name
    assert {op["time"]["count"] for op in ops} == {iterations}
    assert all(op["opcode"] for op in ops), [op["op"] for op in ops if not op["opcode"]]
    # most are the very instructions of the captured optimized module (XLA renames a few when it compiles again)
    module = store.index.module(data["module"].split("/")[0], int(data["module"].rsplit("_", 1)[1]))
    optimized = next(f.path for f in module.files if f.path.endswith("after_optimizations.txt"))
    dumped = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", store.read_file(module.run_id, optimized).decode(), re.M))
    assert sum(op["op"] in dumped for op in ops) >= 0.8 * len(ops)
    # the ops' self times add up to at most the wall time the run stage measured, and to most of it
    busy_ns = sum(op["time"]["self_ns"] for op in ops)
    wall_ns = sum(data["run_times_s"]) * 1e9
    assert 0.3 * wall_ns < busy_ns <= wall_ns
    assert profile["time"]["busy_ns"] == pytest.approx(busy_ns) and profile["time"]["executions"] == iterations
    # the dot-holding ops are where the step's flops are
    assert any("dot" in (op["fused_opcodes"] or [op["opcode"]]) and op["gflops_per_s"] for op in ops)

    human = cli("replay", "train_step", "--store", store.root, "-n", "2", "--profile", "-q")
    assert human.exit_code == 0, human.output
    assert "ops of jit_train_step over 2 iteration(s)" in human.stdout
    table = human.stdout.split("ops of jit_train_step", 1)[1]
    assert re.search(r"^op\s+holds\s+count", table, re.M) and "jax_mlp.py:" in table


def test_profile_is_refused_for_xla_runners(cli, tmp_path):
    hlo = tmp_path / "m.txt"
    hlo.write_text("HloModule m\nENTRY e { ROOT p = f32[2] parameter(0) }\n")
    result = cli("replay", str(hlo), "--engine", "run_hlo_module", "--profile", "--json")
    assert result.exit_code == 2
    assert "--profile times ops on the built-in engine only" in json.loads(result.stdout)["error"]


@pytest.mark.slow
def test_a_partitioned_module_is_timed_on_each_of_its_devices(cli, tmp_path):
    from pathlib import Path

    sharded = Path(__file__).parent / "fixtures" / "hlo" / "sharded" / "module_0006.jit_sharded.before_optimizations.txt"
    result = cli("replay", str(sharded), "-n", "3", "--profile", "--json", "--store", tmp_path / "none")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    devices = data["devices"]
    assert devices > 1 and data["profile"]["time"]["devices"] == devices
    ops = {op["op"]: op["time"] for op in data["profile"]["ops"]}
    # every device ran the entry's ops once per iteration; the collectives are among them
    assert ops["dot"]["count"] == 3 * devices and ops["dot"]["devices"] == devices
    assert any(name.startswith(("all-gather", "all-to-all", "all-reduce")) for name in ops)
    human = cli("replay", str(sharded), "-n", "2", "--profile", "-q", "--store", tmp_path / "none")
    assert f"busy on {devices} devices, added up, of" in human.stdout
