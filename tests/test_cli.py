"""The CLI as a user drives it: exit codes, errors, help, and that every command is documented."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import typer

from xlarun.cli import app

from .conftest import CONFIGS, REPO, write_spec


def command_names() -> list[str]:
    return sorted(c.name for c in typer.main.get_command(app).commands.values())


def test_every_command_is_documented_in_the_tour_pages():
    """The generated reference lists every command by construction; a person also needs it in a page of the tour."""
    pages = (
        "".join(p.read_text() for p in (REPO / "docs").glob("*.md") if p.name != "index.md") + (REPO / "README.md").read_text()
    )
    missing = [name for name in command_names() if f"xlarun {name}" not in pages]
    assert not missing, f"commands missing from the docs pages: {missing}"


@pytest.mark.slow
def test_every_command_has_help(cli):
    for name in command_names():
        result = cli(name, "--help")
        assert result.exit_code == 0, name
        assert len(result.stdout) > 100, name


def test_top_level_help_documents_exit_codes(cli):
    result = cli("--help")
    assert result.exit_code == 0
    for code in ("0 ok", "1 the answer is no", "2 bad usage", "3 a component", "124", "130"):
        assert code in result.stdout


def test_validate_reports_every_problem_with_location(cli, tmp_path):
    spec = write_spec(tmp_path, "name: demo\nscript: job.py\ndump:\n  pas_re: x\n  formats: [txt]\n", "print(1)\n")
    result = cli("validate", spec)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: {spec}:4:3 dump.pas_re: unknown key; did you mean 'pass_re'?",
        f"error: {spec}:5:13 dump.formats[0]: Input should be 'text', 'proto', 'dot', 'html' or 'url'",
    ]


def test_validate_json_and_ok(cli):
    result = cli("validate", CONFIGS / "jax-cpu.yaml", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["valid"] is True


def test_capture_of_a_malformed_spec_is_one_line_exit_2(cli, tmp_path):
    spec = write_spec(tmp_path, "name: demo\nscript: job.py\ntimeout: never\n", "print(1)\n")
    result = cli("capture", spec)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {spec}:3:10 timeout: 'never' is not a duration: use seconds or a number with ms, s, m or h (fix that key and run `xlarun validate` again)"
    ]


def test_flags_prints_export_lines_without_running(cli, tmp_path):
    result = cli("flags", CONFIGS / "tf1-autojit.yaml", "--out", tmp_path / "o")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert f"export TF_DUMP_GRAPH_PREFIX={tmp_path}/o/tf_graphs" in lines
    assert "export TF_XLA_FLAGS='--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit --tf_xla_clustering_debug'" in lines
    assert any(line.startswith("export XLA_FLAGS=") and f"--xla_dump_to={tmp_path}/o/dump" in line for line in lines)
    assert not (tmp_path / "o").exists()


def test_schema_is_json(cli, tmp_path):
    result = cli("schema", "-o", tmp_path / "schema.json")
    assert result.exit_code == 0
    assert json.loads((tmp_path / "schema.json").read_text())["title"] == "xlarun run spec"


def test_commands_on_an_empty_store_explain_what_to_do(cli, tmp_path):
    result = cli("modules", "--store", tmp_path / "none")
    assert result.exit_code == 3
    assert "capture a run first" in result.stderr


def test_python_dash_m_and_version():
    out = subprocess.run([sys.executable, "-m", "xlarun", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and re.fullmatch(r"xlarun \d+\.\d+\.\d+\n", out.stdout)


def test_unknown_option_is_usage_exit_2():
    out = subprocess.run([sys.executable, "-m", "xlarun", "runs", "--bogus"], capture_output=True, text=True)
    assert out.returncode == 2 and "No such option" in out.stderr


def test_no_progress_bar_where_stderr_is_not_a_terminal(capsys):
    """In a log or a pipe the bar would leave a blank line whose presence depends on the machine's speed."""
    from xlarun.console import ProgressBar

    bar = ProgressBar("archiving", min_total=10)
    for done in range(0, 501, 50):
        bar.update(done, 500)
    bar.close()
    assert capsys.readouterr().err == "" and bar.bar is None
