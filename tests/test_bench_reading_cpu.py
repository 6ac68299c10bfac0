"""bench/reading_cpu.py: the reading commands paired with ``import typer`` in CPU, as issue 36 measures them."""

from __future__ import annotations

import pytest
from bench.reading_cpu import COMMANDS, TARGET, format_markdown, measure_reading_cpu


def test_each_reading_command_is_paired_with_import_typer_on_a_grown_store(tmp_path):
    results = measure_reading_cpu([3], rounds=1, workdir=tmp_path)
    row = results["sizes"]["3"]
    assert results["target"] == TARGET == 1.2
    assert row["typer_import_cpu_s"] > 0
    for name in ("typer_app", *COMMANDS):
        assert row[name]["cpu_s"] > 0 and row[name]["ratio"] > 0, name
        assert row[name]["ratio"] == pytest.approx(row[name]["cpu_s"] / row["typer_import_cpu_s"], rel=0.01), name  # one round
    assert {name: row[name]["met"] for name in COMMANDS} == {name: row[name]["ratio"] <= TARGET for name in COMMANDS}
    # a second call grows the same store further instead of building it again
    again = measure_reading_cpu([5], rounds=1, workdir=tmp_path)
    assert list(again["sizes"]) == ["5"] and len(list((tmp_path / "store" / "runs").iterdir())) == 5
    # the benchmarks page's table: one row per size, each command's ratio and whether it met the target
    table = format_markdown(again).splitlines()
    [row5] = [line for line in table if line.startswith("| 5 |")]
    for name in COMMANDS:
        assert f"{again['sizes']['5'][name]['ratio']}x" in row5, name
    assert row5.count("(not met)") == sum(not again["sizes"]["5"][name]["met"] for name in COMMANDS)
