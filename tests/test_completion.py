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
