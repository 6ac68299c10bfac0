"""Run specs: validation with exact error locations, interpolation, defaults, schema."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


def test_matrix_values_yaml_reads_as_dates_or_sets_are_substituted_as_text(cli, tmp_path):
    text = "name: m\nscript: job.py\ntags: {d: 'on-${matrix.d}'}\nmatrix:\n  d: [2001-01-01, !!set {a}]\n"
    spec = write_spec(tmp_path, text, "print(1)\n")
    from xlarun.capture.spec_yaml import load_batch

    assert [cell.spec.tags["d"] for cell in load_batch(spec, environ={})] == ["on-2001-01-01", "on-{'a'}"]
    result = cli("validate", spec, "--json")  # was TypeError: date is not JSON serializable (exit 4)
    assert result.exit_code == 0
    assert [c["values"]["d"] for c in json.loads(result.stdout)["matrix"]] == ["2001-01-01", ["a"]]


def test_include_entries_count_against_the_cell_limit():
    from xlarun.capture.spec_yaml import parse_spec_cells

    include = ", ".join(f"{{t: {i}}}" for i in range(1001))
    with pytest.raises(SpecError) as info:
        parse_spec_cells(f"name: m\nscript: s.py\nmatrix:\n  include: [{include}]\n", "m.yaml", environ={})
    assert info.value.message == "m.yaml:3:1 matrix: 1,001 cells with its 'include' entries, more than 1,000"


def test_load_spec_refuses_a_matrix_and_points_at_batch(tmp_path):
    spec = write_spec(tmp_path, "name: m\nscript: job.py\nmatrix:\n  t: [1, 2]\n", "print(1)\n")
    with pytest.raises(SpecError, match="matrix of 2 cell") as info:
        load_spec(spec)
    assert "xlarun batch" in info.value.hint


@pytest.mark.parametrize(
    ("written", "environ", "expected"),
    [
        ("${X:?set X first}", {"X": "v"}, "v"),
        ("${X?set X first}", {"X": ""}, ""),  # without ':' only an unset variable is an error, as in a shell
        ("${X-dflt}", {"X": ""}, ""),
        ("${X-dflt}", {}, "dflt"),
        ("${X:-dflt}", {"X": ""}, "dflt"),
        ("$${X:+a}", {}, "${X:+a}"),  # $$ keeps a literal ${...}
    ],
)
def test_interpolation_follows_the_shell(written, environ, expected):
    assert interpolate(written, environ) == expected


def test_a_required_variable_is_an_error_naming_it_and_the_message_never_the_value():
    text = "name: demo\nscript: run.py\nenv: {A: '${X:?export X=the data folder}', B: '${Y?needed}'}\n"
    assert problems_of(text) == [
        "spec.yaml:3:10 env.A: environment variable X is not set: export X=the data folder",
        "spec.yaml:3:47 env.B: environment variable Y is not set: needed",
    ]
    [problem] = problems_of("name: demo\nscript: run.py\nenv: {A: '${X:?}'}\n", environ={"X": ""})
    assert problem == "spec.yaml:3:10 env.A: environment variable X is empty: it is required"


@pytest.mark.parametrize("written", ["${X:+alt}", "${X:=d}", "${matrix.cell}", "${1}", "tail ${"])
def test_an_unknown_substitution_is_refused_not_passed_on(written):
    [problem] = problems_of(f"name: demo\nscript: run.py\nargs: ['{written}']\n", environ={"X": "v"})
    assert problem.startswith("spec.yaml:3:8 args[0]: ") and "is not a substitution xlarun knows" in problem


def test_args_take_numbers_and_booleans_as_words_and_refuse_the_rest():
    spec = parse_spec_text("name: a\nscript: b.py\nargs: [--n, 1, 2.5, true, x]\n", environ={})
    assert spec.args == ["--n", "1", "2.5", "true", "x"]
    for item, kind in (("{a: b}", "a mapping"), ("null", "null"), ("[1]", "a list")):
        [problem] = problems_of(f"name: a\nscript: b.py\nargs: [x, {item}]\n")
        assert problem == f"spec.yaml:3:7 args: item 1 is {kind}: an argument is a string or a number (quote it: '...')"


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("true", "true is not a duration: use seconds or a number with ms, s, m or h"),
        ("false", "false is not a duration: use seconds or a number with ms, s, m or h"),
        ("9" * 4000, "a number of 4,000 digits is not a duration a job can wait"),
        ("'" + "9" * 400 + "s'", "'99999999999999999999...' (401 characters) is too long a duration for a job to wait"),
        (".inf", "Input should be a finite number"),
    ],
    ids=["true", "false", "4000-digits", "400-digit-string", "inf"],
)
def test_timeouts_that_are_not_durations_are_refused(written, message):
    assert problems_of(f"name: a\nscript: b.py\ntimeout: {written}\n") == [f"spec.yaml:3:10 timeout: {message}"]


NUL = "contains a NUL byte (\\0), which no command line, environment or file name can hold"


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        ('script: "job\\0.py"', "spec.yaml:2:9 script: " + NUL),
        ('script: b.py\nargs: [x, "a\\0b"]', "spec.yaml:3:7 args: item 1 " + NUL),
        ('script: b.py\nenv: {TOKEN: "s3cret\\0"}', "spec.yaml:3:6 env: 'TOKEN' " + NUL),
        ('script: b.py\ntags: {"k\\0": v}', "spec.yaml:3:7 tags: the key 'k<NUL>' " + NUL),
        ('script: b.py\nbackend: {kind: docker-cpu, image: "x\\0"}', "spec.yaml:3:36 backend.image: " + NUL),
        ('script: b.py\ndump: {extra_xla_flags: ["--xla_a=\\0"]}', "spec.yaml:3:25 dump.extra_xla_flags: item 0 " + NUL),
    ],
    ids=["script", "args", "env", "tag-key", "image", "xla-flag"],
)
def test_a_nul_byte_is_refused_where_it_is_and_the_value_is_not_printed(lines, where):
    [problem] = problems_of(f"name: a\n{lines}\n")
    assert problem == where
    assert "s3cret" not in problem


def test_a_script_in_a_symlink_loop_or_not_a_file_is_a_clear_error(tmp_path):
    import os

    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(SpecError, match="script: loop1 cannot be followed: a loop of symbolic links"):
        load_spec(write_spec(tmp_path, "name: a\nscript: loop1\n"))
    os.mkfifo(tmp_path / "fifo.py")
    with pytest.raises(SpecError, match=r"script: fifo\.py is not a regular file"):
        load_spec(write_spec(tmp_path, "name: a\nscript: fifo.py\n"))
    with pytest.raises(SpecError, match="workdir: loop2 cannot be followed: a loop of symbolic links"):
        load_spec(write_spec(tmp_path, "name: a\nscript: fifo.py\nworkdir: loop2\n"))
    with pytest.raises(SpecError, match=r"script: cannot look at .*a{300}: File name too long"):
        load_spec(write_spec(tmp_path, f"name: a\nscript: {'a' * 300}\n"))


def test_a_matrix_value_referenced_many_times_is_bounded():
    from xlarun.capture.spec_yaml import parse_spec_cells

    big = "[" + ", ".join(["v"] * 2000) + "]"
    refs = ", ".join(f"t{i}: '${{matrix.x}}'" for i in range(6))  # 6 x 2,000 values from one 2,000-value cell
    with pytest.raises(SpecError) as info:
        parse_spec_cells(f"name: m\nscript: s.py\ntags: {{{refs}}}\nmatrix:\n  x: [{big}]\n", "m.yaml", environ={})
    assert info.value.message.startswith('m.yaml: the cell (matrix x=["v","v",')
    assert info.value.message.endswith("...) holds more than 10,000 values")
    assert info.value.hint == "split the matrix into several specs, or make the values its cells repeat smaller"


def test_all_the_cells_of_a_matrix_together_are_bounded():
    from xlarun.capture.spec_yaml import parse_spec_cells

    tags = ", ".join(f"k{i}: v" for i in range(150))  # 300 values a cell, 1,000 cells: 300,000 > 250,000
    axes = "\n".join(f"  {axis}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" for axis in "abc")
    with pytest.raises(SpecError) as info:
        parse_spec_cells(f"name: m\nscript: s.py\ntags: {{{tags}}}\nmatrix:\n{axes}\n", "m.yaml", environ={})
    assert info.value.message == "m.yaml: the matrix's 1,000 cells together holds more than 250,000 values"


#: Values a careless or hostile spec puts under a key: explicit tags, huge numbers, NULs, recursion, unknown ${...}.
HOSTILE_VALUES = [
    "null", "true", "-1", "1e400", ".nan", ".inf", "'x'", "''", "[]", "{}", "[1, {a: b}]", "'\\0'", '"\\0"', "9" * 5000,
    "2001-13-45", "!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "'${X:+a}'", "'${HOME}'", "'${matrix.q}'",
    "0x1F", "190:20:30", "'10m'", "'-5s'", "&a [*a]", "!!float 'x'", "!!int 'x'", "!!timestamp 'x'", "!!bool 'maybe'",
    "'" + "a" * 300 + "'", "2000000000000000000000", "{a: []}", "{include: 5}", "{a: [1], include: [5]}",
    "{a: [{b: c}]}", "docker-cpu", "{kind: local, image: x}", "*undefined", "!!python/name:os.system", "[[[[[[]]]]]]",
]  # fmt: skip
SPEC_KEYS = [
    "name", "script", "args", "python", "workdir", "env", "framework", "backend", "timeout", "tags", "matrix",
    "dump.formats", "dump.pass_re", "dump.max_modules", "dump.extra_xla_flags", "logging.vmodule", "tensorflow.auto_jit",
    "poplar.engine_options", "backend.gpus", "backend.shm_size", "backend.volumes", "backend.user", "env.A", "tags.t",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(SPEC_KEYS), st.sampled_from(HOSTILE_VALUES)), min_size=1, max_size=3))
def test_any_hostile_value_under_any_key_is_a_spec_error_or_a_spec(tmp_path, pairs):
    """Found explicit tags PyYAML raised AttributeError/TypeError for, and script names too long to stat (exit 4)."""
    from xlarun.capture.spec_yaml import load_batch

    top = {"name": "t", "script": "job.py"}
    nested: dict[str, dict[str, str]] = {}
    for key, value in pairs:
        outer, _, inner = key.partition(".")
        if inner:
            nested.setdefault(outer, {"kind": "docker-cpu"} if outer == "backend" else {})[inner] = value
        else:
            top[key] = value
    text = "".join(f"{k}: {v}\n" for k, v in top.items() if k not in nested)
    text += "".join(f"{k}:\n" + "".join(f"  {ik}: {iv}\n" for ik, iv in items.items()) for k, items in nested.items())
    spec = write_spec(tmp_path, text, "print(1)\n")
    try:
        cells = load_batch(spec, environ={"HOME": "/home/u"})
    except SpecError as exc:
        assert exc.message.startswith(str(spec)) and "\n" not in exc.message
    else:
        assert all(cell.script == (tmp_path / "job.py").resolve() for cell in cells)


def test_processes_launch_1_to_64_local_processes_and_nothing_else(tmp_path):
    from xlarun.errors import ExitCode

    for backend, words in (("docker-cpu", "needs backend: local"), ("local\nexecutor: ray", "executor: ray is not supported")):
        spec = write_spec(tmp_path, f"name: x\nscript: job.py\nprocesses: 2\nbackend: {backend}\n", "")
        with pytest.raises(SpecError) as info:
            load_spec(spec)
        assert words in str(info.value.problems) and info.value.exit_code == ExitCode.USAGE
    for count in (0, 65):
        spec = write_spec(tmp_path, f"name: x\nscript: job.py\nprocesses: {count}\n", "")
        with pytest.raises(SpecError):
            load_spec(spec)
    assert load_spec(write_spec(tmp_path, "name: x\nscript: job.py\n", "")).spec.processes == 1
