"""Module summaries for the index: the cheap per-pass instruction count, and work shared between runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import xlarun.store.summaries as summarize
from xlarun.hlo import parse_hlo_text
from xlarun.hlo.names import decode_dump_name
from xlarun.store.facade import LocalStore
from xlarun.store.packs import content_digest
from xlarun.store.summaries import _INSTRUCTION_LINE, count_instructions_in_text

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
TEXTS = sorted(FIXTURES.glob("*/*.txt"))


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_line_count_agrees_with_the_parser(path):
    text = path.read_bytes()
    assert count_instructions_in_text(text) == parse_hlo_text(text.decode()).instruction_count()


def test_a_file_starting_with_an_instruction_is_counted():
    assert count_instructions_in_text(b"  %a = f32[] parameter(0)\n  ROOT %b = f32[] negate(%a)\n}\n") == 2


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_fast_count_of_xla_printed_text_agrees_with_the_line_pattern(path):
    text = path.read_bytes()
    assert count_instructions_in_text(text) == len(_INSTRUCTION_LINE.findall(b"\n" + text))


def test_hand_written_hlo_is_counted_by_the_line_pattern():
    text = (
        b"HloModule m\n\nENTRY %main (p: f32[8]) -> f32[8] {\n  // a comment, indented like an instruction\n"
        b"  %p = f32[8]{0} parameter(0)\n  \n  ROOT %n = f32[8]{0} negate(%p)\n}\n"
    )
    assert text.count(b"\n  ") == 4  # what the fast count would say
    assert count_instructions_in_text(text) == parse_hlo_text(text.decode()).instruction_count() == 2


@pytest.mark.parametrize(
    "odd",
    [b"  %w = f32[8]{0} add(%p,\n      %p)\n", b"  // note\n", b"  \n", b" \n", b"\t%t = f32[8]{0} negate(%p)\n"],
    ids=["wrapped line", "indented comment", "blank indented", "blank one space", "tab"],
)
def test_each_mark_of_hand_written_text_turns_the_fast_count_off(odd):
    text = (
        b"HloModule m\n\nENTRY %main (p: f32[8]) -> f32[8] {\n  %p = f32[8]{0} parameter(0)\n"
        + odd
        + b"  ROOT %n = f32[8]{0} negate(%p)\n}\n"
    )
    assert count_instructions_in_text(text) == len(_INSTRUCTION_LINE.findall(b"\n" + text))
    assert count_instructions_in_text(memoryview(text)) == count_instructions_in_text(text)


_POOL_CHECK = """
import json, sys
import xlarun.store.summaries as summarize
from xlarun.hlo.names import decode_dump_name
from xlarun.store.facade import LocalStore

summarize.PARALLEL_PARSE_BYTES = 1  # small fixtures: use the pool anyway
store = LocalStore.open(sys.argv[1])
run_id = store.run_ids()[0]
wanted = [(f, decode_dump_name(f.path), "before" in f.path) for f in store.stored_files(run_id)]
with summarize.gather_facts(store, store.facts, wanted) as gathering:
    full = {(f.digest, fp) for f, _name, fp in wanted if fp}  # parsed in full by the workers, the rest scanned here
    pooled = gathering.pool is not None and set(gathering.futures) == full and set(gathering.here) == {(f.digest, fp) for f, _n, fp in wanted} - full
    gathered = gathering.result()
same = []
for f, name, fp in wanted:
    facts = gathered[(f.digest, fp)]
    if isinstance(facts, str):
        same.append(["error", f.path, facts])
    else:
        same.append(["ok", f.path, facts == summarize._facts_from(name, store.read_file(run_id, f.path), fp)])
print(json.dumps({"pooled": pooled, "same": same}))
"""


def test_stage_dumps_parsed_in_worker_processes_give_the_same_facts(tmp_path):
    """In a fresh process (this one has imported JAX, whose native threads make forking unsafe: no pool here)."""
    files = {p.name: p.read_bytes() for p in sorted((FIXTURES / "fp").glob("*optimizations.txt"))}
    files["module_0099.jit_bad.before_optimizations.txt"] = b"HloModule bad\n\nENTRY %main {\n  %x = what\n}\n"
    store = LocalStore.open(tmp_path / "s")
    _run(store, files)
    script = tmp_path / "pool_check.py"
    script.write_text(_POOL_CHECK)
    proc = subprocess.run([sys.executable, str(script), str(store.root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["pooled"] and len(report["same"]) == len(files)
    for kind, path, value in report["same"]:
        if "bad" in path:
            assert kind == "error" and "line 4" in value  # the parse error's message comes back
        else:
            assert kind == "ok" and value is True, path
    if "jax" in sys.modules:
        assert summarize.FactsPool.start() is None


def _run(store: LocalStore, files: dict[str, bytes]) -> str:
    run_id, staging = store.begin_run()
    for name, data in files.items():
        (staging / "dump" / name).write_bytes(data)
    store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": '{"name": "t", "status": "succeeded"}'})
    return run_id


_INGEST_IN_POOL = """
import json, sys
import xlarun.store.summaries as summarize
from xlarun.store.facade import LocalStore

summarize.PARALLEL_PARSE_BYTES = 1  # small fixtures: use the pool anyway
pools = []
start = summarize.FactsPool.start
summarize.FactsPool.start = classmethod(lambda cls, **kw: pools.append(start(**kw)) or pools[-1])
index = LocalStore.open(sys.argv[1]).index  # indexes the committed run
print(json.dumps({"pooled": any(pools), "terms": [tuple(r) for r in index.conn.execute("SELECT module_id, kind, value FROM terms")]}))
"""


def test_ingest_with_worker_processes_writes_each_modules_terms_as_ingest_in_one_process_does(tmp_path, monkeypatch):
    """Terms are written as each stage dump's parse comes back, once per module holding that content."""
    before = (FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt").read_bytes()
    after = (FIXTURES / "fp" / "module_0004.jit_f.cpu_after_optimizations.txt").read_bytes()
    files = {
        "module_0004.jit_f.before_optimizations.txt": before,
        "module_0004.jit_f.cpu_after_optimizations.txt": after,
        "module_0008.jit_f.before_optimizations.txt": before,  # the same content in a second module
        "module_0009.jit_g.before_optimizations.txt": (
            FIXTURES / "mlp" / "module_0014.jit_train_step.before_optimizations.txt"
        ).read_bytes(),
    }
    pooled_store, inline_store = LocalStore.open(tmp_path / "pooled"), LocalStore.open(tmp_path / "inline")
    _run(pooled_store, files), _run(inline_store, files)
    script = tmp_path / "ingest_in_pool.py"
    script.write_text(_INGEST_IN_POOL)
    proc = subprocess.run([sys.executable, str(script), str(pooled_store.root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["pooled"]
    monkeypatch.setattr(summarize.FactsPool, "start", classmethod(lambda cls, **kw: None))
    monkeypatch.setattr(inline_store, "facts", summarize.FactsCache())  # nothing parsed before: all parsed inline
    inline = [tuple(r) for r in inline_store.index.conn.execute("SELECT module_id, kind, value FROM terms")]
    pooled = {tuple(row) for row in report["terms"]}
    assert pooled == set(inline) and len(report["terms"]) == len(inline)
    by_module = {m: {(k, v) for mm, k, v in pooled if mm == m} for m in (4, 8, 9)}
    assert ("name", "w.1") in by_module[8] and by_module[8] <= by_module[4] and ("name", "w.1") not in by_module[9]
    assert by_module[4] - by_module[8]  # module 4 also has the after_optimizations dump's terms


def test_runs_share_pass_counts_and_search_terms(tmp_path):
    before = (FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt").read_bytes()
    after = (FIXTURES / "fp" / "module_0004.jit_f.cpu_after_optimizations.txt").read_bytes()
    files = {
        "module_0004.jit_f.before_optimizations.txt": before,
        "module_0004.jit_f.0001.simplification.after_pipeline-start.before_algsimp.txt": before,
        "module_0004.jit_f.0002.simplification.after_algsimp.before_dce.txt": after,
        "module_0004.jit_f.cpu_after_optimizations.txt": after,
    }
    store = LocalStore.open(tmp_path / "s")
    first, second = _run(store, files), _run(store, files)
    index = store.index
    assert index.conn.execute("SELECT count(*) FROM text_counts").fetchone()[0] == 2  # two distinct pass dumps, counted once
    passes = [[p.instr_count for p in index.module(run, 4).passes] for run in (first, second)]
    assert passes[0] == passes[1] == [count_instructions_in_text(before), count_instructions_in_text(after)]
    distinct = index.conn.execute("SELECT count(*) FROM term_values").fetchone()[0]
    per_module = index.conn.execute("SELECT count(*) FROM module_terms WHERE run_id=?", (first,)).fetchone()[0]
    assert distinct == per_module  # the second run added no new values
    assert {h.run_id for h in index.find("jit(f)/", kinds=("op_name",))} == {first, second}  # a substring of op_names
    opcode = index.find(next(iter(parse_hlo_text(before.decode()).opcode_histogram())), kinds=("opcode",))
    assert {h.run_id for h in opcode} == {first, second}
    store.delete_run(first)
    assert {h.run_id for h in store.index.find(opcode[0].matches[0], kinds=("opcode",))} == {second}


def test_stage_dumps_parsed_while_archiving_reach_ingest_without_decoding_their_packs(tmp_path, monkeypatch):
    before = (FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt").read_bytes()
    after = (FIXTURES / "fp" / "module_0004.jit_f.cpu_after_optimizations.txt").read_bytes()
    files = {
        "module_0004.jit_f.before_optimizations.txt": before,
        "module_0004.jit_f.cpu_after_optimizations.txt": after,
        "module_0004.jit_f.0001.simplification.after_pipeline-start.before_algsimp.txt": after,
    }
    store = LocalStore.open(tmp_path / "s")  # its own facts cache, empty
    run_id, staging = store.begin_run()
    for name, data in files.items():
        (staging / "dump" / name).write_bytes(data)
    archived = store.archiver(staging).finish()  # after the job: counted, and parsed beside the archive (parse_ahead)
    keys = {(content_digest(before), True), (content_digest(after), False)}
    assert set(store.facts.facts) == keys and not store.facts.stage_bytes
    assert store.facts.counts == {content_digest(after): count_instructions_in_text(after)}
    store.commit_run(run_id, staging, archived, {"manifest.json": '{"name": "t", "status": "succeeded"}'})
    fetched = []
    real_get = store.blobs.get
    monkeypatch.setattr(store.blobs, "get", lambda sha: fetched.append(sha) or real_get(sha))
    store.ingest(run_id)
    assert not fetched  # nothing read back from the packs: the archiver's parses were used
    module = store.index.module(run_id, 4)
    assert (module.instr_before, module.instr_after) == (
        parse_hlo_text(before.decode()).instruction_count(),
        parse_hlo_text(after.decode()).instruction_count(),
    )
    assert [p.instr_count for p in module.passes] == [count_instructions_in_text(after)]


@pytest.mark.parametrize("path", [p for p in TEXTS if "after_optimizations" in p.name], ids=lambda p: p.parent.name)
def test_after_optimizations_facts_come_from_the_scan_and_equal_the_parsed_ones(path, monkeypatch):
    import xlarun.hlo as hlo

    # tests/fixtures/hlo/old/ names its dumps <jax version>.<module>.<stage>.txt: read as the dump name it was
    dump_name = path.name if path.name.startswith("module_") else "module_0001." + path.name[path.name.index("jit_") :]
    name, data = decode_dump_name(dump_name), path.read_bytes()
    assert name.kind == "hlo"
    monkeypatch.setattr(hlo, "scan_hlo_text", lambda data: None)  # as for text not laid out as XLA prints
    parsed = summarize._facts_from(name, data, False)
    monkeypatch.undo()

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed")

    monkeypatch.setattr("xlarun.hlo.text.parse_hlo_text", no_parse)  # where the one loader takes it from
    scanned = summarize._facts_from(name, data, False)
    assert scanned == parsed and scanned.instructions > 0 and scanned.terms
    with pytest.raises(AssertionError, match="parsed"):
        summarize._facts_from(name, data, True)  # the fingerprint needs the parse


_SITE = "/venv/lib/python3.11/site-packages"


def _framed(module: str, frames: list[tuple[str, str]]) -> bytes:
    """Module text headed by JAX's stack-frame tables: one location per (file, function)."""
    files = dict.fromkeys(f for f, _ in frames)
    functions = dict.fromkeys(fn for _, fn in frames)
    file_ids = {f: i for i, f in enumerate(files, 1)}
    function_ids = {fn: i for i, fn in enumerate(functions, 1)}
    lines = [f"HloModule {module}, entry_computation_layout={{()->f32[]}}", "", "FileNames"]
    lines += [f'{i} "{f}"' for f, i in file_ids.items()] + ["", "FunctionNames"]
    lines += [f'{i} "{fn}"' for fn, i in function_ids.items()] + ["", "FileLocations"]
    lines += [
        f"{i} {{file_name_id={file_ids[f]} function_name_id={function_ids[fn]} line=3 end_line=3 column=1 end_column=9}}"
        for i, (f, fn) in enumerate(frames, 1)
    ]
    lines += ["", "ENTRY %main () -> f32[] {", "  ROOT %c = f32[] constant(1)", "}", ""]
    return "\n".join(lines).encode()


@pytest.mark.parametrize(
    ("module", "frames", "own"),
    [
        ("jit_logexp", [("/home/u/job.py", "logexp"), ("/home/u/job.py", "<module>")], True),
        ("jit__lambda", [("/home/u/job.py", "<lambda>")], True),
        ("jit_step", [("/home/u/lib.py", "Trainer.step")], True),
        # jnp.linspace called from the user's main: the user's file, but only as a call site
        ("jit__linspace", [("/home/u/job.py", "main"), ("/home/u/job.py", "<module>")], False),
        # a function of the same name in an installed package is not the user's
        ("jit_apply", [("/venv/lib/python3.12/site-packages/flax/linen/module.py", "apply")], False),
        # the user's step, nested in main, in a project folder named like a framework (the zoo's equinox/)
        ("jit_equinox_step", [("/home/u/equinox/program.py", "main.<locals>.equinox_step")], True),
        ("jit_train", [("/home/u/flax/train.py", "train")], True),
        # a framework's source checkout (an editable install) is the framework's...
        ("jit_fit", [("/src/keras/keras/src/backend/jax/trainer.py", "JAXTrainer.fit")], False),
        # ...but Keras's train/test/predict step runs the user's model, loss and optimizer: the user's (model.fit)
        ("jit_train_step", [("/src/keras/keras/src/backend/jax/trainer.py", "JAXTrainer.train_step")], True),
        (
            "jit_train_step",
            [("/home/u/job.py", "main"), (f"{_SITE}/keras/src/backend/jax/trainer.py", "JAXTrainer.train_step")],
            True,
        ),
        ("jit_predict_step", [(f"{_SITE}/keras/src/backend/jax/trainer.py", "JAXTrainer.predict_step")], True),
        # Keras's numpy helpers jitted on their own stay the framework's, as does a train_step of another package
        ("jit_mean", [("/home/u/job.py", "main"), (f"{_SITE}/keras/src/ops/numpy.py", "mean")], False),
        ("jit_train_step", [(f"{_SITE}/somelib/_src/loop.py", "Loop.train_step")], False),
        ("jit_update", [("/src/optax/optax/_src/alias.py", "update")], False),
        ("jit_apply", [("/src/jax/jax/_src/api.py", "apply")], False),
    ],
)
def test_where_a_modules_code_lives_is_read_from_its_frame_tables(module, frames, own):
    from xlarun.store.code_origin import own_code

    assert own_code(_framed(module, frames)) is own


def test_a_run_whose_framework_prints_frame_tables_calls_a_module_without_them_the_frameworks():
    from xlarun.store.code_origin import settle_own_code

    # jax 0.8+: x.astype outside any jit compiles jit_convert_element_type, which names no source at all
    assert settle_own_code([True, None, False, None]) == [True, False, False, False]
    # older JAX and TF print no tables: nothing is told, nothing is guessed
    assert settle_own_code([None, None]) == [None, None]


def test_a_module_without_frame_tables_is_untold():
    from xlarun.store.code_origin import own_code

    old = b'HloModule jit_f\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1), metadata={source_file="/u/job.py" source_line=3}\n}\n'
    assert own_code(old) is None


@pytest.mark.slow
def test_keras_model_fit_on_jax_ranks_its_train_step_first_as_the_users(cli, tmp_path):
    pytest.importorskip("keras")
    import re

    from .conftest import REPO, write_spec

    program = (REPO / "examples" / "zoo" / "keras_jax" / "program.py").read_text()
    spec = write_spec(tmp_path, "name: keras\nscript: job.py\nframework: jax\ndump:\n  formats: [text]\n", program)
    store = tmp_path / "store"
    assert cli("capture", spec, "--store", store, "-q").exit_code == 0
    modules = json.loads(cli("modules", "--store", store, "--json").stdout)["modules"]
    assert (modules[0]["name"], modules[0]["own_code"]) == ("jit_train_step", True)
    assert all(m["own_code"] is False for m in modules[1:])  # jit__uniform (the initializers), casts...
    assert re.search(r"jit_train_step +yours ", cli("modules", "--store", store).stdout)


@pytest.mark.parametrize(
    ("name", "own", "label", "why"),
    [
        ("jit_train_step", True, "yours", None),
        ("jit__uniform", False, "framework", None),
        # TF's jit_compile=True function: the module is named after the user's tf.function
        (
            "a_inference_conv_train_step_412__XlaMustCompile_true_config_proto_1_executor_type_2_.7",
            None,
            "tf.function conv_train_step",
            None,
        ),
        ("a_inference_f_20", None, "tf.function f", None),
        # TF's auto-jit: a cluster of graph ops, whose source files are TF's own
        ("cluster_0__XlaCompiledKernel_true__XlaHasReferenceVars_false__XlaNumConstantArgs_0_.12", None, "unknown", "tf cluster"),
        ("jit_f", None, "unknown", "no tables"),  # an old JAX: no stack-frame tables
    ],
)
def test_the_code_column_names_a_tf_function_or_says_why_it_is_unknown(name, own, label, why):
    from xlarun.store.code_origin import UNKNOWN_WHY, code_label

    assert code_label(name, own) == (label, why)
    assert why is None or UNKNOWN_WHY[why]


@pytest.mark.slow
@pytest.mark.parametrize(("program", "label"), [("tf2_conv", "tf.function conv_train_step"), ("tf1_autojit", "unknown")])
def test_tf_modules_have_a_code_origin_or_say_why_not(zoo_runs, cli, program, label):
    import re

    store, run = zoo_runs(program)
    modules = json.loads(cli("modules", run, "--store", store, "--json").stdout)["modules"]
    assert modules[0]["code"] == label
    assert all(m["code"] for m in modules)  # no module has an empty code column
    out = cli("modules", run, "--store", store).stdout
    assert re.search(rf"{re.escape(modules[0]['name'][:30])}\S* +{label} ", out)
    if label == "unknown":
        assert "code unknown: a TF auto-jit cluster of graph ops" in out
    else:
        assert "code unknown" not in out
