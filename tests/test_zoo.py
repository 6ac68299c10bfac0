"""The zoo (examples/zoo): every xlarun feature on every real program, through scripts/zoo.py's harness.

One slow test per program: it captures the program twice into its own store and runs modules, show, replay,
render, diff, bisect, bundle -> import -> replay and report on the program's step. Cells that fail today because
of xlarun bugs are xfail(strict=True) so they flip when the fix lands.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from xlarun.capture.spec_yaml import load_spec

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("zoo_harness", ROOT / "scripts" / "zoo.py")
assert _spec and _spec.loader
zoo = importlib.util.module_from_spec(_spec)
sys.modules["zoo_harness"] = zoo
_spec.loader.exec_module(zoo)

# program -> the features that fail today, and why (the bug xlarun has to fix)
KNOWN_BUGS: dict[str, dict[str, str]] = {}  # none today; a documented refusal is zoo.EXPECTED_BISECT's, not a bug


def test_every_zoo_folder_has_a_valid_spec_and_a_step_name():
    folders = sorted(p.name for p in zoo.ZOO.iterdir() if (p / "spec.yaml").is_file())
    assert folders == sorted(zoo.STEPS)
    for name in folders:
        loaded = load_spec(zoo.ZOO / name / "spec.yaml")
        assert loaded.spec.name == "zoo-" + name.replace("_", "-")
        assert loaded.script == zoo.ZOO / name / "program.py"


def _params():
    for name in zoo.STEPS:
        marks = [pytest.mark.slow]
        if name in KNOWN_BUGS:
            reason = "; ".join(f"{f}: {why}" for f, why in KNOWN_BUGS[name].items())
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_every_feature_on_the_zoo_program(name, tmp_path):
    pytest.importorskip("tensorflow" if name.startswith("tf") else "jax")
    runner = zoo.Runner(tmp_path / "store", timeout=300)
    result = zoo.run_program(name, runner, tmp_path)
    cells = result["cells"]
    failing = {f: c["note"] for f, c in cells.items() if not c["ok"] and not c.get("refused")}
    assert not failing, f"{name}: {failing}"
    assert set(cells) == set(zoo.FEATURES)
    assert zoo.STEPS[name] in result["step"]
    assert cells["modules"]["note"].startswith(f"first '{result['step']}'")
    replay = cells["replay"]["note"]
    assert "compared with" in replay
    if "compared with  nothing" not in replay:  # a snapshot or a reference platform was compared: it must match
        assert replay.startswith("match")
    expected = zoo.EXPECTED_BISECT.get(name)
    if expected is None:
        assert cells["bisect"]["note"].startswith("no step diverges")
    elif expected[0] == "culprit":  # bf16: a true culprit that must stay on, named as such
        assert cells["bisect"]["ok"] and cells["bisect"]["note"] == f"culprit {expected[1]}, as expected"
    else:  # a documented refusal: one line, exit 2
        assert cells["bisect"]["refused"] and cells["bisect"]["rc"] == 2
    if name.startswith("sharded"):  # bisected on its 8 devices (steps after the SPMD partitioner), not refused
        assert "steps run on 8 devices" in cells["bisect"]["note"]
    assert [f for f, c in cells.items() if c.get("refused")] == (["bisect"] if expected and expected[0] == "refused" else [])


@pytest.mark.slow
def test_the_drift_program_differs_between_one_device_and_eight():
    """examples/zoo/sharded_drift: the same jitted sum on 1 device and over 8 gives two results, the same two on
    every run (seeded data; XLA's order of additions is fixed for a module)."""
    pytest.importorskip("jax")
    import os
    import re
    import subprocess

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    program = zoo.ZOO / "sharded_drift" / "program.py"
    printed = [
        subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=env, timeout=300).stdout
        for _ in range(2)
    ]
    assert printed[0] == printed[1]
    found = re.search(r"1 device (\S+)  8 devices (\S+)  difference (\S+)  float64 (\S+)", printed[0])
    assert found, printed[0]
    one, eight, difference, exact = map(float, found.groups())
    assert difference == abs(one - eight) >= 1.0  # float32 sums in two orders, far apart for a sum of about 90
    assert abs(one - exact) < 10 and abs(eight - exact) < 10


@pytest.mark.slow
def test_a_zoo_programs_measured_time_and_peak(tmp_path):
    """scripts/zoo.py's measurement of one program: its step's time from a profiled capture, the execution's and the
    call's wall time read from jax's trace independently, and the peak equal to jax's own Compiled.memory_analysis()."""
    pytest.importorskip("flax")
    runner = zoo.Runner(tmp_path / "store", timeout=300)
    measured = zoo.measure_program("flax_nnx", runner, tmp_path)
    assert "error" not in measured, measured
    assert measured["module"] == "jit_train_step" and measured["executions"] == 2 and measured["devices"] == 1
    assert 0 < measured["step_s"] < measured["first_s"]  # the first execution carries one-time set-up
    assert 0.5 < measured["ops_fill"] <= 1.0  # the ops fill their execution's span: no idle gaps between them
    assert measured["call_s"] > 0 and measured["ops_over_call"] == measured["step_s"] / measured["call_s"]
    # the ops' self times fit in the wall time XLA's runtime took to execute the step (read from jax's trace with
    # ProfileData, its ThunkExecutor::Execute event) and fill most of it
    assert measured["execution_s"] > 0 and 0.5 < measured["ops_over_execution"] <= 1.0
    jax_says = measured["jax_memory_analysis"]
    assert measured["peak_matches_jax"] and measured["peak_bytes"] == jax_says["peak_bytes"]
    assert jax_says["aliased"] > 0  # the step donates its parameters and optimizer state
    assert f"| flax_nnx | jit_train_step | {zoo._duration(measured['step_s'])} |" in zoo.measured_table(
        {"date": "d", "programs": {"flax_nnx": {"cells": {}, "measured": measured}}}
    )
