"""The archive floor's measure: each step of the required work timed on a real dump folder, and the floor's arithmetic."""

from __future__ import annotations

from pathlib import Path

from bench.archive_floor import measure_floor, required_work


def _dump(root: Path) -> Path:
    """Two modules' HLO text: stage dumps and a series of pass dumps each, as XLA names and prints them."""
    dump = root / "dump"
    dump.mkdir()
    for module in range(2):
        body = "".join(f"  %x.{i} = f32[] add(f32[] %a, f32[] %b)\n" for i in range(300))
        text = f"HloModule m{module}\n\nENTRY %main (a: f32[], b: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n{body}  ROOT %r = f32[] add(f32[] %a, f32[] %b)\n}}\n"
        prefix = f"module_{module:04d}.jit_f{module}"
        (dump / f"{prefix}.before_optimizations.txt").write_text(text)
        (dump / f"{prefix}.cpu_after_optimizations.txt").write_text(text)
        for step in range(5):
            (dump / f"{prefix}.cpu.{step:04d}.pass{step}.after_p.before_q.txt").write_text(text + f"// {step}\n")
    return dump


def test_each_step_of_the_required_work_is_timed(tmp_path):
    steps = required_work(_dump(tmp_path))
    assert set(steps) == {"read", "hash", "compress", "parse", "count"}
    assert all(cpu >= 0 for cpu in steps.values())
    assert steps["parse"] > 0  # four stage dumps parsed, two of them in full for the fingerprint


def test_the_floor_is_the_overlapped_work_over_the_cpus_two_threads_get_plus_the_index(tmp_path):
    floor = measure_floor(_dump(tmp_path), repeats=1)
    overlapped = sum(floor[s] for s in ("read", "hash", "compress", "parse", "count"))
    assert floor["share"] > 0 and floor["index_after_commit"] > 0  # the share: timed, so above 2 when the lone run is disturbed
    assert abs(floor["wall_floor_s"] - (overlapped / floor["share"] + floor["index_after_commit"])) < 2e-3
    assert abs(floor["wall_floor_x_cat"] - floor["wall_floor_s"] / floor["cat"]) < 0.02 * floor["wall_floor_x_cat"] + 0.01
