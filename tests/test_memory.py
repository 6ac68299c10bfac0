"""``xlarun memory``, ``Module.memory()``, the peak column of ``modules`` and the peaks of a diff across runs
(navigate/peak_memory.py, store/memory_index.py, present/memory_table.py).

The fast tests import dump folders made of files real captures wrote (``fixtures/memory``); the slow ones capture
real JAX programs and hold the peak against JAX's own ``Compiled.memory_analysis()``, computed here.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

import xlarun
from xlarun.hlo import load_hlo
from xlarun.hlo.buffer_assignment import report_total_bytes

from .conftest import CONFIGS, write_spec

FIXTURES = Path(__file__).parent / "fixtures" / "memory"
DONATED_PROGRAM = Path(__file__).parent / "fixtures" / "hlo" / "snapshots" / "donated_step.py"


def _dump(folder: Path, program: str, module: str, with_assignment: bool = True, damage=None) -> Path:
    """A dump folder as XLA names its files: the optimized module, and its buffer assignment and live ranges."""
    folder.mkdir(parents=True)
    stem = f"{module}.cpu_after_optimizations"
    shutil.copy(FIXTURES / f"{program}.after.txt", folder / f"{stem}.txt")
    if with_assignment:
        text = (FIXTURES / f"{program}.buffer-assignment.txt").read_text()
        (folder / f"{stem}-buffer-assignment.txt").write_text(damage(text) if damage else text)
        shutil.copy(FIXTURES / f"{program}.live-range.txt", folder / f"{stem}-live-range.txt")
        if (report := FIXTURES / f"{program}.memory-usage-report.txt").exists():
            shutil.copy(report, folder / f"{stem}-memory-usage-report.txt")
    return folder


@pytest.fixture
def imported(tmp_path):
    """A store with the MLP's train step and the donated step imported: (store path, run ids)."""
    store = xlarun.open_store(tmp_path / "store")
    mlp = store.import_dump(_dump(tmp_path / "mlp", "mlp_train_step", "module_0012.jit_train_step"), name="mlp")
    donated = store.import_dump(_dump(tmp_path / "donated", "donated_step", "module_0008.jit_step"), name="donated")
    store.close()
    return tmp_path / "store", mlp.id, donated.id


def test_memory_lists_the_biggest_buffers_live_at_the_peak_with_their_instruction_and_source(imported, cli):
    path, mlp, _donated = imported
    shown = cli("memory", "jit_train_step", "--store", path, "--run", mlp, "--json")
    assert shown.exit_code == 0, shown.output
    found = json.loads(shown.stdout)
    module = load_hlo((FIXTURES / "mlp_train_step.after.txt").read_bytes(), "after.txt")
    assert found["buffers_at_peak"] is True and found["peak_instruction"] in {i.name for i in module.instructions()}
    sizes = [b["size"] for b in found["buffers"]]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 15  # --top's default
    biggest = found["buffers"][0]
    instruction = module.find_instruction(biggest["instruction"])
    assert instruction is not None and instruction.opcode == biggest["opcode"]
    assert biggest["shape"].split("{")[0] == instruction.shape.split("{")[0]
    assert biggest["sources"] == [f"{instruction.source_file}:{instruction.source_line}"]
    assert found["peak_bytes"] == found["parameter_bytes"] + found["output_bytes"] + found["temporary_bytes"]
    assert found["aliased_bytes"] == 0
    assert found["notes"] == []  # the allocations add up to the total XLA's memory-usage report prints


def test_a_buffer_assignment_cut_at_a_line_end_is_told_by_xlas_total(tmp_path, cli):
    """A file cut between two allocations reads as a whole one: the total XLA's memory-usage report printed
    for the module tells."""
    cut = _dump(tmp_path / "d", "mlp_train_step", "module_0012.jit_train_step", damage=lambda t: t[: t.index("allocation 39:")])
    store = xlarun.open_store(tmp_path / "store")
    run = store.import_dump(cut)
    found = store.module("jit_train_step", run=run.id).memory().found
    total = report_total_bytes((FIXTURES / "mlp_train_step.memory-usage-report.txt").read_text())
    assert found.allocated_bytes < total
    assert len(found.notes) == 1 and f"XLA's total is {total:,} B but the allocations read add up to" in found.notes[0]
    assert found.notes[0].endswith("`xlarun check` verifies the stored files)")


def test_the_table_says_the_peak_its_parts_and_where_each_buffer_comes_from(imported, cli):
    path, mlp, _donated = imported
    table = cli("memory", "jit_train_step", "--store", path, "--run", mlp, "--top", "3").stdout
    found = xlarun.open_store(path).module("jit_train_step", run=mlp).memory(3)
    assert f"peak {found.peak_bytes / 1024:.1f} KiB" in table.splitlines()[0]
    for word in ("parameters", "outputs", "temporaries", "aliased", "buffers live at the peak"):
        assert word in table
    rows = table[table.index("buffers live at the peak") :].splitlines()[2:]
    assert [r.split()[0] for r in rows] == [b.instruction for b in found.buffers] and len(rows) == 3
    assert "jax_mlp.py:" in rows[0]


def test_donated_arguments_are_counted_as_aliased(imported, cli):
    path, _mlp, donated = imported
    found = json.loads(cli("memory", "jit_step", "--store", path, "--run", donated, "--json").stdout)
    assert found["aliased_bytes"] > 0
    assert (
        found["peak_bytes"]
        == found["parameter_bytes"] + found["output_bytes"] + found["temporary_bytes"] - found["aliased_bytes"]
    )
    assert "donated" in {b["kind"] for b in found["buffers"]}


def test_modules_has_a_peak_column_from_the_index(imported, cli):
    path, mlp, _donated = imported
    listed = json.loads(cli("modules", mlp, "--store", path, "--json").stdout)["modules"]
    peak = json.loads(cli("memory", "jit_train_step", "--store", path, "--run", mlp, "--json").stdout)["peak_bytes"]
    assert [m["peak_bytes"] for m in listed] == [peak]
    table = cli("modules", mlp, "--store", path).stdout
    assert "peak" in table.splitlines()[1] and f"{peak / 1024:.1f} KiB" in table
    with sqlite3.connect(path / "index.sqlite") as conn:
        assert conn.execute("SELECT peak_bytes FROM module_memory WHERE run_id = ?", (mlp,)).fetchall() == [(peak,)]
        conn.execute("DROP TABLE module_memory")  # an index made before the table: the files are read instead
    assert json.loads(cli("modules", mlp, "--store", path, "--json").stdout)["modules"][0]["peak_bytes"] == peak
    assert cli("reindex", "--store", path).exit_code == 0
    with sqlite3.connect(path / "index.sqlite") as conn:
        assert conn.execute("SELECT count(*) FROM module_memory").fetchone()[0] == 2


def test_a_diff_across_runs_compares_the_peaks(tmp_path, cli):
    store = xlarun.open_store(tmp_path / "store")
    a = store.import_dump(_dump(tmp_path / "a", "mlp_train_step", "module_0012.jit_train_step"), name="a")
    b = store.import_dump(_dump(tmp_path / "b", "mlp_train_step", "module_0012.jit_train_step", with_assignment=False), name="b")
    c = store.import_dump(_dump(tmp_path / "c", "donated_step", "module_0008.jit_step"), name="c")
    peaks = [store.module(ref).memory().peak_bytes for ref in (f"{a.id}/jit_train_step", f"{c.id}/jit_step")]
    store.close()
    path = tmp_path / "store"
    shown = cli("diff", f"{a.id}/jit_train_step", f"{c.id}/jit_step", "--stage", "after", "--store", path, "--summary")
    change = f"{100 * (peaks[1] - peaks[0]) / peaks[0]:+.1f}%"
    assert f"peak memory: {peaks[0] / 1024:.1f} KiB -> {peaks[1]} B ({change})" in shown.stdout
    found = json.loads(cli("diff", f"{a.id}/jit_train_step", b.id, "--stage", "after", "--store", path, "--json").stdout)
    assert found["peak_bytes"] == [peaks[0], None]
    assert (
        "peak memory: 262.6 KiB -> not dumped"
        in cli("diff", f"{a.id}/jit_train_step", b.id, "-s", "after", "--store", path).stdout
    )


def test_a_module_without_a_buffer_assignment_says_how_to_capture_one(tmp_path, cli):
    store = xlarun.open_store(tmp_path / "store")
    run = store.import_dump(_dump(tmp_path / "d", "mlp_train_step", "module_0012.jit_train_step", with_assignment=False))
    store.close()
    shown = cli("memory", "jit_train_step", "--store", tmp_path / "store", "--run", run.id, "--json")
    assert shown.exit_code == 2
    error = json.loads(shown.stdout)
    assert "has no buffer assignment" in error["error"] and "dump.formats including text" in error["hint"]
    assert error["exit_code"] == 2
    listed = json.loads(cli("modules", run.id, "--store", tmp_path / "store", "--json").stdout)["modules"]
    assert listed[0]["peak_bytes"] is None
    assert "peak" not in cli("modules", run.id, "--store", tmp_path / "store").stdout.splitlines()[1]


def test_a_damaged_buffer_assignment_is_a_one_line_error(tmp_path, cli):
    cut = _dump(
        tmp_path / "d",
        "donated_step",
        "module_0008.jit_step",
        damage=lambda t: t.replace("allocation 3: size 16,", "allocation 3: si"),
    )
    store = xlarun.open_store(tmp_path / "store")
    run = store.import_dump(cut)
    store.close()
    shown = cli("memory", "jit_step", "--store", tmp_path / "store", "--run", run.id)
    assert shown.exit_code == 2
    assert "line 9 does not read as an allocation" in shown.stderr and "Traceback" not in shown.output
    error = json.loads(cli("memory", "jit_step", "--store", tmp_path / "store", "--run", run.id, "--json").stdout)
    assert error["exit_code"] == 2 and "damaged" in error["hint"]
    assert json.loads(cli("modules", run.id, "--store", tmp_path / "store", "--json").stdout)["modules"][0]["peak_bytes"] is None


# --- real programs, against jax's own memory analysis ---------------------------------------------


def _memory_analysis(compiled):
    stats = compiled.memory_analysis()
    return stats.argument_size_in_bytes, stats.output_size_in_bytes, stats.temp_size_in_bytes, stats.alias_size_in_bytes


@pytest.mark.slow
def test_the_peak_of_the_captured_train_step_is_what_jax_says_it_needs(jax_run):
    """jax's ``Compiled.memory_analysis()`` gives the buffers of one call: ``argument_size_in_bytes`` (the
    parameters), ``output_size_in_bytes`` (the result, donated parameters reused for it included),
    ``temp_size_in_bytes`` (the preallocated temporaries) and ``alias_size_in_bytes`` (what the result shares
    with the arguments). The peak ``xlarun memory`` reports is arguments + outputs + temporaries - aliased."""
    jax = pytest.importorskip("jax")
    sys.path.insert(0, str(CONFIGS / "examples"))
    try:
        import jax_mlp
    finally:
        sys.path.pop(0)
    params = jax.jit(jax_mlp.init_params, static_argnums=1)(jax.random.PRNGKey(0), (64, 128, 128, 10))
    x = jax.random.normal(jax.random.PRNGKey(1), (32, 64))
    y = jax.nn.one_hot(jax.random.randint(jax.random.PRNGKey(2), (32,), 0, 10), 10)
    arguments, outputs, temporaries, aliased = _memory_analysis(jax_mlp.train_step.lower(params, x, y, 0.1).compile())

    store, result = jax_run
    found = xlarun.open_store(store.root).module("jit_train_step", run=result.run_id).memory().found
    assert (found.parameter_bytes, found.output_bytes, found.temporary_bytes, found.aliased_bytes) == (
        arguments, outputs, temporaries, aliased,
    )  # fmt: skip
    assert found.peak_bytes == arguments + outputs + temporaries - aliased
    module = load_hlo(store.read_file(result.run_id, found.files[0].replace("-buffer-assignment", "")), "after.txt")
    assert module.find_instruction(found.buffers[0].instruction) is not None
    assert found.buffers[0].sources and found.buffers[0].sources[0].startswith(str(CONFIGS / "examples" / "jax_mlp.py"))


@pytest.mark.slow
def test_a_captured_step_with_donated_arguments_shows_what_jax_says_is_aliased(tmp_path):
    pytest.importorskip("jax")
    spec = write_spec(tmp_path, f"name: donated\nscript: {DONATED_PROGRAM}\nframework: jax\ndump:\n  formats: [text]\n")
    store = xlarun.open_store(tmp_path / "store")
    run = store.capture(spec)
    found = run.module("jit_step").memory().found

    namespace: dict = {}
    exec(compile(DONATED_PROGRAM.read_text().split("for _ in range")[0], str(DONATED_PROGRAM), "exec"), namespace)
    arguments, outputs, temporaries, aliased = _memory_analysis(
        namespace["step"].lower(namespace["params"], namespace["x"]).compile()
    )
    assert aliased > 0 and found.aliased_bytes == aliased
    assert found.peak_bytes == arguments + outputs + temporaries - aliased
