"""Dump files of one process of a many-process job (hlo/process_dirs.py, and how names.py reads their paths)."""

from __future__ import annotations

from xlarun.hlo.names import decode_dump_name
from xlarun.hlo.process_dirs import PROCESS_STRIDE, process_of_dir, run_module_id, xla_module_id


def test_a_file_in_a_process_folder_is_that_process_module_offset_by_the_stride():
    name = decode_dump_name("process-1/module_0005.jit_step.before_optimizations.txt")
    assert (name.process, name.module_id, name.module_name, name.stage) == (1, 1_000_005, "jit_step", "before_optimizations")
    assert xla_module_id(name.module_id, name.process) == 5


def test_process_0_keeps_xla_ids_and_module_0_of_process_1_is_not_lost():
    assert decode_dump_name("process-0/module_0007.jit_f.cpu_after_optimizations.txt").module_id == 7
    assert decode_dump_name("process-1/module_0000.jit_f.before_optimizations.txt").module_id == PROCESS_STRIDE
    assert run_module_id(2, None) is None


def test_a_dump_of_one_process_has_no_process():
    name = decode_dump_name("module_0005.jit_step.before_optimizations.txt")
    assert (name.process, name.module_id) == (None, 5)


def test_only_process_folders_of_a_run_size_count():
    assert [process_of_dir(n) for n in ("process-0", "process-63", "process-64", "process-x", "host0", "process-007")] == [
        0,
        63,
        None,
        None,
        None,
        None,
    ]
    # a folder that is not a process's is read as before: its module ids are XLA's
    assert decode_dump_name("process-64/module_0005.jit_step.before_optimizations.txt").module_id == 5


def test_explain_says_which_process_and_xla_s_own_name():
    words = dict(decode_dump_name("process-1/module_0005.jit_step.before_optimizations.txt").describe())
    assert words["module id"] == "1000005 (module_1000005; process 1's module_0005 as XLA named it)"
