"""Shell completion as a user installs it: the script `xlarun completion SHELL` prints, run by the real shell."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", ""), **extra}


def _run(argv: list[str], **extra: str) -> str:
    proc = subprocess.run(argv, env=_env(**extra), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bash_completes_commands_and_options_with_the_printed_script():
    script = (
        'eval "$(xlarun completion bash)"; '
        'COMP_WORDS=(xlarun mod); COMP_CWORD=1; _xlarun_completion xlarun; echo "1:${COMPREPLY[*]}"; '
        'COMP_WORDS=(xlarun modules --js); COMP_CWORD=2; _xlarun_completion xlarun; echo "2:${COMPREPLY[*]}"'
    )
    out = _run(["bash", "-c", script]).splitlines()
    assert "1:modules" in out and "2:--json" in out


def test_clicks_spelling_of_the_request_gives_the_same_script_as_typers():
    """`_XLARUN_COMPLETE=bash_source xlarun` (click's docs) printed 'Shell source not supported'."""
    clicks = _run(["xlarun"], _XLARUN_COMPLETE="bash_source")
    assert "_xlarun_completion()" in clicks and clicks == _run(["xlarun"], _XLARUN_COMPLETE="source_bash")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (scripts/setup.sh --dev installs it)")
def test_fish_completes_with_the_printed_script():
    out = _run(["fish", "-c", 'xlarun completion fish | source; complete -C "xlarun mod"; complete -C "xlarun cat --sta"'])
    names = [line.split("\t")[0] for line in out.splitlines()]
    assert "modules" in names and "--stage" in names


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (scripts/setup.sh --dev installs it)")
def test_zsh_loads_the_script_and_gets_completions_from_xlarun(tmp_path):
    loaded = _run(
        [
            "zsh",
            "-c",
            f'autoload -U compinit; compinit -u -d {tmp_path}/zcd; eval "$(xlarun completion zsh)"; print -r -- $_comps[xlarun]',
        ]
    )
    assert loaded.strip() == "_xlarun_completion"
    # what the zsh script evaluates at each Tab
    answer = _run(["xlarun"], _XLARUN_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="xlarun rep")
    assert '"replay"' in answer and '"report"' in answer


def test_an_unknown_shell_is_a_usage_error():
    proc = subprocess.run(["xlarun", "completion", "tcsh"], env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "tcsh" in proc.stderr


def install_lines(shell: str) -> list[str]:
    """The lines `xlarun completion --help` tells a user to type for ``shell``, as they read there."""
    text = _run(["xlarun", "completion", "--help"], COLUMNS="200")
    block = text.split(f"  {shell}:", 1)[1].split("\n\n", 1)[0]
    lines, shell_names = [], ("bash:", "zsh:", "fish:")
    for raw in block.splitlines():
        line = raw.strip()
        if line.startswith(shell_names):
            break
        lines.append(line)
    return [line for line in lines if line and not line.startswith("(")]


@pytest.fixture(scope="module")
def completing_store(tmp_path_factory):
    """A store with two runs of the compat fixture: its modules, stages and (no) passes to complete."""
    from typer.testing import CliRunner

    from xlarun.cli import app

    store = tmp_path_factory.mktemp("completion") / "store"
    fixture = Path(__file__).parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"
    for _ in range(2):
        result = CliRunner().invoke(app, ["import", str(fixture), "--store", str(store)])
        assert result.exit_code == 0, result.output
    return store


def _home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"), "XDG_CONFIG_HOME": str(home / ".config")}


@pytest.mark.slow
def test_the_bash_install_lines_make_bash_complete_xlarun_from_the_index(tmp_path, completing_store):
    loader = Path("/usr/share/bash-completion/bash_completion")
    if not loader.is_file():
        pytest.skip("the bash-completion package is not installed (scripts/setup.sh --dev installs it)")
    env = {**_home(tmp_path), "XLARUN_STORE": str(completing_store)}
    lines = install_lines("bash")
    assert lines[-1] == "xlarun completion bash > ~/.local/share/bash-completion/completions/xlarun"
    _run(["bash", "-c", "; ".join(lines)], **env)
    script = (
        f"source {loader}; _completion_loader xlarun; complete -p xlarun; "
        'COMP_WORDS=(xlarun show jit_tr); COMP_CWORD=2; _xlarun_completion xlarun; echo "ref:${COMPREPLY[*]}"; '
        'COMP_WORDS=(xlarun cat jit_train_step --stage cpu); COMP_CWORD=4; _xlarun_completion xlarun; echo "stage:${COMPREPLY[*]}"'
    )
    out = _run(["bash", "-c", script], **env).splitlines()
    assert out[0].startswith("complete -o ") and out[0].endswith(" xlarun")
    assert "ref:jit_train_step" in out and "stage:cpu_after_optimizations" in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (scripts/setup.sh --dev installs it)")
def test_the_zsh_install_lines_make_compinit_load_xlaruns_completion(tmp_path):
    env = _home(tmp_path)
    lines = install_lines("zsh")
    assert lines[0] == "mkdir -p ~/.zfunc && xlarun completion zsh > ~/.zfunc/_xlarun"
    _run(["zsh", "-c", lines[0]], **env)
    loaded = _run(
        [
            "zsh",
            "-c",
            f"fpath=(~/.zfunc $fpath); autoload -Uz compinit; compinit -u -d {tmp_path}/zcd; print -r -- $_comps[xlarun]",
        ],
        **env,
    )
    assert loaded.strip() == "_xlarun"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (scripts/setup.sh --dev installs it)")
def test_the_fish_install_line_makes_fish_complete_runs_modules_and_stages(tmp_path, completing_store):
    env = {**_home(tmp_path), "XLARUN_STORE": str(completing_store)}
    (tmp_path / "home" / ".config" / "fish" / "completions").mkdir(parents=True)
    lines = install_lines("fish")
    assert lines == ["xlarun completion fish > ~/.config/fish/completions/xlarun.fish"]
    _run(["fish", "-c", lines[0]], **env)
    runs = sorted(p.name for p in (completing_store / "runs").iterdir())
    asked = 'complete -C "xlarun show jit_tr"; complete -C "xlarun modules 2"; complete -C "xlarun cat x --stage be"'
    got = [line.split("\t")[0] for line in _run(["fish", "-c", asked], **env).splitlines()]
    assert got[0] == "jit_train_step" and sorted(got[1:3]) == runs and got[3:] == ["before", "before_optimizations"]
    # --store typed on the line is the store completed from
    elsewhere = _run(
        ["fish", "-c", f'complete -C "xlarun show --store {completing_store} jit_acc"'], **{**env, "XLARUN_STORE": "/nonexistent"}
    )
    assert [line.split("\t")[0] for line in elsewhere.splitlines()] == ["jit_accuracy"]


def test_the_index_completes_runs_modules_stages_and_nothing_from_a_missing_or_damaged_store(completing_store, tmp_path):
    from xlarun.navigate.complete import complete_modules, complete_passes, complete_runs, complete_stages

    runs = sorted(p.name for p in (completing_store / "runs").iterdir())
    assert complete_runs(completing_store, "") == ["latest", "dumps", *reversed(runs)]  # an import is named for its source
    assert complete_runs(completing_store, runs[0][:-1]) == [runs[0]] and complete_runs(completing_store, "l") == ["latest"]
    assert complete_modules(completing_store, "train") == ["jit_train_step"]  # jit_ need not be typed
    assert complete_modules(completing_store, f"{runs[1]}/jit_a") == [f"{runs[1]}/jit_accuracy"]
    assert complete_modules(completing_store, "2026/jit_a") == []  # two runs have that prefix: no RUN/ form
    stages = ["before", "after", "before_optimizations", "after_optimizations", "cpu_after_optimizations"]
    assert complete_stages(completing_store, "") == stages
    assert complete_passes(completing_store, "") == []  # no pass-by-pass dumps in that capture
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "index.sqlite").write_bytes(b"not a database" * 100)
    for store in (damaged, tmp_path / "absent"):
        assert complete_modules(store, "jit") == [] and complete_runs(store, "") == ["latest"]
        assert complete_stages(store, "b") == ["before"] and complete_passes(store, "") == []
    assert not (tmp_path / "absent").exists()
