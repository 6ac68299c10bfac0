"""`xlarun replay` and `xlarun convert` on real captures in a store, and replays in `xlarun show`."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("jax")

from tests.test_replay_drivers import make_runner


def _file(store, module, pattern):
    found = [f.path for f in module.files if re.search(pattern, f.path)]
    assert found, (pattern, [f.path for f in module.files])
    return sorted(found)[0]


def _module(store, name):
    from xlarun.navigate.refs import resolve_module

    return resolve_module(store.index, name)


def test_replay_a_stored_snapshot_records_it_and_show_lists_it(jax_run, cli):
    store, _ = jax_run
    result = cli("replay", "train_step", "--store", store.root, "-n", "2", "--reference-platform", "cpu", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "match" and data["input_kind"] == "snapshot" and data["arguments"] == "snapshot"
    assert data["compared_with"] == ["snapshot result", "platform cpu"]
    assert len(data["run_times_s"]) == 2 and data["replay_id"] and data["module"].endswith("/module_0012")

    shown = cli("show", "train_step", "--store", store.root)
    assert shown.exit_code == 0
    assert "replays (" in shown.stdout and data["replay_id"] in shown.stdout

    # the record lives in the store; the index row is derived and comes back after a rebuild
    records = list(store.runs_dir.glob(f"*/replays/{data['replay_id']}.json"))
    assert len(records) == 1
    store.close()
    (store.root / "index.sqlite").unlink()
    assert data["replay_id"] in cli("show", "train_step", "--store", store.root).stdout


def test_human_output_and_streamed_log(jax_run, cli):
    store, _ = jax_run
    result = cli("replay", "accuracy", "--store", store.root, "--print-literals")
    assert result.exit_code == 0
    assert "replay of module_" in result.stdout and "match" in result.stdout
    assert "compared with" in result.stdout and "snapshot result" in result.stdout
    assert "output 0" in result.stdout  # the literal
    assert "  | compiled" in result.stderr


def test_edited_module_against_the_original_snapshot_exits_1(jax_run, cli, tmp_path):
    store, _ = jax_run
    module = _module(store, "train_step")
    text = store.read_file(module.run_id, _file(store, module, r"before_optimizations\.txt$")).decode()
    snapshot = tmp_path / "train.snapshot.1.pb"
    snapshot.write_bytes(store.read_file(module.run_id, _file(store, module, r"\.snapshot\.")))
    constant = re.search(r"constant\((-?\d+\.\d+)\)", text)
    assert constant, "the training step has a fractional constant (the mean's 1/batch)"
    edited = tmp_path / "module_0012.jit_train_step.before_optimizations.txt"
    edited.write_text(text.replace(constant.group(0), f"constant({float(constant.group(1)) * 2})", 1))

    result = cli("replay", edited, "--snapshot", snapshot, "--store", store.root, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "mismatch" and data["mismatches"] and data["module"] is None
    assert data["exit_code"] == 1 and data["error"] is None and data["max_abs_error"] > 0

    edited.write_text(text)
    assert cli("replay", edited, "--snapshot", snapshot, "--store", store.root, "-q").exit_code == 0


def test_unoptimized_file_of_a_stored_module_on_fake_data(jax_run, cli):
    store, _ = jax_run
    module = _module(store, "train_step")
    before = _file(store, module, r"before_optimizations\.hlo\.pb$")
    result = cli("replay", "train_step", "--store", store.root, "--file", before, "--seed", "4", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["verdict"] == "ran" and data["arguments"] == "fake"
    assert data["input_kind"] == "proto"


def test_tf_module_replays_on_fake_data(tf_run, cli):
    store, _ = tf_run
    result = cli("replay", "a_inference_train_step", "--store", store.root, "--reference-platform", "cpu", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "match" and data["module_name"].startswith("a_inference_train_step")


def test_runner_engine_exit_codes(jax_run, cli, tmp_path):
    store, _ = jax_run
    ok = make_runner(tmp_path, "run_hlo_module", exit_code=0)
    result = cli(
        "replay",
        "train_step",
        "--store",
        store.root,
        "--engine",
        "run_hlo_module",
        "--runner",
        ok,
        "--reference-platform",
        "interpreter",
        "--json",
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["verdict"] == "match"
    assert data["command"][1:5] == ["--platform=CPU", "--reference_platform=Interpreter", "--input_format=pb", "--iterations=1"]
    assert data["command"][-2:] == ["--run_test_hlo_passes=false", data["command"][-1]] and ".snapshot." in data["command"][-1]

    miscompare = make_runner(tmp_path, "run_hlo_module", exit_code=255)
    assert (
        cli("replay", "train_step", "--store", store.root, "--engine", "run_hlo_module", "--runner", miscompare, "-q").exit_code
        == 1
    )
    flag_error = make_runner(tmp_path, "run_hlo_module", exit_code=1)
    assert (
        cli("replay", "train_step", "--store", store.root, "--engine", "run_hlo_module", "--runner", flag_error, "-q").exit_code
        == 3
    )


def test_usage_errors_exit_2(jax_run, cli):
    store, _ = jax_run
    assert cli("replay", "no_such_module_xyz", "--store", store.root).exit_code == 2
    unknown = cli("replay", "no_such_module_xyz", "--store", store.root, "--json")
    data = json.loads(unknown.stdout)
    assert unknown.exit_code == data["exit_code"] == 2 and "no_such_module_xyz" in data["error"] and data["verdict"] is None
    assert cli("replay", "train_step", "--store", store.root, "--inputs", "sideways").exit_code == 2
    assert cli("replay", "train_step", "--store", store.root, "--platform", "cuda").exit_code == 3  # not on this machine


@pytest.mark.slow
def test_a_loose_file_replays_without_a_store(cli, tmp_path):
    from pathlib import Path

    text = Path(__file__).parent / "fixtures" / "hlo" / "fp" / "module_0004.jit_f.before_optimizations.txt"
    result = cli("replay", text, "--store", tmp_path / "no-store", "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["verdict"] == "ran" and data["replay_id"] is None
    assert not (tmp_path / "no-store").exists()


@pytest.mark.slow
def test_convert_text_proto_text(tmp_path, cli):
    from pathlib import Path

    source = Path(__file__).parent / "fixtures" / "hlo" / "lookup_large" / "module_0002.jit_lookup.before_optimizations.txt"
    proto = tmp_path / "lookup.pb"
    assert cli("convert", source, "--to", "proto", "-o", proto).exit_code == 0
    text = cli("convert", proto, "--to", "text")
    assert text.exit_code == 0 and text.stdout.startswith("HloModule jit_lookup") and "{...}" not in text.stdout
    assert cli("convert", source, "--to", "dot").exit_code == 2
    assert cli("convert", tmp_path / "missing.txt", "--to", "text").exit_code == 2

    elided = Path(__file__).parent / "fixtures" / "hlo" / "lookup_elided" / "module_0002.jit_lookup.before_optimizations.txt"
    result = cli("convert", elided, "--to", "proto", "-o", tmp_path / "e.pb")
    assert result.exit_code == 0 and "GARBAGE" in result.stderr


# ---- replay --json prints exactly one JSON document, failures included ----

FP_TEXT = "fixtures/hlo/fp/module_0004.jit_f.before_optimizations.txt"
FAILURE_KEYS = {"replay_id", "module", "ref", "verdict", "error", "hint", "exit_code"}


def _one_document(result) -> dict:
    data = json.loads(result.stdout)  # the whole of stdout is one document
    assert data["exit_code"] == result.exit_code
    return data


def test_json_failure_unknown_ref(cli, tmp_path):
    from xlarun.store.facade import LocalStore

    LocalStore.open(tmp_path / "store", create=True).close()
    result = cli("replay", "no_such_module_xyz", "--store", tmp_path / "store", "--json")
    data = _one_document(result)
    assert result.exit_code == 2 and set(data) == FAILURE_KEYS
    assert data["verdict"] is None and data["ref"] == "no_such_module_xyz" and data["error"] == "the store has no runs yet"


def test_json_failure_no_store_is_not_an_engine_error(cli, tmp_path):
    data = _one_document(cli("replay", "jit_f", "--store", tmp_path / "missing", "--json"))
    assert data["exit_code"] == 3 and data["verdict"] is None and "no xlarun store" in data["error"] and data["hint"]


def test_json_failure_engine_missing(cli, tmp_path):
    from pathlib import Path

    text = Path(__file__).parent / FP_TEXT
    result = cli(
        "replay",
        text,
        "--engine",
        "run_hlo_module",
        "--store",
        tmp_path / "no-store",
        "--json",
        env={"PATH": "/usr/bin:/bin", "XLARUN_RUN_HLO_MODULE": ""},
    )
    data = _one_document(result)
    assert result.exit_code == 3 and data["verdict"] == "engine-error"
    assert data["error"] == "run_hlo_module is not on PATH and XLARUN_RUN_HLO_MODULE is not set" and "bazel" in data["hint"]


@pytest.mark.slow
def test_json_failure_unreadable_input(cli, tmp_path):
    broken = tmp_path / "module_0001.jit_broken.before_optimizations.txt"
    broken.write_text("HloModule jit_broken\n\nENTRY main {\n  p = f32[4] parameter(0)\n  ROOT q = f32[4] nonsense(p)\n}\n")
    data = _one_document(cli("replay", broken, "--store", tmp_path / "no-store", "--json"))
    assert data["exit_code"] == 2 and data["verdict"] is None and data["error"].startswith("HLO text does not parse")


@pytest.mark.slow
def test_json_failure_compile_error_is_a_result(cli, tmp_path):
    module = tmp_path / "module_0001.jit_bad.before_optimizations.txt"
    module.write_text(
        "HloModule jit_bad\n\nENTRY main {\n  p = f32[4] parameter(0)\n"
        '  ROOT c = f32[4] custom-call(p), custom_call_target="xlarun_no_such_target"\n}\n'
    )
    result = cli("replay", module, "--store", tmp_path / "no-store", "--json")
    data = _one_document(result)
    assert result.exit_code == 3 and data["verdict"] == "engine-error" and data["module_name"] == "jit_bad"
    assert data["error"].startswith("compile on cpu failed") and "xlarun_no_such_target" in data["error"]
    assert data["hint"] is None and data["outputs"] == []


def test_json_failure_internal_error(cli, tmp_path, monkeypatch):
    from pathlib import Path

    from xlarun.replay import engine

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "replay_with_pjrt", broken)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the crash log goes there
    # --in-process: the patched engine is this process's (the default child would import its own)
    result = cli("replay", Path(__file__).parent / FP_TEXT, "--store", tmp_path / "no-store", "--json", "--in-process")
    data = _one_document(result)
    assert result.exit_code == 4 and data["error"] == "internal error: RuntimeError('boom')" and data["verdict"] is None
