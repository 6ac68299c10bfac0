"""Navigation commands over a real capture: runs, modules, show, cat, find, explain, logs, export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def store_arg(jax_run):
    store, result = jax_run
    return ["--store", str(store.root)], result


def test_runs_lists_the_capture(cli, store_arg):
    args, result = store_arg
    out = cli("runs", *args, "--json")
    assert out.exit_code == 0
    [run] = json.loads(out.stdout)
    assert run["run_id"] == result.run_id and run["name"] == "jax-mlp" and run["status"] == "succeeded"
    assert run["n_modules"] == len(result.modules)


def test_modules_main_program_first(cli, store_arg):
    args, _result = store_arg
    out = cli("modules", *args)
    assert out.exit_code == 0
    table = out.stdout.splitlines()
    first_row = next(line for line in table if "jit_" in line)
    assert "jit_train_step" in first_row
    data = json.loads(cli("modules", *args, "--json").stdout)
    # the user's code first, then the untold, then the framework's; within each, most compute ops, most instructions
    keys = [({True: 2, None: 1, False: 0}[m["own_code"]], m["compute_ops"], m["instr_before"] or 0) for m in data["modules"]]
    assert keys == sorted(keys, reverse=True)
    assert [m["own_code"] for m in data["modules"]][:3] == [True, True, True]  # train_step, accuracy, init_params
    assert "framework" in next(line for line in table if "jit__normal" in line).split()


@pytest.mark.parametrize("ref_form", ["id", "module_id", "name", "run_slash", "prefix"])
def test_refs_in_every_form_resolve_to_the_same_module(cli, store_arg, ref_form):
    args, result = store_arg
    main = result.modules[0]
    ref = {
        "id": str(main.module_id),
        "module_id": f"module_{main.module_id:04d}",
        "name": "jit_train_step",
        "run_slash": f"{result.run_id[:11]}/module_{main.module_id:04d}",
        "prefix": "jit_train",
    }[ref_form]
    out = cli("show", ref, *args, "--json")
    assert out.exit_code == 0, out.stderr
    shown = json.loads(out.stdout)
    assert (shown["run_id"], shown["module_id"]) == (result.run_id, main.module_id)


def test_ambiguous_ref_lists_candidates(cli, store_arg):
    args, _ = store_arg
    out = cli("show", "jit_", *args)
    assert out.exit_code == 2
    assert "ambiguous" in out.stderr and "jit_train_step" in out.stderr and "jit_accuracy" in out.stderr


def test_unknown_ref(cli, store_arg):
    args, _ = store_arg
    out = cli("show", "no_such_module", *args)
    assert out.exit_code == 2 and "no module matches 'no_such_module'" in out.stderr


def test_show_lists_stages_and_counts(cli, store_arg):
    args, result = store_arg
    out = cli("show", "jit_train_step", *args)
    assert out.exit_code == 0
    assert "before_optimizations" in out.stdout and "cpu_after_optimizations" in out.stdout
    assert f"{result.modules[0].instr_before} before optimizations" in out.stdout


def test_cat_prints_the_exact_dump(cli, store_arg, jax_run):
    args, result = store_arg
    store, _ = jax_run
    main = store.index.module(result.run_id, result.modules[0].module_id)
    texts = {f.stage: f.path for f in main.files if f.kind == "hlo" and f.format == "text"}
    out = cli("cat", "jit_train_step", *args)
    assert out.exit_code == 0
    assert out.stdout == store.read_file(result.run_id, texts["before_optimizations"]).decode()  # byte for byte
    after = cli("cat", "jit_train_step", "--stage", "after_optimizations", *args)
    assert after.exit_code == 0
    assert after.stdout == store.read_file(result.run_id, texts["after_optimizations"]).decode()
    assert after.stdout.startswith("HloModule jit_train_step") and after.stdout != out.stdout


def test_find_by_opcode_op_name_and_source(cli, store_arg):
    args, _result = store_arg
    hits = json.loads(cli("find", "dot", "--opcode", *args, "--json").stdout)
    assert "jit_train_step" in {h["module_name"] for h in hits}
    by_op_name = json.loads(cli("find", "log_softmax", "--op-name", *args, "--json").stdout)
    assert {h["module_name"] for h in by_op_name} == {"jit_train_step"}
    by_source = json.loads(cli("find", "jax_mlp.py", "--source", *args, "--json").stdout)
    assert "jit_train_step" in {h["module_name"] for h in by_source}
    script = Path(__file__).resolve().parent.parent / "configs" / "examples" / "jax_mlp.py"
    lines = script.read_text().splitlines()
    for where in (m for h in by_source for m in h["matches"]):  # file:line, a line of the script that exists
        path, line = where.rsplit(":", 1)
        assert Path(path).resolve() == script and 1 <= int(line) <= len(lines) and lines[int(line) - 1].strip(), where
    none = cli("find", "definitely-not-there", *args)
    assert none.exit_code == 1


def test_explain_seed_name(cli):
    out = cli("explain", "module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot", "--json")
    assert out.exit_code == 0
    decoded = json.loads(out.stdout)
    assert decoded["module_id"] == 1 and decoded["step"] == 1 and decoded["pipeline"] == "IPU"
    assert decoded["after_pass"] == "forward-allocation" and decoded["before_pass"] == "hlo-memory-scheduler"
    words = cli("explain", "module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot")
    assert "forward-allocation" in words.stdout


def test_explain_says_what_an_existing_binary_dump_holds(cli):
    dump = Path(__file__).parent / "fixtures/hlo/fp/module_0004.jit_f.cpu_after_optimizations.hlo.pb"
    assert json.loads(cli("explain", dump, "--json").stdout)["holds"] == "hlo_proto"
    assert "holds        an HloProto (the module" in cli("explain", dump).stdout
    assert "holds" not in cli("explain", "module_0004.jit_f.cpu_after_optimizations.hlo.pb").stdout  # a name alone


def test_logs_and_export(cli, store_arg, tmp_path):
    args, result = store_arg
    logs = cli("logs", result.run_id, *args, "--stream", "stdout")
    assert "step 0: loss" in logs.stdout
    out = cli("export", result.run_id, tmp_path / "exported", *args)
    assert out.exit_code == 0
    assert (tmp_path / "exported" / "_xlarun" / "manifest.json").exists()
    assert any(p.name.endswith("jit_train_step.before_optimizations.txt") for p in (tmp_path / "exported").iterdir())


def test_tf1_autojit_run_shows_graphdefs_and_clusters(cli, tf1_run):
    store, _result = tf1_run
    args = ["--store", str(store.root)]
    listing = cli("modules", *args)
    assert "cluster_0__XlaCompiledKernel_true" in listing.stdout
    assert "tf-graph files" in listing.stdout
    graphs = json.loads(cli("files", *args, "--kind", "tf-graph", "--json").stdout)["files"]
    names = {f["path"] for f in graphs}
    assert {"tf_graphs/mark_for_compilation.pbtxt", "tf_graphs/mark_for_compilation_annotated.pbtxt"} <= names
    assert all(f["kind"] == "tf-graph" for f in graphs)


def test_large_tables_print_as_plain_aligned_text(capsys):
    from xlarun.console import PLAIN_TABLE_ROWS, print_table

    rows = [(f"run/module_{i:04d}", f"name{i}", i) for i in range(PLAIN_TABLE_ROWS + 1)]
    print_table(("module", "name", "n"), rows, right=("n",))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["module", "name", "n"]
    assert len(lines) == PLAIN_TABLE_ROWS + 2
    assert lines[1] == "run/module_0000  name0      0"
    assert lines[-1].endswith(f"name{PLAIN_TABLE_ROWS}  {PLAIN_TABLE_ROWS}")


def test_runs_shows_the_newest_fifty_and_says_how_many_are_older(cli, tmp_path):
    """A table of 10,000 runs is no answer; the newest 50 are read alone (LIMIT in SQL), --last N / 0 for more."""
    from tests.synthetic_store import archive_run, module_dumps
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "s", create=True)
    ids = [
        archive_run(store, module_dumps(0, "jit_step"), run_id=f"20260101-00{i // 60:02d}{i % 60:02d}-{i:04x}", name=f"r{i}")
        for i in range(55)
    ]
    table = cli("runs", "--store", tmp_path / "s")
    listed = [line.split()[0] for line in table.stdout.splitlines()[1:] if line.startswith("2026")]
    assert listed == ids[5:] and "5 older run(s) not shown (--last 0 lists every run)" in table.output
    assert [line.split()[0] for line in cli("runs", "-n", "2", "--store", tmp_path / "s").stdout.splitlines()[1:3]] == ids[-2:]
    assert len(json.loads(cli("runs", "--json", "--store", tmp_path / "s").stdout)) == 55  # scripts get every run
    assert len(json.loads(cli("runs", "--json", "--last", "3", "--store", tmp_path / "s").stdout)) == 3
    everything = cli("runs", "--last", "0", "--store", tmp_path / "s")
    assert "older run" not in everything.output and everything.stdout.count("\n2026") == 55
    assert cli("runs", "--last", "-1", "--store", tmp_path / "s").exit_code == 2
