"""``python -m bench.profile --zoo``: a zoo program's real step timed plain and profiled, its op events counted; and
the benchmarks page's tables made from the profile and scale results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_zoo_section_times_a_real_step_and_counts_its_op_events(tmp_path):
    pytest.importorskip("jax")
    out = tmp_path / "profile.json"
    argv = [
        sys.executable,
        "-m",
        "bench.profile",
        "--zoo-only",
        "--zoo",
        "bf16",
        "--steps",
        "4",
        "--rounds",
        "2",
        "--out",
        str(out),
    ]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["sizes"] == {} and results["zoo_host_tracer_level"] == 2
    bf16 = results["zoo"]["bf16"]
    assert bf16["step"] == "bf16_step" and bf16["devices"] == 1
    assert bf16["step_s"]["plain"] > 0 and bf16["step_s"]["profiled"] > 0
    # every call of the step executes the same thunks: a whole number of op events a step
    assert bf16["op_events_per_step"] == int(bf16["op_events_per_step"]) >= 1
    added = bf16["step_s"]["profiled"] - bf16["step_s"]["plain"]
    per_event = 1e6 * added / bf16["op_events_per_step"]  # the step times are recorded to the microsecond
    assert bf16["added_us_per_op_event"] == pytest.approx(per_event, abs=1 / bf16["op_events_per_step"] + 0.01)
    from bench.profile import format_markdown

    assert "| zoo bf16 (bf16_step) | 1 |" in format_markdown(results)


def test_the_scale_table_holds_each_command_to_its_sizes_target():
    from bench.scale import format_markdown

    row = {"median_s": 0.1}
    results = {
        "repeats": 3,
        "sizes": {
            "10000": {"load_1m_before": 4.0, "profile": row, "memory": {"median_s": 0.2}, "python_c_pass_s": 0.02},
            "100000": {"load_1m_before": 5.0, "profile": {"median_s": 0.4}, "memory": {"median_s": 0.6}},
        },
    }
    table = format_markdown(results)
    assert "| xlarun profile | 0.100 s (met) | 0.400 s (met) |" in table
    assert "| xlarun memory | 0.200 s (unmet) | 0.600 s (unmet) |" in table
    assert "| xlarun modules --by time | - | - |" in table
    assert "| `python -c pass` | 0.020 s | - |" in table
