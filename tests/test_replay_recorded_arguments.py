"""A partitioned step's real arguments, recorded in the job (replay/recorded_arguments.py), used by replay and bisect.

XLA writes no snapshot of a module partitioned over N devices, so its replay and bisection ran on seeded fake data,
where a sum whose 4-device result differs from its 1-device one (examples/sharded_real_inputs: +-3e7 and ones)
shows nothing. Recorded with ``xlarun.record_arguments``, the difference is found.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from xlarun.errors import InputError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sharded_real_inputs"


def test_outside_a_capture_it_says_how_to_run_it(monkeypatch):
    from xlarun.replay.recorded_arguments import dump_folder

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    with pytest.raises(InputError, match="names none") as raised:
        dump_folder()
    assert "xlarun capture" in raised.value.hint
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_dump_to=/tmp/dumps")
    assert dump_folder() == Path("/tmp/dumps")


def test_a_step_whose_module_is_not_dumped_is_refused_with_why(tmp_path):
    from xlarun.replay.recorded_arguments import find_module_dump

    (tmp_path / "module_0003.jit_total.before_optimizations.txt").write_text(
        "HloModule jit_total, entry_computation_layout={(f32[8]{0})->f32[]}\n\n"
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
        "ENTRY main {\n  p = f32[8]{0} parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n}\n"
    )
    assert find_module_dump(tmp_path, "jit_total", ["f32[8]"]).name.startswith("module_0003")
    with pytest.raises(InputError, match=r"1 of other parameters: jax drops unused arguments"):
        find_module_dump(tmp_path, "jit_total", ["f32[8]", "f32[2]"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    folder = tmp_path_factory.mktemp("recorded-arguments")
    store = LocalStore.open(folder / "store", create=True)
    result = capture(EXAMPLE / "spec.yaml", store)
    assert result.ok, result.warnings
    printed = store.read_log(result.run_id, "stdout")
    found = re.search(r"1 device (\S+), 4 devices (\S+), difference (\S+)", printed)
    assert found, printed
    one, four, difference = (float(v) for v in found.groups())
    sharded = [
        m
        for m in store.index.modules(result.run_id)
        if any(f.kind == "snapshot" for f in store.index.module(result.run_id, m.module_id).files)
    ]
    assert len(sharded) == 1  # the 4-device compile only: record_arguments found its dump among two jit_total
    return folder / "store", f"{result.run_id}/module_{sharded[0].module_id:04d}", one, four, difference


def _json(cli, *args):
    result = cli(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.slow
def test_bisect_on_the_recorded_arguments_finds_what_fake_data_misses(cli, recorded):
    store, ref, one, four, difference = recorded
    assert difference > 100 and four != one  # the job's own two results differ
    code, fake = _json(cli, "bisect", ref, "--inputs", "fake", "--store", store)
    assert code == 0 and fake["verdict"] == "no-divergence" and fake["arguments"] == "fake"
    assert fake["devices"] == 4
    assert fake["largest"]["max_abs_error"] < 1e-3  # normal values: the split sum moves by rounding only
    assert "record_arguments" in fake["warnings"][-1]
    text = cli("bisect", ref, "--inputs", "fake", "--store", store).stdout
    assert "no step diverges on fake data: not a clean bill" in " ".join(text.split())
    code, real = _json(cli, "bisect", ref, "--store", store)
    assert code == 1 and real["verdict"] == "diverged" and real["arguments"] == "snapshot"
    assert real["error_after"]["devices"] == 4
    assert real["error_after"]["max_abs_error"] == pytest.approx(difference)  # the job's own 1- vs 4-device gap
    assert real["error_before"]["max_abs_error"] == 0.0


@pytest.mark.slow
def test_partitioned_replay_runs_on_the_recorded_arguments_and_matches_the_jobs_result(cli, recorded):
    store, ref, one, four, difference = recorded
    code, data = _json(cli, "replay", ref, "--store", store)
    assert data["arguments"] == "snapshot" and data["devices"] == 4
    assert data["source"].endswith("cpu_after_optimizations.txt")  # what ran on the 4 devices, not the snapshot's module
    assert data["compared_with"][0] == "recorded result"
    # the 4 devices give the job's 4-device result; the program on one device gives its 1-device one
    assert code == 1 and data["mismatches"] == [f"output 0 []: expected {one}, got {four}"]
    assert data["max_abs_error"] == pytest.approx(difference)
    code, fake = _json(cli, "replay", ref, "--inputs", "fake", "--store", store)
    assert code == 0 and fake["arguments"] == "fake" and fake["verdict"] == "match"
    assert not any("taken from" in w for w in fake["warnings"])
