"""Modules across the processes of one run: grouped by fingerprint, desync flagged (navigate/desync.py)."""

from __future__ import annotations

from xlarun.navigate.compiles import tell_compiles_apart
from xlarun.navigate.desync import compare_processes, module_across_processes
from xlarun.store.records import ModuleInfo


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


def test_a_module_only_some_processes_compiled_is_a_desync_saying_which_did_not():
    report = compare_processes(
        [module(5, "jit_step", "aa", 0), module(1_000_005, "jit_step", "aa", 1), module(6, "jit_extra", "cc", 0)]
    )
    (extra,) = report.desync
    assert (extra.name, extra.missing) == ("jit_extra", [1])
    assert "not compiled by process 1" in extra.line()
    assert module_across_processes(report, 1_000_005).name == "jit_step"
    assert module_across_processes(None, 5) is None


def test_the_same_function_on_two_processes_is_not_a_recompile():
    modules = [module(5, "jit_step", "aa", 0), module(1_000_005, "jit_step", "aa", 1)]
    assert tell_compiles_apart(modules, lambda m: None) == []
    twice = [*modules, module(7, "jit_step", "dd", 0)]
    assert [(r.module_id, r.first) for r in tell_compiles_apart(twice, lambda m: None)] == [(7, 5)]
