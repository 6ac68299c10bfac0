"""The run_hlo_module / hlo_runner_main drivers, against a stand-in executable.

The real runners cannot be built here (they need XLA and bazel), so each test writes a small
Python script that behaves as documented: it records its argv, prints some output including
``## Execution time`` lines, and exits with the code the test asks for (0, 255 for a
miscompare, 1 for a flag error, or a crash).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.runner_flags import fixtures
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.replay import ReplayOptions, replay_file
from xlarun.replay.drivers import command_line, run_runner
from xlarun.replay.runner_argv import input_format
from xlarun.replay.runner_site import find_runner
from xlarun.replay.runner_verdict import parse_execution_times, result_from_run

NEWEST = frozenset(fixtures("hlo_runner_main")[-1]["flags"])
OLDEST = frozenset(fixtures("hlo_runner_main")[0]["flags"])

SNAPSHOT = "dump/module_0006.jit_f.snapshot.304912769.pb"
BEFORE_TXT = "dump/module_0006.jit_f.before_optimizations.txt"
BEFORE_PB = "dump/module_0006.jit_f.before_optimizations.hlo.pb"
AFTER_TXT = "dump/module_0006.jit_f.sm_8.0_gpu_after_optimizations.txt"


def make_runner(
    folder: Path,
    name: str,
    exit_code: int = 0,
    repeats: int = 2,
    silent_seconds: float = 0,
    flags: Iterable[str] | None = None,
) -> Path:
    """A stand-in runner: writes its argv to argv.json, prints timing lines, exits ``exit_code``.

    With ``flags`` it also behaves as tsl's flag parser makes the real ones: ``--help`` prints the usage
    (``\t--name=default``) and exits 1, and an argument naming a flag it does not define is taken for an
    input file that cannot be read (exit 1).
    """
    script = folder / name
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import json, os, sys, time
            with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as log:
                log.write(json.dumps(sys.argv[1:]) + "\\n")
            flags = {sorted(flags) if flags is not None else None!r}
            if flags is not None:
                if sys.argv[1:] == ["--help"]:
                    print("usage: " + sys.argv[0] + " [flags] files", file=sys.stderr)
                    for flag in flags:
                        print("\\t--" + flag + "=0\\tint32\\tsome help", file=sys.stderr)
                    sys.exit(1)
                for arg in sys.argv[1:]:
                    name = arg[2:].split("=")[0]
                    if arg.startswith("--") and name not in flags and not name.startswith("xla_"):
                        print("NOT_FOUND: could not open HLO file " + arg, file=sys.stderr)
                        sys.exit(1)
            with open(os.path.join(os.path.dirname(__file__), "argv.json"), "w") as f:
                json.dump(sys.argv, f)
            print("** Running", sys.argv[-1], "**", flush=True)
            time.sleep({silent_seconds})
            for i in range({repeats}):
                print(f"## Execution time, file={{sys.argv[-1]}} repeat={{i}} duration={{(i + 1) * 1500}}ns", flush=True)
            print("some stderr noise", file=sys.stderr, flush=True)
            if {exit_code} == -6:
                os.abort()
            sys.exit({exit_code})
            """
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def recorded_argv(folder: Path) -> list[str]:
    return json.loads((folder / "argv.json").read_text())


def recorded_calls(folder: Path) -> list[list[str]]:
    """Every invocation of the stand-in, its arguments (without the binary), in order."""
    return [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]


# ---- exact command lines ----


def test_run_hlo_module_command_line_for_a_snapshot_with_a_reference():
    options = ReplayOptions(platform="cpu", reference_platform="interpreter", iterations=3, print_literals=True)
    assert command_line("run_hlo_module", SNAPSHOT, options, binary="/opt/xla/run_hlo_module") == [
        "/opt/xla/run_hlo_module",
        "--platform=CPU",
        "--reference_platform=Interpreter",
        "--input_format=pb",
        "--iterations=3",
        "--abs_error_bound=0.001",
        "--rel_error_bound=0.001",
        "--print_literals=true",
        "--run_test_hlo_passes=false",  # a snapshot's module is the optimized one
        SNAPSHOT,
    ]


def test_run_hlo_module_command_line_for_optimized_text_without_reference():
    options = ReplayOptions(platform="cuda", abs_error_bound=1e-5, rel_error_bound=0.01)
    assert command_line("run_hlo_module", AFTER_TXT, options) == [
        "run_hlo_module",
        "--platform=CUDA",
        "--reference_platform=",
        "--input_format=hlo",
        "--iterations=1",
        "--abs_error_bound=1e-05",
        "--rel_error_bound=0.01",
        "--run_test_hlo_passes=false",
        AFTER_TXT,
    ]


def test_hlo_runner_main_command_lines():
    assert command_line("hlo_runner_main", BEFORE_TXT, ReplayOptions(iterations=5, seed=42), defined=NEWEST) == [
        "hlo_runner_main",
        "--device_type=host",
        "--input_format=text",
        "--num_repeats=5",
        "--hlo_argument_mode=use_random_inputs",
        "--random_seed=42",
        "--profile_execution=true",
        BEFORE_TXT,
    ]
    # flags unknown (no --help): only what every supported XLA defines
    assert command_line("hlo_runner_main", BEFORE_TXT, ReplayOptions(iterations=5, seed=42)) == [
        "hlo_runner_main",
        "--device_type=host",
        "--input_format=text",
        "--num_repeats=5",
        "--hlo_argument_mode=use_random_inputs",
        BEFORE_TXT,
    ]
    assert command_line("hlo_runner_main", AFTER_TXT, ReplayOptions(platform="cuda", print_literals=True), defined=NEWEST) == [
        "hlo_runner_main",
        "--device_type=gpu",
        "--input_format=text",
        "--num_repeats=1",
        "--hlo_argument_mode=use_random_inputs",
        "--run_xla_backend_only=true",
        "--log_output=true",
        "--profile_execution=true",
        AFTER_TXT,
    ]
    # a snapshot brings its own arguments, unless fake inputs are asked for, and its optimized module
    assert command_line("hlo_runner_main", SNAPSHOT, ReplayOptions(), defined=NEWEST) == [
        "hlo_runner_main",
        "--device_type=host",
        "--input_format=snapshot_proto_binary",
        "--num_repeats=1",
        "--run_xla_backend_only=true",
        "--profile_execution=true",
        SNAPSHOT,
    ]
    assert "--hlo_argument_mode=use_random_inputs" in command_line("hlo_runner_main", SNAPSHOT, ReplayOptions(inputs="fake"))


@pytest.mark.parametrize(
    "path, run_hlo_module, hlo_runner_main",
    [
        (BEFORE_TXT, "hlo", "text"),
        (BEFORE_PB, "pb", "proto_binary"),
        (BEFORE_PB + ".gz", "pb", "proto_binary"),
        (SNAPSHOT, "pb", "snapshot_proto_binary"),
        ("x/1.module_0001.f.execution_0001.hlo_snapshot.pb", "pb", "snapshot_proto_binary"),
        ("x/module.pbtxt", "pbtxt", "proto_text"),
    ],
)
def test_input_format_from_the_file_name(path, run_hlo_module, hlo_runner_main):
    assert input_format("run_hlo_module", path) == run_hlo_module
    assert input_format("hlo_runner_main", path) == hlo_runner_main


def test_unknown_runner_and_platform_are_usage_errors():
    with pytest.raises(InputError, match="unknown runner"):
        command_line("run_xla", BEFORE_TXT, ReplayOptions())
    with pytest.raises(InputError, match="unknown platform 'tpu'"):
        command_line("run_hlo_module", BEFORE_TXT, ReplayOptions(platform="tpu"))
    with pytest.raises(InputError, match="hlo_runner_main cannot run on 'interpreter'"):
        command_line("hlo_runner_main", BEFORE_TXT, ReplayOptions(platform="interpreter"))


# ---- finding the binary ----


def test_find_runner_explicit_then_environment_then_path(tmp_path, monkeypatch):
    explicit = make_runner(tmp_path, "my_run_hlo_module")
    on_path_dir = tmp_path / "bin"
    on_path_dir.mkdir()
    on_path = make_runner(on_path_dir, "run_hlo_module")
    monkeypatch.setenv("PATH", f"{on_path_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("XLARUN_RUN_HLO_MODULE", raising=False)
    assert find_runner("run_hlo_module") == str(on_path)
    monkeypatch.setenv("XLARUN_RUN_HLO_MODULE", str(explicit))
    assert find_runner("run_hlo_module") == str(explicit)
    assert find_runner("run_hlo_module", explicit=str(on_path)) == str(on_path)
    monkeypatch.setenv("XLARUN_RUN_HLO_MODULE", str(tmp_path / "missing"))
    with pytest.raises(EnvironmentProblem, match="XLARUN_RUN_HLO_MODULE is not an executable"):
        find_runner("run_hlo_module")


def test_missing_runner_says_how_to_get_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("XLARUN_HLO_RUNNER_MAIN", raising=False)
    with pytest.raises(EnvironmentProblem, match="hlo_runner_main is not on PATH"):
        find_runner("hlo_runner_main")


# ---- running and judging by exit code ----


@pytest.mark.parametrize(
    "exit_code, reference, verdict",
    [
        (0, "interpreter", "match"),
        (0, None, "ran"),
        (255, "interpreter", "mismatch"),
        (1, None, "engine-error"),
        (-6, None, "engine-error"),
    ],
)
def test_run_hlo_module_verdict_comes_from_the_exit_code(tmp_path, exit_code, reference, verdict):
    runner = make_runner(tmp_path, "run_hlo_module", exit_code=exit_code)
    lines = []
    options = ReplayOptions(runner_path=str(runner), reference_platform=reference, iterations=2)
    result = run_runner("run_hlo_module", "in/module_0001.jit_f.before_optimizations.txt", options, sink=lines.append)

    assert result.verdict == verdict
    assert result.command == recorded_argv(tmp_path)
    assert result.command[0] == str(runner) and result.command[-1].endswith("before_optimizations.txt")
    assert "** Running" in result.log and "some stderr noise" in result.log
    assert lines[0].startswith("** Running") and "some stderr noise" in lines
    assert result.run_times_s == [1.5e-6, 3e-6]
    assert int(result.exit_code) == {"match": 0, "ran": 0, "mismatch": 1, "engine-error": 3}[verdict]
    if exit_code == 1:
        assert "rejected its command line" in result.error
    if exit_code == -6:
        assert "killed by signal 6" in result.error


def test_hlo_runner_main_never_compares(tmp_path):
    runner = make_runner(tmp_path, "hlo_runner_main", repeats=3, flags=NEWEST)
    options = ReplayOptions(runner_path=str(runner), reference_platform="cpu", iterations=3)
    result = run_runner("hlo_runner_main", SNAPSHOT, options)
    assert result.verdict == "ran" and result.input_kind == "snapshot" and result.arguments == "snapshot"
    assert any("does not compare" in w for w in result.warnings)
    assert result.run_times_s == [1.5e-6, 3e-6, 4.5e-6] and result.median_s == 3e-6
    assert recorded_argv(tmp_path)[1:] == [
        "--device_type=host",
        "--input_format=snapshot_proto_binary",
        "--num_repeats=3",
        "--run_xla_backend_only=true",
        "--profile_execution=true",
        SNAPSHOT,
    ]
    failed = make_runner(tmp_path, "hlo_runner_main", exit_code=255)
    assert run_runner("hlo_runner_main", SNAPSHOT, ReplayOptions(runner_path=str(failed))).verdict == "engine-error"


@pytest.mark.slow
def test_timeout_kills_a_silent_runner(tmp_path):
    runner = make_runner(tmp_path, "run_hlo_module", silent_seconds=30)
    result = run_runner("run_hlo_module", BEFORE_TXT, ReplayOptions(runner_path=str(runner), timeout_s=1))
    assert result.verdict == "engine-error" and "timeout" in result.error


def test_replay_file_drives_a_runner_with_bytes_from_the_store(tmp_path):
    runner = make_runner(tmp_path, "run_hlo_module")
    options = ReplayOptions(engine="run_hlo_module", runner_path=str(runner))
    result = replay_file("RUN/module_0001.jit_f.before_optimizations.txt", options, data=b"HloModule f\n")
    assert result.verdict == "ran" and result.engine == "run_hlo_module"
    assert result.source == "RUN/module_0001.jit_f.before_optimizations.txt"
    given = Path(recorded_argv(tmp_path)[-1])
    assert given.name == "module_0001.jit_f.before_optimizations.txt"  # a temporary copy, same name
    with pytest.raises(InputError, match="pjrt engine only"):
        replay_file(BEFORE_TXT, options, snapshot=SNAPSHOT)


def test_result_from_run_is_usable_for_a_container_run():
    """The container backend runs command_line()'s argv itself and hands back code and output."""
    options = ReplayOptions(reference_platform="cpu")
    argv = command_line("run_hlo_module", "/dump/f.txt", options)
    output = "...\n## Execution time, file=/dump/f.txt repeat=0 duration=2000000ns\n1/1 runs miscompared.\n"
    result = result_from_run("run_hlo_module", argv, 255, output, options, "/dump/f.txt")
    assert result.verdict == "mismatch" and result.command == argv and result.run_times_s == [0.002]


def test_parse_execution_times_orders_by_repeat():
    text = (
        "## Execution time, file=a b.txt repeat=1 duration=20ns\nnoise\n## Execution time, file=a b.txt repeat=0 duration=10ns\n"
    )
    assert parse_execution_times(text) == [1e-08, 2e-08]


# ---- runners of different XLA versions: the flags their --help lists decide ----


@pytest.mark.parametrize("version", ["oldest", "newest"])
def test_hlo_runner_main_gets_a_seed_only_when_its_xla_defines_random_seed(tmp_path, version):
    """Before jaxlib 0.8.3's XLA, hlo_runner_main has no --random_seed and would take it for a file name."""
    flags = OLDEST if version == "oldest" else NEWEST
    runner = make_runner(tmp_path, "hlo_runner_main", flags=flags)
    result = run_runner("hlo_runner_main", BEFORE_TXT, ReplayOptions(runner_path=str(runner), seed=7))
    assert result.verdict == "ran"
    argv = recorded_argv(tmp_path)
    assert argv == result.command and argv[-1] == BEFORE_TXT
    if version == "newest":
        assert "--random_seed=7" in argv and "--profile_execution=true" in argv
        assert result.warnings == []
    else:
        assert not any(a.startswith(("--random_seed", "--profile_execution")) for a in argv)
        assert any("--random_seed not passed (this build does not define it" in w for w in result.warnings)
        assert any("--profile_execution not passed" in w for w in result.warnings)


def test_a_runner_whose_flags_cannot_be_listed_gets_only_the_flags_every_version_defines(tmp_path):
    runner = make_runner(tmp_path, "hlo_runner_main")  # answers --help like a file: lists no flag
    result = run_runner("hlo_runner_main", BEFORE_TXT, ReplayOptions(runner_path=str(runner), seed=7))
    assert result.verdict == "ran"
    assert recorded_argv(tmp_path)[1:] == [
        "--device_type=host",
        "--input_format=text",
        "--num_repeats=1",
        "--hlo_argument_mode=use_random_inputs",
        BEFORE_TXT,
    ]
    assert any("--random_seed not passed (its flags could not be listed" in w for w in result.warnings)


def test_the_stand_in_rejects_a_flag_it_does_not_define_as_the_real_runner_does(tmp_path):
    """The check the tests above rest on: an undefined flag fails the run (exit 1), as tsl's parser makes it."""
    runner = make_runner(tmp_path, "hlo_runner_main", flags=OLDEST)
    options = ReplayOptions(runner_path=str(runner))
    argv = [*command_line("hlo_runner_main", BEFORE_TXT, options, binary=str(runner))[:-1], "--random_seed=7", BEFORE_TXT]
    result = result_from_run("hlo_runner_main", argv, *_run(argv), options, BEFORE_TXT)
    assert result.verdict == "engine-error" and "could not open HLO file --random_seed=7" in result.error


def _run(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run(argv, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_runners_flags_are_asked_once_per_binary_and_only_where_versions_differ(tmp_path):
    hlo_runner_main = make_runner(tmp_path, "hlo_runner_main", flags=NEWEST)
    for _ in range(2):
        assert run_runner("hlo_runner_main", BEFORE_TXT, ReplayOptions(runner_path=str(hlo_runner_main))).verdict == "ran"
    calls = recorded_calls(tmp_path)
    assert [c[0] for c in calls] == ["--help", "--device_type=host", "--device_type=host"]
    other = tmp_path / "other"
    other.mkdir()
    run_hlo_module = make_runner(other, "run_hlo_module", flags=fixtures("run_hlo_module")[0]["flags"])
    assert run_runner("run_hlo_module", BEFORE_TXT, ReplayOptions(runner_path=str(run_hlo_module))).verdict == "ran"
    assert [c[0] for c in recorded_calls(other)] == ["--platform=CPU"]  # the same flags in every supported XLA: not asked
