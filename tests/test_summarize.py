"""Module summaries for the index: the cheap per-pass instruction count, and work shared between runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from xlarun.hlo import parse_hlo_text
from xlarun.store import Store
import xlarun.summarize as summarize
from xlarun.names import decode_dump_name
from xlarun.summarize import _INSTRUCTION_LINE, count_instructions_in_text

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
    text = (b"HloModule m\n\nENTRY %main (p: f32[8]) -> f32[8] {\n  // a comment, indented like an instruction\n"
            b"  %p = f32[8]{0} parameter(0)\n  \n  ROOT %n = f32[8]{0} negate(%p)\n}\n")
    assert text.count(b"\n  ") == 4  # what the fast count would say
    assert count_instructions_in_text(text) == parse_hlo_text(text.decode()).instruction_count() == 2


def test_stage_dumps_parsed_in_worker_processes_give_the_same_facts(tmp_path, monkeypatch):
    monkeypatch.setattr(summarize, "PARALLEL_PARSE_BYTES", 1)  # small fixtures: use the pool anyway
    files = {p.name: p.read_bytes() for p in sorted((FIXTURES / "fp").glob("*optimizations.txt"))}
    files["module_0099.jit_bad.before_optimizations.txt"] = b"HloModule bad\n\nENTRY %main {\n  %x = what\n}\n"
    store = Store.open(tmp_path / "s")
    stored = _run(store, files)
    wanted = [(f, decode_dump_name(f.path), "before" in f.path) for f in store.stored_files(stored)]
    summarize._FACTS_CACHE.clear()
    with summarize.gather_facts(store, wanted) as gathering:
        assert gathering.pool is not None and len(gathering.futures) == len(wanted)
        gathered = gathering.result()
    for f, name, with_fingerprint in wanted:
        facts = gathered[(f.sha256, with_fingerprint)]
        if "bad" in f.path:
            assert isinstance(facts, str) and "line 4" in facts  # the parse error's message comes back
        else:
            assert facts == summarize._facts_from(name, files[f.path], with_fingerprint)


def _run(store: Store, files: dict[str, bytes]) -> str:
    run_id, staging = store.begin_run()
    for name, data in files.items():
        (staging / "dump" / name).write_bytes(data)
    store.commit_run(run_id, staging, store.archive_outputs(staging), {"manifest.json": '{"name": "t", "status": "succeeded"}'})
    return run_id


def test_runs_share_pass_counts_and_search_terms(tmp_path):
    before = (FIXTURES / "fp" / "module_0004.jit_f.before_optimizations.txt").read_bytes()
    after = (FIXTURES / "fp" / "module_0004.jit_f.cpu_after_optimizations.txt").read_bytes()
    files = {
        "module_0004.jit_f.before_optimizations.txt": before,
        "module_0004.jit_f.0001.simplification.after_pipeline-start.before_algsimp.txt": before,
        "module_0004.jit_f.0002.simplification.after_algsimp.before_dce.txt": after,
        "module_0004.jit_f.cpu_after_optimizations.txt": after,
    }
    store = Store.open(tmp_path / "s")
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
