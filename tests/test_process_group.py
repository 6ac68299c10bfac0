"""Many processes, one run (capture/backends/process_group.py): a real two-process jax.distributed job captured
as one run, a desync made on purpose, and a job whose one process fails."""

from __future__ import annotations

import json

import pytest

from xlarun.capture.backends.base import JobPaths
from xlarun.capture.backends.process_group import process_env
from xlarun.capture.launch import capture, exit_status_error
from xlarun.errors import ExitCode
from xlarun.store.facade import LocalStore
from xlarun.store.rows import RunStatus

from .conftest import REPO, write_spec

EXAMPLE = REPO / "examples" / "multiprocess"


def test_each_process_learns_its_place_and_dumps_into_its_own_folder():
    paths = JobPaths.under("/s/run")
    env = {"XLA_FLAGS": "--xla_dump_to=/s/run/dump --xla_dump_hlo_as_text", "JAX_DUMP_IR_TO": "/s/run/jax_ir", "A": "1"}
    got = process_env(env, paths, 1, 2, "127.0.0.1:4000")
    assert got["XLA_FLAGS"] == "--xla_dump_to=/s/run/dump/process-1 --xla_dump_hlo_as_text"
    assert got["JAX_DUMP_IR_TO"] == "/s/run/jax_ir/process-1"
    assert (got["XLARUN_PROCESS_ID"], got["XLARUN_NUM_PROCESSES"], got["XLARUN_COORDINATOR"]) == ("1", "2", "127.0.0.1:4000")
    assert got["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo" and got["A"] == "1"
    assert env["XLA_FLAGS"].endswith("/dump --xla_dump_hlo_as_text")  # the job's own environment is left as it was
    spaced = JobPaths.under("/my runs/r")  # compose_env quotes a value with spaces: the quotes stay around it
    flags = '--xla_dump_to="/my runs/r/dump" --xla_dump_hlo_as_text'
    assert process_env({"XLA_FLAGS": flags}, spaced, 0, 2, "c")["XLA_FLAGS"] == (
        '--xla_dump_to="/my runs/r/dump/process-0" --xla_dump_hlo_as_text'
    )
    # a job that chose its collectives keeps its choice
    assert (
        process_env({"JAX_CPU_COLLECTIVES_IMPLEMENTATION": "mpi"}, paths, 0, 2, "c")["JAX_CPU_COLLECTIVES_IMPLEMENTATION"]
        == "mpi"
    )


@pytest.fixture(scope="module")
def two_process_runs(tmp_path_factory):
    """The example job captured twice for real: as written, and with a desync on process 1."""
    pytest.importorskip("jax")
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from xlarun.cli import app

    store = LocalStore.open(tmp_path_factory.mktemp("multiprocess") / "store")
    run = capture(EXAMPLE / "spec.yaml", store)
    out = CliRunner().invoke(app, ["capture", str(EXAMPLE / "desync.yaml"), "--store", str(store.root), "--json"])
    assert out.exit_code == 0, out.output
    desync = json.loads(out.stdout)  # the desync run as `capture --json` printed it
    return store, run, SimpleNamespace(run_id=desync["run_id"], document=desync)


@pytest.mark.slow
def test_a_two_process_jax_distributed_job_is_one_run_with_both_processes_dumps(two_process_runs):
    store, run, _desync = two_process_runs
    assert run.status == RunStatus.SUCCEEDED and exit_status_error(run) is None
    by_process = {p: sorted(m.name for m in run.modules if m.process == p) for p in (0, 1)}
    assert by_process[0] == by_process[1] and "jit_train_step" in by_process[0]
    step = {m.process: m for m in run.modules if m.name == "jit_train_step"}
    assert step[1].module_id == step[0].module_id + 1_000_000 and step[0].fingerprint == step[1].fingerprint
    paths = {f.path.split("/")[0] for f in store.index.run_files(run.run_id)}
    assert paths == {"process-0", "process-1"}
    # the two processes really ran one program: 4 devices (2 each), the same loss, each with its own log
    for process in (0, 1):
        log = (run.run_dir / "processes" / f"process-{process}" / "stdout.log").read_text()
        assert f"process {process} of 2: 4 devices, loss" in log
    losses = [line.rsplit(" ", 1)[1] for line in (run.run_dir / "stdout.log").read_text().splitlines() if " loss " in line]
    assert len(losses) == 2 and losses[0] == losses[1]
    assert "[process 1] process 1 of 2: 4 devices" in (run.run_dir / "stdout.log").read_text()


@pytest.mark.slow
def test_modules_groups_the_processes_compiles_and_flags_the_desync_made_on_purpose(two_process_runs, cli):
    store, run, desync = two_process_runs
    assert [m["name"] for m in desync.document["processes"]["desync"]] == ["jit_train_step"]  # capture --json says it
    same = json.loads(cli("modules", run.run_id, "--store", store.root, "--json").stdout)["processes"]
    assert same["processes"] == [0, 1] and same["desync"] == []
    assert {m["name"] for m in same["identical"]} >= {"jit_train_step"}
    out = cli("modules", desync.run_id, "--store", store.root)
    assert out.exit_code == 0
    assert "DESYNC in 1:" in out.stdout and "desync module_0002.jit_train_step" in out.stdout.replace("\n", " ")
    found = json.loads(cli("modules", desync.run_id, "--store", store.root, "--json").stdout)["processes"]
    assert [m["name"] for m in found["desync"]] == ["jit_train_step"]
    assert len(set(found["desync"][0]["fingerprints"].values())) == 2
    shown = cli("show", f"{desync.run_id}/module_1000002", "--store", store.root).stdout
    assert "no other process compiled the same HLO" in shown and "DESYNC" in shown
    diff = cli("diff", f"{desync.run_id}/module_0002", f"{desync.run_id}/module_1000002", "--store", store.root).stdout
    assert "constant(0.001)" in diff and "constant(0.002)" in diff  # the learning rates the processes disagree on
    # against another run, a module is compared with the same process's: process 1 of the run as written, then desynced
    across = cli("diff", f"{run.run_id}/module_1000002", desync.run_id, "--store", store.root).stdout
    assert f"{desync.run_id}/module_1000002" in across and "+  %constant.5 = f32[] constant(0.002)" in across


@pytest.mark.slow
def test_one_failing_process_fails_the_run_and_the_others_are_stopped(tmp_path):
    script = """
import os, sys, time
if os.environ["XLARUN_PROCESS_ID"] == "1":
    print("process 1 gives up", file=sys.stderr)
    sys.exit(3)
print("process 0 waits for its peer", flush=True)
time.sleep(600)
"""
    spec = write_spec(tmp_path, "name: mp-fail\nscript: job.py\nprocesses: 2\ntimeout: 5m\n", script)
    result = capture(spec, LocalStore.open(tmp_path / "store"))
    assert (result.status, result.exit_code) == (RunStatus.FAILED, 3)
    assert exit_status_error(result).exit_code == ExitCode.FAILED
    processes = result.manifest.backend_details["processes"]
    assert [(p["process"], p["status"], p["exit_code"]) for p in processes] == [(0, "interrupted", -15), (1, "failed", 3)]
    assert "process 1 ended first (failed): process(es) 0 were stopped" in result.warnings
    assert (result.run_dir / "processes" / "process-1" / "stderr.log").read_text() == "process 1 gives up\n"
    assert "[process 0] process 0 waits for its peer" in (result.run_dir / "stdout.log").read_text()


@pytest.mark.slow
def test_each_process_output_is_kept_and_shown_by_logs_process(two_process_runs, cli):
    import xlarun

    store, run, desync = two_process_runs
    one = cli("logs", run.run_id, "--process", "1", "--stream", "stdout", "--store", store.root).stdout
    assert "process 1 of 2: 4 devices" in one and "process 0 of 2" not in one and "[process" not in one
    both = cli("logs", run.run_id, "--stream", "stdout", "--store", store.root).stdout
    assert "[process 0] process 0 of 2" in both and "[process 1] process 1 of 2" in both
    missing = cli("logs", run.run_id, "--process", "2", "--store", store.root)
    assert missing.exit_code == 2 and "has no process 2: its processes are 0, 1" in missing.stderr
    # the same from Python
    api_run = xlarun.open_store(store.root).run(desync.run_id)
    assert "process 0 of 2" in api_run.logs("stdout", process=0)
    assert [m.name for m in api_run.processes().desync] == ["jit_train_step"]


@pytest.mark.slow
def test_a_job_of_processes_past_its_timeout_is_timed_out_with_none_left_running(tmp_path):
    from xlarun.interrupts import job_processes

    script = 'import os, time\nprint("process", os.environ["XLARUN_PROCESS_ID"], flush=True)\ntime.sleep(600)\n'
    spec = write_spec(tmp_path, "name: mp-sleep\nscript: job.py\nprocesses: 3\ntimeout: 3s\n", script)
    result = capture(spec, LocalStore.open(tmp_path / "store"))
    assert result.status == RunStatus.TIMED_OUT and exit_status_error(result).exit_code == ExitCode.TIMEOUT
    statuses = [p["status"] for p in result.manifest.backend_details["processes"]]
    # the first to time out stops the others, which may or may not have reached their own deadline by then
    assert "timed_out" in statuses and set(statuses) <= {"timed_out", "interrupted"}
    store = LocalStore.open(tmp_path / "store")
    assert job_processes(store.staging_dir / result.run_id) == []  # every process's mark, staging/RUN/processes/...
    assert {f"[process {k}] process {k}" for k in range(3)} <= set((result.run_dir / "stdout.log").read_text().splitlines())


def test_flags_says_what_each_process_gets_beyond_the_shared_environment(cli, tmp_path):
    out = cli("flags", EXAMPLE / "spec.yaml", "--out", tmp_path)
    assert out.exit_code == 0
    assert "processes: 2: a capture launches 2 processes" in out.stderr and "dump/process-K" in out.stderr
    assert f"--xla_dump_to={tmp_path}/dump " in out.stdout
