"""Limits of the machine and of names: too few file descriptors, a REF longer than any file name, a module too big
for the memory the process may have. Each is a clear refusal (exit 2 or 3, one error line with what to do), never a
traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from .sweep import FIXTURES


def _xlarun(*args, files: int | None = None, memory: int | None = None, cwd: Path | None = None):
    def limit() -> None:
        if files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}  # coverage opens files of its own
    return subprocess.run(
        [sys.executable, "-m", "xlarun", *map(str, args)],
        capture_output=True, text=True, timeout=300, preexec_fn=limit, cwd=cwd,
        env={**env, "NO_COLOR": "1", "COLUMNS": "400"},
    )  # fmt: skip


def _refused(done: subprocess.CompletedProcess) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode in (2, 3) and "Traceback" not in done.stderr and len(errors) == 1, done.stderr[-2000:]
    return errors[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits") / "store"
    done = _xlarun("import", FIXTURES / "jax-0.10.2" / "dumps.tar.gz", "--store", root)
    assert done.returncode == 0, done.stderr
    return root


@pytest.mark.slow
def test_too_few_file_descriptors_is_a_refusal_naming_the_limit(store, tmp_path, figures):
    tried = [
        (24, _xlarun("report", "--store", store, "-o", tmp_path / "report-24", files=24)),
        (16, _xlarun("report", "--store", store, "-o", tmp_path / "report-16", files=16)),
        # a small dump's series share one pack, so an import fits in 12 descriptors now: 10 is below what it needs
        (10, _xlarun("import", FIXTURES / "jax-0.11.2" / "dumps.tar.gz", "--store", tmp_path / "other", files=10)),
    ]
    figures(tried=len(tried), exit4=sum(done.returncode == 4 for _, done in tried), codes=[d.returncode for _, d in tried])
    for limit, done in tried:
        if done.returncode or limit < 24:  # a command that fits in the limit may finish; one that does not says so
            assert f"too many open files (this process may open {limit}" in _refused(done)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["render", "replay", "cat", "show", "export"])
def test_a_ref_longer_than_any_file_name_is_a_usage_error(command, store, tmp_path):
    ref = "m" * 100_000
    args = (command, ref, tmp_path / "out") if command == "export" else (command, ref)
    done = _xlarun(*args, "--store", store)
    line = _refused(done)
    assert done.returncode == 2 and len(line) < 600, line


def _big_module(path: Path, instructions: int) -> Path:
    lines = ["HloModule big, entry_computation_layout={(f32[8]{0})->f32[8]{0}}", "", "ENTRY main {"]
    lines.append("  p0 = f32[8]{0} parameter(0)")
    previous = "p0"
    for n in range(instructions):
        lines.append(f"  a{n} = f32[8]{{0}} add(f32[8]{{0}} {previous}, f32[8]{{0}} p0)")
        previous = f"a{n}"
    lines += [f"  ROOT r = f32[8]{{0}} negate(f32[8]{{0}} {previous})", "}", ""]
    path.write_text("\n".join(lines))
    return path


@pytest.mark.slow
def test_render_refuses_a_module_too_big_for_its_memory(tmp_path, figures):
    """100,000 instructions (5.7 MB of text) need about 400 MB to draw: under a 300 MB address-space limit render
    refuses before parsing, naming what it needs and the limit; with room it draws the module's overview."""
    module = _big_module(tmp_path / "module_0001.big.before_optimizations.txt", 100_000)
    refused = _xlarun("render", module, "-o", tmp_path / "small.svg", memory=300 << 20)
    line = _refused(refused)
    assert refused.returncode == 3 and "too big to draw with the memory this process has" in line, line
    assert "ulimit -v" in line and not (tmp_path / "small.svg").exists()
    drawn = _xlarun("render", module, "-o", tmp_path / "big.svg")
    figures(tried=2, exit4=int(refused.returncode == 4) + int(drawn.returncode == 4))
    assert drawn.returncode == 0 and "condensed to" in drawn.stderr + drawn.stdout, drawn.stderr[-2000:]
