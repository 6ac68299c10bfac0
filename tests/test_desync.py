"""Modules across the processes of one run: grouped by fingerprint, desync flagged (navigate/desync.py)."""

from __future__ import annotations

import json

import pytest

from xlarun.navigate.compiles import tell_compiles_apart
from xlarun.navigate.desync import compare_processes, module_across_processes
from xlarun.store.rows import ModuleInfo

from .conftest import REPO, write_spec

EXAMPLE = REPO / "examples" / "multiprocess"


def module(module_id: int, name: str, fingerprint: str | None, process: int | None) -> ModuleInfo:
    return ModuleInfo(
        "r", module_id, name, "cpu", [], 0, 1, 3, 3, 0, {}, {}, "(f32[4]) -> f32[4]", fingerprint, 0, False, None, process=process
    )


def test_a_run_of_one_process_has_no_cross_process_report():
    assert compare_processes([module(1, "jit_f", "aa", None), module(2, "jit_g", "bb", None)]) is None
    # one process's modules alone (a bundle of process 1's step) have nothing to be compared with
    assert compare_processes([module(1_000_005, "jit_step", "aa", 1)]) is None


def test_the_same_hlo_on_every_process_is_one_module_compiled_alike():
    report = compare_processes([module(5, "jit_step", "aa", 0), module(1_000_005, "jit_step", "aa", 1)])
    assert report is not None and report.processes == [0, 1]
    assert [(m.label, m.desync) for m in report.modules] == [("module_0005.jit_step", False)]
    assert report.summary() == "2 processes: 1 module(s) compiled alike by every process (same fingerprint); no desync"
    assert report.to_json()["identical"][0]["module_ids"] == {"0": 5, "1": 1_000_005}


def test_other_hlo_for_the_same_step_is_a_desync_naming_both_fingerprints():
    report = compare_processes(
        [
            module(0, "jit_init", "00", 0),
            module(1_000_000, "jit_init", "00", 1),
            module(5, "jit_step", "aaaaaaaaaa", 0),
            module(1_000_005, "jit_step", "bbbbbbbbbb", 1),
        ]
    )
    assert [m.label for m in report.desync] == ["module_0005.jit_step"]
    assert report.desync[0].line() == (
        "module_0005.jit_step: other HLO on other processes: process 0 aaaaaaaa, process 1 bbbbbbbb"
        " (`xlarun diff 5 1000005` shows how)"
    )
    assert report.summary().endswith("1 module(s) compiled alike by every process (same fingerprint); DESYNC in 1:")
    assert report.to_json()["desync"][0]["fingerprints"] == {"0": "aaaaaaaaaa", "1": "bbbbbbbbbb"}


def test_a_module_only_one_process_compiled_is_only_on_that_process_not_a_desync():
    report = compare_processes(
        [module(5, "jit_step", "aa", 0), module(1_000_005, "jit_step", "aa", 1), module(6, "jit_extra", "cc", 0)]
    )
    assert report.desync == []
    (extra,) = report.only_some
    assert (extra.name, extra.missing, extra.only_on) == ("jit_extra", [1], [0])
    assert extra.line() == (
        "module_0006.jit_extra: only on process 0 (module 6); no collectives: a step of its own (logging, eval), not a desync"
    )
    assert report.summary() == (
        "2 processes: 1 module(s) compiled alike by every process (same fingerprint); 1 on some processes only"
        " (no collectives); no desync"
    )
    assert module_across_processes(report, 1_000_005).name == "jit_step"
    assert module_across_processes(None, 5) is None


def test_an_extra_jit_first_on_one_process_shifts_its_numbers_but_pairs_the_rest_by_fingerprint():
    # process 1 compiles a logging step first: every later module of process 1 has XLA's number one higher
    names = [("jit_init", "f0"), ("jit_step", "f1"), ("jit_eval", "f2"), ("jit_step", "f3")]
    zero = [module(k, name, fp, 0) for k, (name, fp) in enumerate(names)]
    one = [module(1_000_000, "jit_log", "99", 1)] + [module(1_000_001 + k, n, fp, 1) for k, (n, fp) in enumerate(names)]
    report = compare_processes(zero + one)
    assert [(m.name, [c.module_id for c in m.compiles]) for m in report.identical] == [
        ("jit_init", [0, 1_000_001]),
        ("jit_step", [1, 1_000_002]),
        ("jit_eval", [2, 1_000_003]),
        ("jit_step", [3, 1_000_004]),
    ]
    assert [(m.name, m.only_on) for m in report.only_some] == [("jit_log", [1])] and report.desync == []
    assert report.summary().startswith("2 processes: 4 module(s) compiled alike by every process")
    # the counts agree with the lines: one line per module of each kind
    found = report.to_json()
    assert (len(found["identical"]), len(found["only_on_some"]), len(found["desync"])) == (4, 1, 0)


def test_a_module_only_some_processes_run_with_collectives_is_a_desync_a_hang():
    step = module(3, "jit_step", "aa", 0)
    step.opcodes_after = {"all-reduce": 2, "dot": 1}
    report = compare_processes([module(1, "jit_init", "00", 0), module(1_000_001, "jit_init", "00", 1), step])
    (hang,) = report.desync
    assert (
        hang.line()
        == "module_0003.jit_step: only on process 0 (module 3), with 2 collective(s) that process 1 never join(s): a hang"
    )
    assert report.summary().endswith("; DESYNC in 1:") and report.only_some == []


def test_the_same_function_compiled_with_other_shapes_is_paired_by_name_and_says_the_shapes():
    a, b = module(2, "jit_step", "aaaaaaaaaa", 0), module(1_000_003, "jit_step", "bbbbbbbbbb", 1)
    a.entry_signature, b.entry_signature = "(f32[16,16]) -> f32[]", "(f32[24,16]) -> f32[]"
    report = compare_processes([a, b, module(1_000_002, "jit_log", "cc", 1)])
    (step,) = report.desync
    assert step.line() == (
        "module_0002.jit_step: other HLO on other processes: process 0 aaaaaaaa, process 1 module 1000003 bbbbbbbb;"
        " other shapes: process 0 (f32[16,16]) -> f32[], process 1 (f32[24,16]) -> f32[] (`xlarun diff 2 1000003` shows how)"
    )
    assert [m.name for m in report.only_some] == ["jit_log"]


def test_three_processes_two_alike_one_other_is_one_desync_not_two_partial_modules():
    report = compare_processes(
        [module(2, "jit_step", "aa", 0), module(1_000_002, "jit_step", "aa", 1), module(2_000_002, "jit_step", "bb", 2)]
    )
    assert [(m.name, m.fingerprints, m.missing) for m in report.modules] == [("jit_step", ["aa", "bb"], [])]
    assert report.to_json()["desync"][0]["fingerprints"] == {"0": "aa", "1": "aa", "2": "bb"}


def test_the_same_function_on_two_processes_is_not_a_recompile():
    modules = [module(5, "jit_step", "aa", 0), module(1_000_005, "jit_step", "aa", 1)]
    assert tell_compiles_apart(modules, lambda m: None) == []
    twice = [*modules, module(7, "jit_step", "dd", 0)]
    assert [(r.module_id, r.first) for r in tell_compiles_apart(twice, lambda m: None)] == [(7, 5)]


@pytest.fixture(scope="module")
def desync_runs(tmp_path_factory):
    """Real two-process jax.distributed jobs of examples/multiprocess/program.py: process 1 compiles a logging step
    first; process 1 feeds other shapes; process 1 stalls while process 0 waits in the step's all-reduce."""
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path_factory.mktemp("desync") / "store")
    extra = capture(EXAMPLE / "extra_jit.yaml", store)
    shapes = capture(EXAMPLE / "shape_desync.yaml", store)
    hang_spec = (EXAMPLE / "spec.yaml").read_text().replace("timeout: 3m", "timeout: 20s")
    hang_spec = hang_spec.replace("script: program.py", f"script: {EXAMPLE / 'program.py'}")
    hang = capture(write_spec(tmp_path_factory.mktemp("hang"), hang_spec + 'args: ["--stall-on", "1"]\n'), store)
    return store, extra, shapes, hang


@pytest.mark.slow
def test_an_extra_jit_on_one_process_is_only_on_it_and_every_other_module_is_alike(desync_runs, cli):
    store, extra, _shapes, _hang = desync_runs
    found = json.loads(cli("modules", extra.run_id, "--store", store.root, "--json").stdout)["processes"]
    assert found["desync"] == []
    assert sorted(m["name"] for m in found["identical"]) == ["jit__lambda", "jit_train_step"]
    step = next(m for m in found["identical"] if m["name"] == "jit_train_step")
    # process 1's numbers are shifted by its extra compile, and its step is still paired with process 0's
    assert step["module_ids"]["1"] - 1_000_000 > step["module_ids"]["0"]
    (log,) = found["only_on_some"]
    assert (log["name"], log["missing_on"], list(log["module_ids"]), log["collectives"]) == ("jit_norm", [0], ["1"], 0)
    out = cli("modules", extra.run_id, "--store", store.root).stdout.replace("\n", " ")
    assert (
        "2 processes: 2 module(s) compiled alike by every process (same fingerprint);"
        " 1 on some processes only (no collectives); no desync" in out
    )
    assert "extra module_0000.jit_norm: only on process 1" in out and "DESYNC" not in out
    assert out.count(" extra module_") == 1 and out.count(" desync module_") == 0  # as many lines as the counts say
    shown = cli("show", f"{extra.run_id}/{log['module_ids']['1']}", "--store", store.root).stdout
    assert "only on process 1" in shown and "no other process compiled the same HLO" in shown


@pytest.mark.slow
def test_a_shape_desync_is_one_module_in_desync_naming_each_process_shapes(desync_runs, cli):
    store, _extra, shapes, _hang = desync_runs
    found = json.loads(cli("modules", shapes.run_id, "--store", store.root, "--json").stdout)["processes"]
    assert [m["name"] for m in found["identical"]] == ["jit__lambda"] and found["only_on_some"] == []
    (step,) = found["desync"]
    assert step["name"] == "jit_train_step" and step["missing_on"] == []
    # 4 and 6 rows per device on 4 devices: each process sees its own global batch, 16 or 24 rows
    assert "f32[16,16]" in step["signatures"]["0"] and "f32[24,16]" in step["signatures"]["1"]
    assert "other shapes: process 0 (f32[16,4], f32[16,16])" in step["line"]
    out = cli("modules", shapes.run_id, "--store", store.root).stdout.replace("\n", " ")
    assert "1 module(s) compiled alike by every process (same fingerprint); DESYNC in 1:" in out
    assert out.count(" desync module_") == 1 and out.count(" extra module_") == 0


@pytest.mark.slow
def test_a_step_one_process_never_reaches_is_a_hang_in_its_collective(desync_runs, cli):
    store, _extra, _shapes, hang = desync_runs
    assert hang.status.value == "timed_out"  # process 0 waited in the all-reduce until the run's timeout
    found = json.loads(cli("modules", hang.run_id, "--store", store.root, "--json").stdout)["processes"]
    (step,) = found["desync"]
    assert (step["name"], step["missing_on"], step["collectives"]) == ("jit_train_step", [1], 1)
    assert step["line"].endswith("with 1 collective(s) that process 1 never join(s): a hang")
