"""Run specs: validation with exact error locations, interpolation, defaults, schema."""

from __future__ import annotations

import pytest

from xlarun.capture.spec import parse_duration
from xlarun.capture.spec_yaml import detect_framework, interpolate, load_spec, parse_spec_text, spec_json_schema
from xlarun.errors import SpecError

from .conftest import CONFIGS, write_spec


def problems_of(text: str, environ=None) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec_text(text, "spec.yaml", environ=environ or {})
    return info.value.problems


def test_minimal_spec_gets_documented_defaults():
    spec = parse_spec_text("name: demo\nscript: run.py\n", environ={})
    assert spec.backend.kind == "local"
    assert spec.framework == "auto"
    assert spec.dump.formats == ["text"]
    assert spec.dump.large_constants is True
    assert spec.jax.disable_compilation_cache is True
    assert spec.timeout is None


def test_unknown_key_points_at_the_key_with_did_you_mean():
    text = "name: demo\nscript: run.py\ndump:\n  formats: [text]\n  pas_re: fusion\n"
    assert problems_of(text) == ["spec.yaml:5:3 dump.pas_re: unknown key; did you mean 'pass_re'?"]


def test_unknown_top_level_key_lists_known_keys_when_nothing_is_close():
    [problem] = problems_of("name: demo\nscript: run.py\nzzz: 1\n")
    assert problem.startswith("spec.yaml:3:1 zzz: unknown key; known keys: name, description, script")


def test_bad_value_points_at_the_value():
    text = "name: demo\nscript: run.py\ndump:\n  formats: [text, protoo]\n"
    assert problems_of(text) == ["spec.yaml:4:19 dump.formats[1]: Input should be 'text', 'proto', 'dot', 'html' or 'url'"]


def test_glob_instead_of_regex_suggests_the_regex():
    # the seeds' own example, --xla_dump_hlo_pass_re=*While*, is not a regex
    [problem] = problems_of("name: demo\nscript: run.py\ndump:\n  pass_re: '*While*'\n")
    assert problem.startswith("spec.yaml:4:12 dump.pass_re: invalid regular expression '*While*'")
    assert "did you mean '.*While.*'" in problem


def test_missing_required_keys_are_reported_at_top():
    problems = problems_of("description: nothing\n")
    assert "spec.yaml:1:1 name: required key is missing" in problems
    assert "spec.yaml:1:1 script: required key is missing" in problems


def test_every_problem_is_listed_in_file_order():
    text = "name: demo\nscript: run.py\ntimeout: soon\ntensorflow:\n  auto_jit: 3\nlogging:\n  vlog_level: -1\n"
    problems = problems_of(text)
    assert [p.split(" ")[0] for p in problems] == ["spec.yaml:3:10", "spec.yaml:5:13", "spec.yaml:7:15"]
    assert problems[0].startswith("spec.yaml:3:10 timeout: 'soon' is not a duration")


def test_yaml_syntax_error_has_a_position():
    with pytest.raises(SpecError) as info:
        parse_spec_text("name: demo\nscript: [run.py\n", "spec.yaml", environ={})
    assert info.value.message.startswith("spec.yaml:3:1 YAML syntax error")


def test_environment_interpolation_with_defaults_and_errors():
    spec = parse_spec_text("name: ${NAME}\nscript: ${DIR:-scripts}/run.py\nenv:\n  PRICE: '$$5'\n", environ={"NAME": "n1"})
    assert spec.name == "n1"
    assert spec.script == "scripts/run.py"
    assert spec.env == {"PRICE": "$5"}
    assert problems_of("name: demo\nscript: run.py\nargs: [--data, '${DATA}']\n") == [
        "spec.yaml:3:16 args[1]: environment variable DATA is not set (write ${DATA:-default} to give a default)"
    ]


def test_interpolate_empty_value_takes_default():
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A}", {"A": ""}) == ""


def test_durations():
    assert parse_duration("90") == 90
    assert parse_duration("10m") == 600
    assert parse_duration("2h") == 7200
    assert parse_duration("500ms") == 0.5
    assert parse_spec_text("name: a\nscript: b.py\ntimeout: 2m\n", environ={}).timeout == 120


def test_tf_graph_prefix_flag_is_refused_with_the_reason():
    [problem] = problems_of("name: a\nscript: b.py\ntensorflow:\n  extra_flags: ['--tf_dump_graph_prefix=/tmp']\n")
    assert "aborts TensorFlow 2.21" in problem and problem.startswith("spec.yaml:4:16 tensorflow.extra_flags")


def test_xla_dump_to_in_extra_flags_is_refused():
    [problem] = problems_of("name: a\nscript: b.py\ndump:\n  extra_xla_flags: ['--xla_dump_to=/tmp/x']\n")
    assert "set by xlarun" in problem


def test_load_spec_resolves_paths_relative_to_the_spec(tmp_path):
    spec_path = write_spec(tmp_path / "proj", "name: demo\nscript: job.py\n", script="print(1)\n")
    loaded = load_spec(spec_path)
    assert loaded.script == (tmp_path / "proj" / "job.py").resolve()
    assert loaded.workdir == (tmp_path / "proj").resolve()


def test_missing_script_is_a_clear_error(tmp_path):
    spec_path = write_spec(tmp_path, "name: demo\nscript: nope.py\n")
    with pytest.raises(SpecError, match=r"script: nope\.py not found"):
        load_spec(spec_path)


def test_missing_spec_file_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "absent.yaml")


def test_bundled_configs_are_valid():
    from xlarun.capture.spec_yaml import load_batch

    for path in sorted(CONFIGS.glob("*.yaml")):
        for loaded in load_batch(path):
            assert loaded.script.is_file(), path


def test_framework_detection(tmp_path):
    (tmp_path / "a.py").write_text("import jax.numpy as jnp\n")
    (tmp_path / "b.py").write_text("from tensorflow import keras\n")
    (tmp_path / "c.py").write_text("import torch\nimport torch_xla.core.xla_model as xm\n")
    (tmp_path / "d.py").write_text("print('hi')\n")
    assert [detect_framework(tmp_path / f"{n}.py") for n in "abcd"] == ["jax", "tensorflow", "torch_xla", None]


def test_json_schema_describes_the_keys():
    schema = spec_json_schema()
    assert schema["title"] == "xlarun run spec"
    assert set(schema["required"]) == {"name", "script"}
    dump = schema["$defs"]["DumpSpec"]["properties"]
    assert "pass_re" in dump and "--xla_dump_hlo_pass_re" in dump["pass_re"]["description"]


MATRIX = """name: m
script: s.py
backend: ${matrix.backend}
timeout: ${matrix.t}
env: {WHERE: "on-${matrix.backend}"}
matrix:
  backend: [local, docker-cpu]
  t: [10, 20]
  exclude: [{backend: docker-cpu, t: 20}]
  include: [{backend: local, note: extended}, {backend: docker-gpu, t: 5}]
"""


def test_matrix_expands_like_github_actions():
    from xlarun.capture.spec_yaml import parse_spec_cells

    cells = parse_spec_cells(MATRIX, "m.yaml", environ={})
    assert [values for values, _ in cells] == [
        {"backend": "local", "t": 10, "note": "extended"},
        {"backend": "local", "t": 20, "note": "extended"},
        {"backend": "docker-cpu", "t": 10},
        {"backend": "docker-gpu", "t": 5},
    ]
    assert [(s.backend.kind, s.timeout, s.env["WHERE"]) for _, s in cells] == [
        ("local", 10, "on-local"),
        ("local", 20, "on-local"),
        ("docker-cpu", 10, "on-docker-cpu"),
        ("docker-gpu", 5, "on-docker-gpu"),
    ]


def test_matrix_cell_errors_name_the_cell():
    from xlarun.capture.spec_yaml import parse_spec_cells

    with pytest.raises(SpecError) as info:
        parse_spec_cells("name: m\nscript: s.py\ntimeout: ${matrix.t}\nmatrix:\n  t: [5, never]\n", "m.yaml", environ={})
    assert (
        info.value.message
        == "m.yaml:3:10 timeout (matrix t=never): 'never' is not a duration: use seconds or a number with ms, s, m or h"
    )


def test_matrix_shape_errors():
    from xlarun.capture.spec_yaml import parse_spec_cells

    with pytest.raises(SpecError, match=r"matrix\.t: must be a non-empty list"):
        parse_spec_cells("name: m\nscript: s.py\nmatrix:\n  t: 5\n", "m.yaml", environ={})
    with pytest.raises(SpecError, match=r"\$\{matrix.x\} is not an axis"):
        parse_spec_cells("name: m\nscript: s.py\nargs: ['${matrix.x}']\nmatrix:\n  t: [1]\n", "m.yaml", environ={})
    with pytest.raises(SpecError, match="no cells left"):
        parse_spec_cells("name: m\nscript: s.py\nmatrix:\n  t: [1]\n  exclude: [{t: 1}]\n", "m.yaml", environ={})


def test_load_spec_refuses_a_matrix_and_points_at_batch(tmp_path):
    spec = write_spec(tmp_path, "name: m\nscript: job.py\nmatrix:\n  t: [1, 2]\n", "print(1)\n")
    with pytest.raises(SpecError, match="matrix of 2 cell") as info:
        load_spec(spec)
    assert "xlarun batch" in info.value.hint
