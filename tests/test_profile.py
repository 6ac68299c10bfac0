"""Profiles: the spec's ``profile:``, the job run under JAX's profiler, the trace read (hlo/xspace.py) and indexed
(store/profile_index.py), and asked for (``modules --by time``, ``profile``, ``show``).

The fast tests read a real trace checked in (``fixtures/profile/tiny.xplane.pb``: ``tiny.py`` run under the
bootstrap, with its optimized module beside it); the slow ones capture the bundled MLP with ``profile: true`` and
hold every number against JAX's own reader of the trace (``jax.profiler.ProfileData``), read independently here.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path

import pytest

from xlarun.capture.profile_job import PROFILE_DIR, profiled_argv
from xlarun.capture.spec import ProfileSpec, RunSpec
from xlarun.hlo import load_hlo
from xlarun.hlo.cost import op_costs
from xlarun.hlo.xspace import read_op_events

from .conftest import CONFIGS

FIXTURES = Path(__file__).parent / "fixtures" / "profile"


# --- the spec -------------------------------------------------------------------------------------


def test_profile_is_off_unless_asked():
    assert RunSpec(name="a", script="x.py").profile.enabled is False


@pytest.mark.parametrize(
    ("given", "enabled", "duration"),
    [(True, True, None), (False, False, None), ({"duration": "90s"}, True, 90.0), ({"enabled": False, "duration": 5}, False, 5)],
)
def test_profile_takes_a_bool_or_a_mapping(given, enabled, duration):
    profile = RunSpec(name="a", script="x.py", profile=given).profile
    assert (profile.enabled, profile.duration) == (enabled, duration)


@pytest.mark.parametrize("duration", ["soon", True, -1])
def test_a_profile_duration_that_is_no_duration_is_refused(duration):
    with pytest.raises(ValueError, match=r"not a duration|greater than 0"):
        RunSpec(name="a", script="x.py", profile={"duration": duration})


def test_the_profiled_command_runs_the_script_under_the_bootstrap_into_the_dump_folder():
    argv = profiled_argv(["python3", "/w/train.py", "--steps", "3"], "/run/dump", ProfileSpec(enabled=True, duration=30))
    assert argv[:2] == ["python3", "-c"]
    assert argv[3:] == [f"/run/dump/{PROFILE_DIR}", "30.0", "0", "jax", "/w/train.py", "--steps", "3"]


# --- reading a trace ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_events():
    return [e for e in read_op_events((FIXTURES / "tiny.xplane.pb").read_bytes()) if e.module == "jit_step"]


def test_every_executed_op_is_read_with_its_module_and_execution(loop_events):
    counts = Counter(e.op for e in loop_events)
    # 3 executions; the loop body (sine_add_fusion, wrapped_add) runs 4 times in each
    assert counts["ynn_fusion"] == counts["while.5"] == counts["wrapped_reduce"] == 3
    assert counts["sine_add_fusion"] == counts["wrapped_add"] == 12
    assert {e.program_id for e in loop_events} == {4}  # module_0004.jit_step in the dump
    assert len({e.run_id for e in loop_events}) == 3


def test_an_op_nested_in_a_loop_is_taken_out_of_the_loops_self_time(loop_events):
    for loop in (e for e in loop_events if e.op == "while.5"):
        inside = [e for e in loop_events if e.run_id == loop.run_id and e.op in ("sine_add_fusion", "wrapped_add")]
        assert all(loop.start_ps <= e.start_ps and e.start_ps + e.duration_ps <= loop.start_ps + loop.duration_ps for e in inside)
        assert loop.self_ps == loop.duration_ps - sum(e.duration_ps for e in inside) > 0


def test_the_index_keeps_counts_totals_and_the_first_execution_apart(loop_events):
    from xlarun.store.profile_index import ensure_profile_tables, module_times, op_times, write_op_times

    conn = sqlite3.connect(":memory:")
    ensure_profile_tables(conn)
    write_op_times(conn, "r", [(event, 4) for event in loop_events])
    [module] = module_times(conn, "r")
    assert (module.module_id, module.name, module.executions, module.devices) == (4, "jit_step", 3, 1)
    assert module.busy_ns == pytest.approx(sum(e.self_ps for e in loop_events) / 1000)
    assert module.first_ns + 2 * module.steady_mean_ns == pytest.approx(module.busy_ns)
    ops = {op.op: op for op in op_times(conn, "r", 4, "jit_step")}
    body = ops["sine_add_fusion"]
    assert (body.count, body.first_count, body.steady_count) == (12, 4, 8)
    assert body.total_ns == pytest.approx(sum(e.duration_ps for e in loop_events if e.op == "sine_add_fusion") / 1000)
    assert sum(op.share_of_module for op in ops.values()) == pytest.approx(1.0)
    assert ops["while.5"].self_ns < ops["while.5"].total_ns  # its body's time is the body's rows'


def test_bytes_that_are_no_trace_are_refused():
    from xlarun.hlo.protowire import ProtoDecodeError

    with pytest.raises(ProtoDecodeError):
        read_op_events(b"\x0a\xff\xff\xff")


def test_what_an_op_holds_and_the_work_its_shapes_say():
    module = load_hlo((FIXTURES / "module_0004.jit_step.cpu_after_optimizations.txt").read_bytes())
    costs = op_costs(module)
    dot = costs["ynn_fusion"]  # x @ x.T on f32[16,16]
    assert dot.fused_opcodes == ["dot"] and dot.flops == 2 * 16 * 16 * 16
    assert dot.bytes == 2 * 16 * 16 * 4  # one operand and the result
    assert dot.sources and dot.sources[0].endswith("tiny.py:6")
    assert "sine" in costs["sine_add_fusion"].fused_opcodes and costs["sine_add_fusion"].flops == 3 * 16 * 16


# --- a real profiled capture ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiled(jax_profiled_run):
    """configs/jax-cpu.yaml with ``profile: true``, captured for real: (store path, store, CaptureResult)."""
    return jax_profiled_run


def _trace_counts(store, run_id: str) -> Counter:
    """(module, op) -> executions, read with JAX's own reader of the archived trace."""
    from jax.profiler import ProfileData

    counts: Counter = Counter()
    traces = [f for f in store.index.run_files(run_id) if f.path.endswith(".xplane.pb")]
    assert len(traces) == 1 and traces[0].path.startswith(f"{PROFILE_DIR}/")
    for plane in ProfileData.from_serialized_xspace(store.read_file(run_id, traces[0].path)).planes:
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_op" in stats:
                    counts[(stats["hlo_module"], stats["hlo_op"])] += 1
    return counts


@pytest.mark.slow
def test_the_users_step_takes_most_time_and_the_time_column_says_so(profiled, cli):
    path, store, result = profiled
    assert result.ok
    assert store.manifest(result.run_id)["command"][1].endswith("jax_mlp.py")  # the user's command, not the bootstrap
    shown = cli("modules", "--store", path, "--by", "time", "--json")
    assert shown.exit_code == 0, shown.output
    found = json.loads(shown.stdout)
    first = found["modules"][0]
    assert first["name"] == "jit_train_step" and first["time"]["busy_ns"] > 0 and first["time"]["executions"] == 3
    assert first["time"]["busy_ns"] > max(m["time"]["busy_ns"] for m in found["modules"][1:])
    table = cli("modules", "--store", path, "--by", "time")
    assert table.stdout.splitlines()[2].split()[:2] == ["module_0012", "jit_train_step"]


@pytest.mark.slow
def test_each_op_is_counted_as_often_as_the_trace_saw_it_run(profiled, cli):
    path, store, result = profiled
    seen = _trace_counts(store, result.run_id)
    shown = json.loads(cli("profile", "jit_train_step", "--store", path, "--json").stdout)
    counts = {op["op"]: op["time"]["count"] for op in shown["ops"]}
    assert counts == {op: n for (module, op), n in seen.items() if module == "jit_train_step"}
    kinds = {op["opcode"] for op in shown["ops"]}
    assert "fusion" in kinds and ("dot" in kinds or any("dot" in op["fused_opcodes"] for op in shown["ops"]))
    with_dot = [op for op in shown["ops"] if op["opcode"] == "dot" or "dot" in op["fused_opcodes"]]
    assert all(op["flops"] > 0 and op["gflops_per_s"] > 0 for op in with_dot)
    assert any(source.endswith("jax_mlp.py:23") for op in shown["ops"] for source in op["sources"])


@pytest.mark.slow
def test_a_modules_op_times_fit_in_the_jobs_wall_time(profiled):
    _path, store, result = profiled
    from xlarun.navigate.profile import run_times

    times = run_times(store, result.run_id)
    assert 0 < times.busy_ns < times.job_wall_s * 1e9
    for module in times.modules:
        assert 0 < module.time.busy_ns <= module.time.wall_ns * 1.0001 or module.time.events == 1


def _jax_events(store, run_id: str):
    """Every event of the run's trace as JAX's own reader gives it: (line, name, stats, start ns, duration ns)."""
    from jax.profiler import ProfileData

    trace = next(f for f in store.index.run_files(run_id) if f.path.endswith(".xplane.pb"))
    for plane in ProfileData.from_serialized_xspace(store.read_file(run_id, trace.path)).planes:
        for line in plane.lines:
            for event in line.events:
                yield line.name, event.name, dict(event.stats), event.start_ns, event.duration_ns


@pytest.mark.slow
def test_each_ops_time_is_the_time_jaxs_profiler_gives_it(profiled, cli):
    """An op's total time in `profile` is the sum of its events' durations as jax.profiler.ProfileData reads them."""
    path, store, result = profiled
    jax_says: Counter = Counter()
    for _line, _name, stats, _start, duration in _jax_events(store, result.run_id):
        if stats.get("hlo_module") == "jit_train_step" and "hlo_op" in stats:
            jax_says[stats["hlo_op"]] += duration
    shown = json.loads(cli("profile", "jit_train_step", "--store", path, "--json").stdout)
    ours = {op["op"]: op["time"]["total_ns"] for op in shown["ops"]}
    assert set(ours) == set(jax_says) and len(ours) > 10
    for op, total in ours.items():
        assert total == pytest.approx(jax_says[op], rel=1e-6, abs=1.0), op
    assert shown["time"]["busy_ns"] <= sum(jax_says.values()) * 1.000001  # self times: nothing counted twice


@pytest.mark.slow
def test_a_steps_op_times_add_up_to_most_of_its_execution_wall_time(profiled):
    """Each execution of the step runs inside one `ThunkExecutor::Execute` event of XLA's CPU runtime, read here with
    ProfileData: its duration is the step's wall time. The ops' self times xlarun adds up fit in it and fill most
    of it (what is left is the executor's own work between thunks)."""
    _path, store, result = profiled
    from xlarun.navigate.profile import run_times

    ops: dict[int, list[tuple[float, float]]] = {}
    executors: list[tuple[float, float]] = []
    for _line, name, stats, start, duration in _jax_events(store, result.run_id):
        if stats.get("hlo_module") == "jit_train_step" and "hlo_op" in stats:
            ops.setdefault(stats["run_id"], []).append((start, start + duration))
        elif name == "ThunkExecutor::Execute":
            executors.append((start, start + duration))
    walls = []
    for execution in sorted(ops, key=lambda run: min(s for s, _e in ops[run])):
        first, last = min(s for s, _e in ops[execution]), max(e for _s, e in ops[execution])
        enclosing = [e - s for s, e in executors if s <= first and last <= e]
        assert enclosing, execution
        walls.append(min(enclosing))
    step = next(m.time for m in run_times(store, result.run_id).modules if m.name == "jit_train_step")
    assert step.executions == len(walls) == 3
    assert 0.5 * walls[0] < step.first_ns <= walls[0]
    steady_wall = sum(walls[1:]) / len(walls[1:])
    assert 0.5 * steady_wall < step.steady_mean_ns <= steady_wall
    assert step.busy_ns <= sum(walls)


@pytest.mark.slow
def test_the_json_the_table_and_the_python_front_door_give_the_same_numbers(profiled, cli):
    path, _store, result = profiled
    import xlarun

    step = xlarun.open_store(path).run(result.run_id).module("jit_train_step")
    profile = step.profile()
    shown = json.loads(cli("profile", "jit_train_step", "--store", path, "--json").stdout)
    assert [(o.op, o.time.count, o.time.total_ns) for o in profile.ops] == [
        (o["op"], o["time"]["count"], o["time"]["total_ns"]) for o in shown["ops"]
    ]
    assert shown["time"]["busy_ns"] == pytest.approx(sum(o.time.self_ns for o in profile.ops))
    assert sum(o["time"]["share_of_module"] for o in shown["ops"]) == pytest.approx(1.0)
    table = cli("profile", "jit_train_step", "--store", path, "-n", "3").stdout
    assert table.splitlines()[2].split()[0] == profile.ops[0].op and "more op(s)" in table
    show = cli("show", "jit_train_step", "--store", path)
    assert "  time " in show.stdout and "execution(s)" in show.stdout
    assert json.loads(cli("show", "jit_train_step", "--store", path, "--json").stdout)["time"]["executions"] == 3


@pytest.mark.slow
def test_reindexing_gives_the_same_times(profiled, cli):
    path, _store, result = profiled

    def rows():
        with sqlite3.connect(path / "index.sqlite") as conn:
            return sorted(conn.execute("SELECT module_id, op, count, total_ns FROM op_times WHERE run_id = ?", (result.run_id,)))

    before = rows()
    assert before and cli("reindex", "--store", path).exit_code == 0
    assert rows() == before


@pytest.mark.slow
def test_a_run_without_a_profile_says_how_to_get_one(jax_run, cli):
    store, _result = jax_run
    shown = cli("modules", "--store", store.root, "--by", "time", "--json")
    assert shown.exit_code == 2
    error = json.loads(shown.stdout)
    assert "has no profile" in error["error"] and "profile: true" in error["hint"]


def test_the_bootstrap_runs_a_script_as_python_would(tmp_path):
    """Without JAX imported nothing is traced, and the script sees its own argv, path and __main__."""
    import subprocess

    script = tmp_path / "job.py"
    script.write_text("import sys\nprint(sys.argv, sys.path[0] == __import__('os').path.dirname(__file__), __name__)\n")
    argv = profiled_argv([sys.executable, str(script), "a", "b"], str(tmp_path / "dump"), ProfileSpec(enabled=True))
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.strip() == f"{[str(script), 'a', 'b']} True __main__"
    assert not (tmp_path / "dump").exists()


@pytest.mark.slow
def test_an_inline_capture_profiles_the_function_it_compiles(tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import xlarun
    import xlarun.jax

    def f(x):
        return jnp.tanh(x @ x.T).sum()

    run = xlarun.jax.capture(f, jnp.ones((32, 32)), store=xlarun.open_store(tmp_path / "store"), profile=4)
    times = run.times()
    assert [m.name for m in times.modules] == ["jit_f"] and times.modules[0].time.executions == 4
    ops = run.main.profile().ops
    assert ops and all(op.time.count == 4 for op in ops)
    assert any("dot" in op.fused_opcodes or op.opcode == "dot" for op in ops)
    assert jax.profiler  # the caller's profiler is free again: a trace of its own starts and stops
    jax.profiler.start_trace(str(tmp_path / "mine"))
    jax.profiler.stop_trace()


def test_only_a_jax_or_tensorflow_job_is_run_under_the_profiler(tmp_path):
    from xlarun.capture.backends.base import Job
    from xlarun.capture.launch import _run_under_profiler
    from xlarun.capture.spec_yaml import load_spec

    (tmp_path / "job.py").write_text("print('hi')\n")
    for framework, wrapped in (("jax", True), ("tensorflow", True), ("torch_xla", False)):
        spec = tmp_path / f"{framework}.yaml"
        spec.write_text(f"name: p\nscript: job.py\nframework: {framework}\nprofile: true\n")
        job = Job(argv=[sys.executable, str(tmp_path / "job.py")], env={}, cwd=tmp_path, run_dir=tmp_path)
        warning = _run_under_profiler(job, load_spec(spec), framework, str(tmp_path / "dump"))
        assert (job.argv[1] == "-c") is wrapped
        assert (warning is None) is wrapped
        if wrapped:
            assert job.argv[6] == framework  # the bootstrap's FRAMEWORK argument
        else:
            assert "only JAX and TensorFlow jobs are profiled" in warning


@pytest.mark.slow
def test_each_process_of_a_many_process_job_is_profiled_and_joined_to_its_modules(tmp_path):
    """The trace starts after the script's jax.distributed.initialize (start_trace would make the backends first)."""
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.hlo.process_dirs import PROCESS_STRIDE
    from xlarun.navigate.profile import run_times
    from xlarun.store.facade import LocalStore

    example = CONFIGS.parent / "examples" / "multiprocess"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        (example / "spec.yaml").read_text().replace("script: program.py", f"script: {example}/program.py") + "profile: true\n"
    )
    store = LocalStore.open(tmp_path / "store")
    result = capture(spec, store)
    assert result.ok, result.warnings
    steps = {m.module_id: m for m in run_times(store, result.run_id).modules if m.name == "jit_train_step"}
    assert set(steps) == {2, PROCESS_STRIDE + 2}  # module_0002 of process 0 and of process 1
    assert all(m.time.devices == 2 and m.time.executions >= 1 for m in steps.values())


@pytest.mark.slow
def test_a_duration_stops_the_trace_while_the_job_goes_on(tmp_path):
    pytest.importorskip("jax")
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(
        "import time, jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: x * 2)\n"
        "t0 = time.time()\n"
        "while time.time() - t0 < 2:\n"
        "    f(jnp.ones(4)).block_until_ready()\n"
        "print('done')\n"
    )
    argv = profiled_argv([sys.executable, str(script)], str(tmp_path / "dump"), ProfileSpec(enabled=True, duration=0.5))
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    [trace] = (tmp_path / "dump" / PROFILE_DIR).rglob("*.xplane.pb")
    starts = [e.start_ps for e in read_op_events(trace.read_bytes()) if e.module == "jit__lambda"]
    assert starts and (max(starts) - min(starts)) / 1e12 < 1.0  # traced for 0.5 s of the job's 2 s, not to its end


def test_an_order_modules_does_not_know_is_refused_in_json_too(cli, tmp_path):
    shown = cli("modules", "--store", tmp_path / "store", "--by", "size", "--json")
    assert shown.exit_code == 2
    assert json.loads(shown.stdout)["hint"] == "--by program (the default) or --by time"
