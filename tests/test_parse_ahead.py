"""Indexing overlapped with archiving (store/parse_ahead.py): on a real JAX dump the overlapped path writes exactly
the index rows the sequential one does, its parses are done before ingest begins, and a kill while the two overlap
leaves nothing half-visible."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from xlarun.hlo.names import decode_dump_name
from xlarun.store import parse_ahead
from xlarun.store.archive import OutputArchiver
from xlarun.store.facade import LocalStore
from xlarun.store.summaries import _facts_from

from .torture.support import assert_sound

FP = Path(__file__).parent / "fixtures" / "hlo" / "fp"

JOB = """
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
g = jax.jit(lambda x, y: (jnp.sin(x) * y).mean(axis=0))
print(float(f(jnp.ones((8, 8)))), g(jnp.ones((4, 4)), jnp.ones((4, 4))).shape)
"""


@pytest.fixture(scope="module")
def jax_dump(tmp_path_factory) -> Path:
    """A real JAX dump folder, pass by pass, text and proto, with buffer assignments."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("jax-dump")
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_dump_to={folder} --xla_dump_hlo_pass_re=.* --xla_dump_hlo_as_text --xla_dump_hlo_as_proto",
    )
    subprocess.run([sys.executable, "-c", JOB], env=env, check=True, capture_output=True, timeout=300)
    assert len(os.listdir(folder)) > 100
    return folder


def _archive_and_index(dump: Path, root: Path, overlapped: bool) -> tuple[LocalStore, str, set]:
    """Archive ``dump`` as a run and index it, the overlapped way (``store.archiver``) or the sequential one (the
    archiver with no parse-ahead: ingest parses after the commit). Returns the store, the run and the stage-dump
    parses the store held before ingest began."""
    store = LocalStore.open(root)
    run_id, staging = store.begin_run()
    shutil.copytree(dump, staging / "dump", dirs_exist_ok=True)
    archiver = store.archiver(staging) if overlapped else OutputArchiver(store, staging, on_archived=store.facts.prepare)
    files = archiver.finish()
    parsed_before_ingest = set(store.facts.facts) | {(digest, "memory") for digest in store.facts.memory}
    manifest = {"run_id": run_id, "name": "t", "status": "succeeded", "kind": "import"}
    store.commit_run(run_id, staging, files, {"manifest.json": json.dumps(manifest)})
    store.ingest(run_id)
    return store, run_id, parsed_before_ingest


def _rows(store: LocalStore, run_id: str) -> dict[str, list]:
    """Every index row of the run, its run id left out."""
    conn = store.index.conn
    query = {
        "files": "SELECT * FROM files WHERE run_id=? ORDER BY path",
        "modules": "SELECT * FROM modules WHERE run_id=? ORDER BY module_id",
        "passes": "SELECT * FROM passes WHERE run_id=? ORDER BY module_id, step, pipeline",
        "terms": "SELECT t.kind, t.value, m.module_id FROM module_terms m JOIN term_values t USING (term_id) "
        "WHERE m.run_id=? ORDER BY 1, 2, 3",
        "memory": "SELECT * FROM module_memory WHERE run_id=? ORDER BY module_id",
    }
    return {table: [tuple(v for v in row if v != run_id) for row in conn.execute(sql, (run_id,))] for table, sql in query.items()}


@pytest.mark.slow
def test_overlapped_indexing_writes_the_rows_the_sequential_path_writes(jax_dump, tmp_path):
    seq_store, seq_run, seq_parsed = _archive_and_index(jax_dump, tmp_path / "sequential", overlapped=False)
    ovl_store, ovl_run, ovl_parsed = _archive_and_index(jax_dump, tmp_path / "overlapped", overlapped=True)
    sequential, overlapped = _rows(seq_store, seq_run), _rows(ovl_store, ovl_run)
    for table in sequential:
        assert overlapped[table] == sequential[table], table
    modules = ovl_store.index.modules(ovl_run)
    assert len(modules) >= 2 and len(overlapped["files"]) == sum(len(files) for _d, _s, files in os.walk(jax_dump))
    assert all(m.fingerprint and m.instr_before and m.instr_after for m in modules if m.name and "jit_" in m.name)
    assert sum(len(m.passes) for m in (ovl_store.index.module(ovl_run, m.module_id) for m in modules)) > 50
    # the parses were done while archiving (text stage dumps, the before_optimizations one with its fingerprint)
    stages = {
        (f.digest, n.stage == "before_optimizations")
        for f in ovl_store.stored_files(ovl_run)
        if (n := decode_dump_name(f.path)).kind == "hlo" and n.format == "text" and n.stage
    }
    assert len(stages) >= 4 and stages <= ovl_parsed
    assert not stages & seq_parsed  # the sequential path parsed them in ingest, after the commit
    assignments = {(f.digest, "memory") for f in ovl_store.stored_files(ovl_run) if f.path.endswith("-buffer-assignment.txt")}
    assert assignments and assignments <= ovl_parsed and len(overlapped["memory"]) == len(modules)
    for store in (seq_store, ovl_store):
        assert store.check().damaged == []  # every frame's checksum and every file's digest hold
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["parsed-ahead:1", "parsed-ahead:3", "pack-written:1"])
def test_a_kill_while_archiving_and_parsing_overlap_leaves_nothing_half_visible(jax_dump, tmp_path, point):
    root, trace = tmp_path / "store", tmp_path / "trace"
    env = {**os.environ, "XLARUN_STORE": str(root), "XLARUN_KILL_AT": point, "XLARUN_KILL_TRACE": str(trace)}
    xlarun = [sys.executable, "-m", "xlarun", "import", str(jax_dump), "--store", str(root)]
    killed = subprocess.run(xlarun, env=env, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    assert trace.read_text().split() == [point.split(":")[0]]
    state = assert_sound(root)  # the index lists exactly the runs on disk, every pack reads back and hashes
    assert state.runs == [] and state.statuses == {}
    env.pop("XLARUN_KILL_AT")
    again = subprocess.run([*xlarun, "--json"], env=env, capture_output=True, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    state = assert_sound(root)
    assert len(state.runs) == 1 and len(state.statuses) == 1
    store = LocalStore.open(root)
    try:
        modules = store.index.modules(state.runs[0])
        assert modules and all(m.fingerprint for m in modules if m.name and "jit_" in m.name)
    finally:
        store.close()


@pytest.mark.parametrize("queued_max", [parse_ahead.QUEUED_BYTES_MAX, 0])
def test_past_the_queue_bound_stage_dumps_are_kept_for_ingest_and_the_rows_are_the_same(tmp_path, monkeypatch, queued_max):
    monkeypatch.setattr(parse_ahead, "QUEUED_BYTES_MAX", queued_max)
    dump = tmp_path / "dump"
    dump.mkdir()
    for path in FP.glob("module_0004.*.txt"):
        shutil.copy(path, dump / path.name)
    store, run_id, parsed = _archive_and_index(dump, tmp_path / "store", overlapped=True)
    module = store.index.module(run_id, 4)
    before = (FP / "module_0004.jit_f.before_optimizations.txt").read_bytes()
    expected = _facts_from(decode_dump_name("module_0004.jit_f.before_optimizations.txt"), before, True)
    assert (module.fingerprint, module.instr_before) == (expected.fingerprint, expected.instructions)
    assert module.instr_after and module.fingerprint
    assert len(parsed) == (2 if queued_max else 0)  # parsed while archiving, or (past the bound) by ingest
    store.close()


def test_archivers_finishing_at_once_put_the_switch_interval_back_and_a_bad_file_stops_no_parse(monkeypatch):
    import sys

    from xlarun.store.summaries import FactsCache

    before = sys.getswitchinterval()
    facts = FactsCache()
    good = (FP / "module_0004.jit_f.cpu_after_optimizations.txt").read_bytes()
    name = decode_dump_name("module_0004.jit_f.cpu_after_optimizations.txt")
    first, second = parse_ahead.ParseAhead(facts), parse_ahead.ParseAhead(facts)
    first.__enter__()
    second.__enter__()
    assert sys.getswitchinterval() == parse_ahead.SWITCH_INTERVAL_S
    assert first.take(name, ("bad", False), b"\xff not HLO at all {{{")  # fails to parse: left to ingest
    assert first.take(name, ("good", False), good)
    first.__exit__(None, None, None)  # the other archiver still runs: the short interval stays
    assert sys.getswitchinterval() == parse_ahead.SWITCH_INTERVAL_S
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before
    assert facts.get(("good", False)).instructions == _facts_from(name, good, False).instructions > 0
    assert facts.get(("bad", False)) is None and first.parsed == 1
