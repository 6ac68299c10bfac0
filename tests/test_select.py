"""xlarun.navigate.select: which file of a module a --stage / --pass / --step / --format means, one rule for every command.

Synthetic modules built from real XLA dump names (as a JAX 0.10 CPU capture with dump.pass_re and dot wrote
them, and a GPU run's names from a public XLA issue), so no framework is needed.
"""

from __future__ import annotations

import pytest

from xlarun.errors import InputError
from xlarun.hlo.names import decode_dump_name
from xlarun.navigate.select import AFTER, BEFORE, parse_stage, pass_step, select_file, stage_of
from xlarun.store.rows import FileInfo, ModuleInfo

CPU_NAMES = [
    "module_0012.jit_train_step.before_optimizations.txt",
    "module_0012.jit_train_step.before_optimizations.hlo.pb",
    "module_0012.jit_train_step.before_optimizations.dot",
    "module_0012.jit_train_step.cpu_after_optimizations.txt",
    "module_0012.jit_train_step.cpu_after_optimizations.hlo.pb",
    "module_0012.jit_train_step.cpu_after_optimizations.dot",
    "module_0012.jit_train_step.cpu_after_optimizations-buffer-assignment.txt",
    "module_0012.jit_train_step.cpu_after_optimizations-memory-usage-report.txt",
    "module_0012.jit_train_step.cpu_after_optimizations-memory-usage-report.pb",
    "module_0012.jit_train_step.debug_options",
    "module_0012.jit_train_step.0000.sharding-removal.after_control-dep-rewriter.before_dce.txt",
    "module_0012.jit_train_step.0001.sharding-removal.after_dce.before_pipeline-end.txt",
    "module_0012.jit_train_step.0002.simplification.after_simplify-sorts.before_dce.txt",
    "module_0012.jit_train_step.0003.simplification.after_dce.before_gather_expander.txt",
    "module_0012.jit_train_step.0003.simplification.after_dce.before_gather_expander.hlo.pb",
    "module_0012.jit_train_step.0004.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt",
]
# the content of each file: step 1 (dce) changed nothing, step 3 (dce again) did
CONTENT = {0: "a", 1: "a", 2: "b", 3: "c", 4: "d"}


def _module(names: list[str]) -> ModuleInfo:
    files = []
    for path in names:
        d = decode_dump_name(path)
        digest = f"{CONTENT[d.step]}-{d.format}" if d.kind == "pass" else f"{path}"
        if d.kind == "hlo" and d.stage == BEFORE and d.format == "text":
            digest = "start"
        files.append(FileInfo(path, digest, 100, d.kind, d.format, d.stage, d.step, d.pipeline, d.after_pass, d.before_pass))
    stages = sorted(
        {"before_optimizations" if "before_opt" in n else "cpu_after_optimizations" for n in names if ".pass" not in n}
    )
    return ModuleInfo(
        "20261123-125145-451a",
        12,
        "jit_train_step",
        "cpu",
        stages,
        5,
        len(files),
        159,
        204,
        8,
        {},
        {},
        None,
        None,
        0,
        False,
        None,
        files=files,
    )


@pytest.fixture
def module() -> ModuleInfo:
    return _module(CPU_NAMES)


@pytest.mark.parametrize(
    "spelling", [None, "", "before", "before_optimizations", "BEFORE", "before-optimizations", "unoptimized"]
)
def test_every_spelling_of_before_picks_the_text_dump_before_optimizations(module, spelling):
    assert select_file(module, spelling).path == "module_0012.jit_train_step.before_optimizations.txt"


@pytest.mark.parametrize(
    "spelling", ["after", "after_optimizations", "cpu_after_optimizations", "gpu_after_optimizations", "optimized", "After"]
)
def test_every_spelling_of_after_including_what_show_prints_picks_the_optimized_text(module, spelling):
    assert select_file(module, spelling).path == "module_0012.jit_train_step.cpu_after_optimizations.txt"
    assert select_file(module, spelling, purpose="graph").path.endswith("cpu_after_optimizations.txt")


@pytest.mark.parametrize(
    ("spelling", "path"),
    [
        ("buffer-assignment", "module_0012.jit_train_step.cpu_after_optimizations-buffer-assignment.txt"),
        ("buffer_assignment", "module_0012.jit_train_step.cpu_after_optimizations-buffer-assignment.txt"),
        ("cpu_after_optimizations-buffer-assignment", "module_0012.jit_train_step.cpu_after_optimizations-buffer-assignment.txt"),
        ("memory-usage-report", "module_0012.jit_train_step.cpu_after_optimizations-memory-usage-report.txt"),
        ("debug-options", "module_0012.jit_train_step.debug_options"),
        (
            "module_0012.jit_train_step.cpu_after_optimizations.hlo.pb",
            "module_0012.jit_train_step.cpu_after_optimizations.hlo.pb",
        ),
    ],
)
def test_reports_and_file_names_are_read_as_show_lists_them(module, spelling, path):
    assert select_file(module, spelling).path == path


def test_a_report_is_refused_for_drawing_with_the_command_that_prints_it(module):
    with pytest.raises(InputError) as caught:
        select_file(module, "buffer-assignment", purpose="graph")
    assert "not an HLO module to draw" in caught.value.message
    assert "xlarun cat 20261123-125145-451a/module_0012 --stage buffer-assignment" in caught.value.hint


def test_an_unknown_stage_names_what_the_module_has(module):
    with pytest.raises(InputError) as caught:
        select_file(module, "bogus")
    assert "before (before_optimizations)" in caught.value.hint and "buffer-assignment" in caught.value.hint


def test_formats_are_narrowed_in_any_spelling_and_purposes_order_them(module):
    assert select_file(module, "after", fmt="pb").path.endswith("cpu_after_optimizations.hlo.pb")
    assert select_file(module, "after", fmt="proto").path.endswith("cpu_after_optimizations.hlo.pb")
    assert select_file(module, "after", purpose="dot").path.endswith("cpu_after_optimizations.dot")
    no_text = _module([n for n in CPU_NAMES if not n.endswith("before_optimizations.txt")])
    assert select_file(no_text, "before", purpose="graph").path.endswith("before_optimizations.hlo.pb")  # text, else proto
    no_dot = _module([n for n in CPU_NAMES if not n.endswith(".dot")])
    with pytest.raises(InputError, match=r"no XLA's \.dot drawing"):
        select_file(no_dot, "after", purpose="dot")


def test_a_pass_means_its_first_run_that_changed_the_module(module):
    # dce ran at step 1 (no change) and step 3 (a change): diff --pass and cat --pass agree on step 3
    assert pass_step(module, "dce") == (3, [1])
    assert select_file(module, pass_name="dce").path.startswith("module_0012.jit_train_step.0003.")
    assert select_file(module, pass_name="dce").format == "text"
    assert select_file(module, pass_name="dce", fmt="proto").path.endswith(
        "0003.simplification.after_dce.before_gather_expander.hlo.pb"
    )
    assert select_file(module, pass_name="sharding-removal/dce").step == 1  # PIPELINE/PASS narrows it
    assert select_file(module, step=1).after_pass == "dce"
    assert select_file(module, pass_name="fusion").step == 4


def test_a_misspelt_pass_gets_close_names_and_a_module_without_passes_says_how_to_dump_them(module):
    with pytest.raises(InputError) as caught:
        select_file(module, pass_name="fusio")
    assert "did you mean fusion" in caught.value.hint
    bare = _module([n for n in CPU_NAMES if ".00" not in n])
    with pytest.raises(InputError) as caught:
        select_file(bare, pass_name="fusion")
    assert "dump.pass_re" in caught.value.hint
    with pytest.raises(InputError, match="at step 99"):
        select_file(module, step=99)


def test_stage_of_reads_only_stages():
    assert stage_of("cpu_after_optimizations") == AFTER and stage_of(None) == BEFORE and stage_of("before") == BEFORE
    with pytest.raises(InputError, match="unknown stage"):
        stage_of("buffer-assignment")
    assert parse_stage("sm_8.0_gpu_after_optimizations").stage == AFTER  # a GPU target prefix, as GPU dumps name it
    assert parse_stage("sm_8.0_gpu_after_optimizations-buffer-assignment").kind == "buffer-assignment"


def test_the_kind_hlo_means_any_stage_and_a_missing_format_says_so_without_none(module):
    # '--stage hlo' names the kind the files are listed under: the module at any stage, before first
    assert select_file(module, "hlo").path == "module_0012.jit_train_step.before_optimizations.txt"
    with pytest.raises(InputError) as caught:
        select_file(module, "hlo", fmt="proto.gz")
    assert caught.value.message == "module_0012.jit_train_step has no format proto.gz dump at stage any (only dot, proto, text)"
