"""replay/runner_argv.py: every command line of XLA's runners, checked against the flags each supported XLA defines.

The fixtures (tests/runner_flags.py) list, per XLA commit of each jaxlib of the compatibility matrix, the flags
``run_hlo_module`` and ``hlo_runner_main`` define; a flag a runner does not define is taken for an input file, so
a line holding one fails on that XLA version.
"""

from __future__ import annotations

import itertools

import pytest

from tests.runner_flags import fixtures
from xlarun.errors import InputError
from xlarun.replay.options import ReplayOptions
from xlarun.replay.runner_argv import VERSION_SPECIFIC, flags_from_usage, runner_command, xla_platform

SNAPSHOT = "dump/module_0006.jit_f.snapshot.304912769.pb"
BEFORE_TXT = "dump/module_0006.jit_f.before_optimizations.txt"
BEFORE_PB = "dump/module_0006.jit_f.before_optimizations.hlo.pb"
AFTER_TXT = "dump/module_0006.jit_f.sm_8.0_gpu_after_optimizations.txt"
FILES = (SNAPSHOT, BEFORE_TXT, BEFORE_PB, AFTER_TXT, "m.hlo.pbtxt", "m.snapshot.3.pb.gz")
#: Option sets that between them switch on every flag xlarun can pass.
OPTIONS = (
    ReplayOptions(),
    ReplayOptions(platform="cuda", reference_platform="cpu", iterations=4, seed=3, print_literals=True, inputs="fake"),
    ReplayOptions(platform="rocm", abs_error_bound=0.5, rel_error_bound=0.25, seed=0),
)
RUNNERS = ("run_hlo_module", "hlo_runner_main")


def _flag_names(argv: list[str]) -> set[str]:
    return {a[2:].split("=")[0] for a in argv[1:] if a.startswith("--")}


def _all_lines(runner: str, defined) -> list[list[str]]:
    return [runner_command(runner, f, o, defined=defined).argv for f, o in itertools.product(FILES, OPTIONS)]


# ---- exact lines, per runner and platform ----

EXACT = {
    ("run_hlo_module", "cpu"): ["--platform=CPU", "--reference_platform=", "--input_format=hlo", "--iterations=1"],
    ("run_hlo_module", "gpu"): ["--platform=CUDA", "--reference_platform=", "--input_format=hlo", "--iterations=1"],
    ("run_hlo_module", "cuda"): ["--platform=CUDA", "--reference_platform=", "--input_format=hlo", "--iterations=1"],
    ("run_hlo_module", "rocm"): ["--platform=ROCM", "--reference_platform=", "--input_format=hlo", "--iterations=1"],
    ("hlo_runner_main", "cpu"): ["--device_type=host", "--input_format=text", "--num_repeats=1"],
    ("hlo_runner_main", "gpu"): ["--device_type=gpu", "--input_format=text", "--num_repeats=1"],
    ("hlo_runner_main", "rocm"): ["--device_type=gpu", "--input_format=text", "--num_repeats=1"],
}


@pytest.mark.parametrize(("runner", "platform"), sorted(EXACT))
def test_exact_line_per_runner_and_platform(runner, platform):
    """run_hlo_module spells platforms as its usage text does (CPU|CUDA|Interpreter); hlo_runner_main's
    --device_type takes exactly gpu or host."""
    command = runner_command(runner, BEFORE_TXT, ReplayOptions(platform=platform))
    tail = (
        ["--abs_error_bound=0.001", "--rel_error_bound=0.001"]
        if runner == "run_hlo_module"
        else ["--hlo_argument_mode=use_random_inputs"]
    )
    assert command.argv == [runner, *EXACT[runner, platform], *tail, BEFORE_TXT]
    assert command.shell_line() == " ".join(command.argv)  # nothing in it needs quoting


def test_reference_platform_spellings_and_platform_aliases():
    line = runner_command("run_hlo_module", AFTER_TXT, ReplayOptions(platform="HOST", reference_platform="interpreter")).argv
    assert line[1:3] == ["--platform=CPU", "--reference_platform=Interpreter"]
    assert line[-2:] == ["--run_test_hlo_passes=false", AFTER_TXT]
    assert xla_platform("Gpu").hlo_runner_main == "gpu" and xla_platform("interpreter").hlo_runner_main is None
    with pytest.raises(InputError, match="unknown platform 'tpu'"):
        xla_platform("tpu")


def test_xla_flags_go_before_the_file_and_version_specific_flags_after_the_fixed_ones():
    newest = fixtures("hlo_runner_main")[-1]["flags"]
    command = runner_command(
        "hlo_runner_main", SNAPSHOT, ReplayOptions(seed=9), defined=newest, xla_flags=["--xla_cpu_use_thunk_runtime=false"]
    )
    assert command.argv == [
        "hlo_runner_main",
        "--device_type=host",
        "--input_format=snapshot_proto_binary",
        "--num_repeats=1",
        "--run_xla_backend_only=true",
        "--random_seed=9",
        "--profile_execution=true",
        "--xla_cpu_use_thunk_runtime=false",
        SNAPSHOT,
    ]
    assert command.omitted == {} and command.left_out == []


# ---- against what each supported XLA defines ----


def test_the_fixtures_cover_both_runners_at_the_same_xla_commits():
    commits = {r: [f["xla_commit"] for f in fixtures(r)] for r in RUNNERS}
    assert len(commits["run_hlo_module"]) >= 10 and commits["run_hlo_module"] == commits["hlo_runner_main"]


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_line_uses_only_flags_the_runner_of_that_xla_defines(runner):
    for record in fixtures(runner):
        for argv in _all_lines(runner, defined=record["flags"]):
            undefined = _flag_names(argv) - set(record["flags"])
            assert not undefined, (record["jax_refs"], argv)


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_line_for_a_binary_of_unknown_version_runs_on_every_supported_xla(runner):
    everywhere = set.intersection(*(set(r["flags"]) for r in fixtures(runner)))
    for argv in _all_lines(runner, defined=None):
        assert _flag_names(argv) <= everywhere, argv
    assert all(r["appends_debug_options_flags"] for r in fixtures(runner))  # so --xla_* flags are always taken


@pytest.mark.parametrize("runner", RUNNERS)
def test_version_specific_flags_are_exactly_those_some_supported_xla_lacks(runner):
    records = fixtures(runner)
    newest = records[-1]["flags"]
    used = set().union(*(_flag_names(a) for a in _all_lines(runner, defined=newest)))
    lacking = {f for f in used if any(f not in r["flags"] for r in records)}
    assert lacking == set(VERSION_SPECIFIC[runner])
    for flag, since in VERSION_SPECIFIC[runner].items():
        first = next(i for i, r in enumerate(records) if flag in r["flags"])
        assert all(flag in r["flags"] for r in records[first:]), flag  # never removed again
        version = records[first]["jax_refs"][0].removeprefix("jax-v")
        assert since == f"XLA of jaxlib {version} and later", flag


def test_an_older_xla_gets_the_line_without_the_flags_it_lacks_and_says_so():
    oldest = fixtures("hlo_runner_main")[0]
    command = runner_command("hlo_runner_main", BEFORE_TXT, ReplayOptions(seed=5), defined=oldest["flags"])
    assert not any(a.startswith(("--random_seed", "--profile_execution")) for a in command.argv)
    assert command.omitted == {
        "--random_seed=5": "XLA of jaxlib 0.8.3 and later",
        "--profile_execution=true": "XLA of jaxlib 0.5.3 and later",
    }
    assert command.left_out[0] == (
        "hlo_runner_main: --random_seed not passed (this build does not define it; XLA of jaxlib 0.8.3 and later define it)"
    )


def test_flags_from_usage_reads_a_tsl_usage_text():
    usage = 'usage: hlo_runner_main [flags] files\nFlags:\n\t--device_type="gpu"\tstring\tDevice type: gpu, host\n'
    usage += '\t--num_repeats=1\tint32\trepeats\n  --xla_dump_to=""\tstring\tdirectory\nnot --a_flag=1 mid-line\n'
    assert flags_from_usage(usage) == {"device_type", "num_repeats", "xla_dump_to"}
    assert flags_from_usage("could not open HLO file --help") is None
