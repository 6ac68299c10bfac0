"""Flag composition: the job's environment from a spec."""

from __future__ import annotations

import shlex

import pytest

from xlarun.capture.backends.base import JobPaths
from xlarun.capture.flags import compose_env, merge_flags, redact_env, split_flags
from xlarun.capture.known_flags import KnownXlaFlags
from xlarun.capture.spec_yaml import parse_spec_text
from xlarun.hlo.names import decode_dump_name

PATHS = JobPaths.under("/runs/r1")


def spec_of(body: str):
    return parse_spec_text("name: t\nscript: s.py\n" + body, environ={})


def test_dump_flags_point_into_the_run_folder():
    composed = compose_env(spec_of("dump:\n  formats: [text, proto, dot]\n  snapshots: true\n  pass_re: fusion\n"), PATHS, {})
    assert composed.xla_flags == [
        "--xla_dump_to=/runs/r1/dump",
        "--xla_dump_hlo_as_text",
        "--xla_dump_hlo_as_proto",
        "--xla_dump_hlo_as_dot",
        "--xla_dump_hlo_snapshots",
        "--xla_dump_hlo_pass_re=fusion",
        "--xla_dump_large_constants",
    ]
    assert shlex.split(composed.env["XLA_FLAGS"]) == composed.xla_flags
    assert composed.env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert composed.env["PYTHONUNBUFFERED"] == "1"


def test_user_xla_flags_are_merged_and_the_spec_wins():
    base = {"XLA_FLAGS": "--xla_dump_to=/elsewhere --xla_cpu_enable_fast_math=false --xla_dump_hlo_pass_re=x"}
    composed = compose_env(spec_of("dump:\n  pass_re: fusion\n"), PATHS, base)
    assert composed.xla_flags[0] == "--xla_cpu_enable_fast_math=false"
    assert "--xla_dump_to=/runs/r1/dump" in composed.xla_flags
    assert "--xla_dump_to=/elsewhere" not in composed.xla_flags
    assert "--xla_dump_hlo_pass_re=fusion" in composed.xla_flags and "--xla_dump_hlo_pass_re=x" not in composed.xla_flags
    assert any("xla_dump_hlo_pass_re" in w for w in composed.warnings)
    assert any("--xla_dump_to" in w for w in composed.warnings)


def test_logging_sets_both_vlog_variables_and_vmodule():
    composed = compose_env(
        spec_of("logging:\n  min_log_level: 1\n  vlog_level: 2\n  vmodule: {xla_compiler: 2, poplar_compiler: 1}\n"), PATHS, {}
    )
    assert composed.env["TF_CPP_MIN_VLOG_LEVEL"] == "2"
    assert composed.env["TF_CPP_MAX_VLOG_LEVEL"] == "2"
    assert composed.env["TF_CPP_VMODULE"] == "xla_compiler=2,poplar_compiler=1"
    assert composed.env["TF_CPP_MIN_LOG_LEVEL"] == "1"


def test_tensorflow_flags_and_graph_dumps_use_the_env_var():
    composed = compose_env(
        spec_of("tensorflow:\n  auto_jit: 2\n  cpu_global_jit: true\n  clustering_debug: true\ndump:\n  tf_graphs: true\n"),
        PATHS,
        {},
    )
    assert composed.tf_xla_flags == ["--tf_xla_auto_jit=2", "--tf_xla_cpu_global_jit", "--tf_xla_clustering_debug"]
    assert composed.env["TF_DUMP_GRAPH_PREFIX"] == "/runs/r1/tf_graphs"
    assert "tf_dump_graph_prefix" not in composed.env["TF_XLA_FLAGS"]


def test_graph_prefix_in_the_users_tf_xla_flags_is_removed():
    composed = compose_env(spec_of(""), PATHS, {"TF_XLA_FLAGS": "--tf_xla_auto_jit=1 --tf_dump_graph_prefix=/tmp"})
    assert composed.tf_xla_flags == ["--tf_xla_auto_jit=1"]
    assert any("aborts TensorFlow" in w for w in composed.warnings)


def test_jax_ir_torch_and_poplar_outputs_go_into_the_run_folder():
    body = (
        "dump:\n  jax_ir: [jaxpr, stablehlo]\n  torch_xla: hlo\n  poplar_reports: true\n"
        "poplar:\n  flags: ['--use_ipu_model']\n  engine_options: {debug.instrument: 'true'}\n"
        "logging:\n  poplar_vlog_level: 1\ntorch_xla:\n  ir_debug: true\n  hlo_debug: true\n"
    )
    env = compose_env(spec_of(body), PATHS, {}).env
    assert env["JAX_DUMP_IR_TO"] == "/runs/r1/jax_ir" and env["JAX_DUMP_IR_MODES"] == "jaxpr,stablehlo"
    assert env["XLA_SAVE_TENSORS_FILE"] == "/runs/r1/torch_xla/tensors.hlo" and env["XLA_SAVE_TENSORS_FMT"] == "hlo"
    assert env["XLA_IR_DEBUG"] == "1" and env["XLA_HLO_DEBUG"] == "1"
    assert (
        env["POPLAR_ENGINE_OPTIONS"]
        == '{"autoReport.all": "true", "autoReport.directory": "/runs/r1/poplar", "debug.instrument": "true"}'
    )
    assert env["TF_POPLAR_FLAGS"] == "--use_ipu_model"
    assert env["TF_POPLAR_VLOG_LEVEL"] == "1"


def test_compose_is_pure_and_delta_lists_only_changes():
    spec = spec_of("env:\n  MY_VAR: x\n")
    base = {"PATH": "/bin", "MY_VAR": "old"}
    first = compose_env(spec, PATHS, base)
    second = compose_env(spec, PATHS, base)
    assert first.env == second.env
    assert base == {"PATH": "/bin", "MY_VAR": "old"}
    assert "PATH" not in first.delta and first.delta["MY_VAR"] == "x"
    assert "export MY_VAR=x" in first.export_lines()


def test_secrets_are_redacted():
    redacted = redact_env(
        {"HF_TOKEN": "abc", "MY_PASSWORD": "p", "PIP_INDEX_URL": "https://user:pw@host/simple", "XLA_FLAGS": "--x"}
    )
    assert redacted == {
        "HF_TOKEN": "***",
        "MY_PASSWORD": "***",
        "PIP_INDEX_URL": "https://user:***@host/simple",
        "XLA_FLAGS": "--x",
    }


def test_split_and_merge_helpers():
    assert split_flags("--a=1  --b='x y'") == ["--a=1", "--b=x y"]
    assert merge_flags(["--a=1", "--b"], ["--a=2"]) == (["--b", "--a=2"], ["a"])


def test_flags_are_joined_the_way_xla_parses_them():
    from xlarun.capture.flags import join_flags

    # XLA ignores a flag quoted as a whole ('--x=.*'); it reads quotes around the value only
    composed = compose_env(spec_of("dump:\n  pass_re: '.*'\n  extra_xla_flags: ['--xla_cpu_foo=a b']\n"), PATHS, {})
    assert "'--xla_dump_hlo_pass_re" not in composed.env["XLA_FLAGS"]
    assert "--xla_dump_hlo_pass_re=.* " in composed.env["XLA_FLAGS"]
    assert composed.env["XLA_FLAGS"].endswith('--xla_cpu_foo="a b"')
    assert join_flags(['--a=say "hi"']) == "--a='say \"hi\"'"


@pytest.mark.slow  # a real JAX process
def test_pass_re_really_makes_per_pass_dumps(tmp_path):
    """The flag string as composed, handed to a real JAX process, must produce per-pass dumps."""
    import subprocess
    import sys

    pytest.importorskip("jax")
    paths = JobPaths.under(str(tmp_path))
    composed = compose_env(spec_of("dump:\n  pass_re: 'fusion'\n"), paths, {"PATH": "/usr/bin:/bin"})
    code = "import jax, jax.numpy as jnp; jax.jit(lambda x: jnp.sin(x) * 2 + 1)(jnp.ones(8)).block_until_ready()"
    subprocess.run([sys.executable, "-c", code], env=composed.env, check=True, timeout=120)
    dumped = [p.name for p in (tmp_path / "dump").iterdir()]
    passes = [decode_dump_name(name) for name in dumped if decode_dump_name(name).kind == "pass"]
    # every module compiled has a dump right after the fusion pass, and only dumps around passes the regex names
    assert {d.module_id for d in passes} == {
        decode_dump_name(n).module_id for n in dumped if n.endswith(".before_optimizations.txt")
    }, dumped
    assert all("fusion" in {d.after_pass for d in passes if d.module_id == m} for m in {d.module_id for d in passes}), dumped
    assert all("fusion" in (d.after_pass or "") + (d.before_pass or "") for d in passes), [d.path for d in passes]


OLD_TF = KnownXlaFlags(
    "tensorflow 2.16.2", ("libtensorflow_cc.so.2",), frozenset({"xla_dump_to", "xla_dump_hlo_as_text", "xla_dump_hlo_as_proto"})
)


def test_flags_the_jobs_xla_lacks_are_left_out_with_what_is_lost():
    composed = compose_env(spec_of("dump:\n  formats: [text, proto]\n  snapshots: true\n"), PATHS, {}, OLD_TF)
    assert composed.xla_flags == ["--xla_dump_to=/runs/r1/dump", "--xla_dump_hlo_as_text", "--xla_dump_hlo_as_proto"]
    assert shlex.split(composed.env["XLA_FLAGS"]) == composed.xla_flags
    assert composed.warnings == [
        "tensorflow 2.16.2's XLA does not know --xla_dump_hlo_snapshots: left out; no snapshots: replay will run on generated arguments",
        "tensorflow 2.16.2's XLA does not know --xla_dump_large_constants: left out; "
        "big constants will be elided as {...} and replay will fill them with garbage",
    ]


def test_flags_the_user_gave_are_kept_with_a_warning():
    base = {"XLA_FLAGS": "--xla_cpu_mine=1 --xla_dump_large_constants"}
    composed = compose_env(spec_of("dump:\n  extra_xla_flags: ['--xla_gpu_theirs']\n"), PATHS, base, OLD_TF)
    assert composed.xla_flags == [
        "--xla_cpu_mine=1",
        "--xla_dump_to=/runs/r1/dump",
        "--xla_dump_hlo_as_text",
        "--xla_dump_large_constants",
        "--xla_gpu_theirs",
    ]
    kept = [w for w in composed.warnings if "kept as you asked" in w]
    assert len(kept) == 3
    assert "--xla_cpu_mine (from your XLA_FLAGS)" in kept[0] and "--xla_gpu_theirs (from dump.extra_xla_flags)" in kept[2]
    assert all("left out" not in w for w in composed.warnings)


def test_without_known_flags_or_when_all_are_known_nothing_changes():
    spec = spec_of("dump:\n  snapshots: true\n")
    everything = KnownXlaFlags(
        "jaxlib 0.10.2", (), frozenset({"xla_dump_hlo_as_text", "xla_dump_hlo_snapshots", "xla_dump_large_constants"})
    )
    assert compose_env(spec, PATHS, {}).xla_flags == compose_env(spec, PATHS, {}, everything).xla_flags
    assert compose_env(spec, PATHS, {}, everything).warnings == []  # --xla_dump_to is never dropped, even unlisted


def test_advice_names_where_a_refused_flag_came_from():
    from xlarun.capture.flags import where_flag_comes_from

    spec = spec_of("dump:\n  extra_xla_flags: ['--xla_foo']\n  formats: [proto]\nenv:\n  TF_XLA_FLAGS: --tf_xla_bar\n")
    base = {"XLA_FLAGS": "--xla_mine"}
    assert where_flag_comes_from(spec, base, "xla_foo") == "remove it from dump.extra_xla_flags"
    assert where_flag_comes_from(spec, base, "xla_mine") == "remove it from XLA_FLAGS in your environment"
    assert where_flag_comes_from(spec, base, "tf_xla_bar") == "remove it from TF_XLA_FLAGS in the spec's env"
    assert where_flag_comes_from(spec, base, "xla_dump_large_constants") == "set dump.large_constants: false in the spec"
    assert where_flag_comes_from(spec, base, "xla_dump_hlo_as_proto") == "take 'proto' out of dump.formats"
