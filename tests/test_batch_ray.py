"""Batches on a real Ray cluster: four nodes on loopback, started here, each offering different xlarun resources.

One cluster serves the module (starting it takes ~15 s on 2 CPUs). The tests that kill nodes run last: each
takes a node away. Only the processes this module started are stopped (never `ray stop`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from xlarun.batch import run_batch
from xlarun.capture.spec_yaml import load_batch
from xlarun.errors import StoreError
from xlarun.executors import run_batch_on
from xlarun.executors.shipping import lacking, pack_run, receive_run
from xlarun.store.facade import LocalStore

from .conftest import write_spec

NODE_RESOURCES = {
    "local-a": {"xlarun_local": 1},
    "local-docker": {"xlarun_local": 1, "xlarun_docker_cpu": 1},
    "docker": {"xlarun_docker_cpu": 1},
    "local-spare": {"xlarun_local": 1},
}
TINY = """
import sys, jax, jax.numpy as jnp
scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
f = jax.jit(lambda x: jnp.tanh(x @ x.T * scale).sum())
print("value", float(f(jnp.ones((8, 8)))), flush=True)
"""
#: The first attempt of a cell says it is ready and waits (to be interrupted or lose its node); later ones finish.
WAITING = (
    TINY
    + """
import os, pathlib, time
marker = pathlib.Path(os.environ["MARKER_DIR"]) / f"started-{scale}"
first = not marker.exists()
marker.write_text(str(os.getpid()))
(pathlib.Path(os.environ["MARKER_DIR"]) / f"pid-{os.getpid()}").write_text("")
if first or os.environ.get("ALWAYS_WAIT"):
    print("ready", flush=True)
    time.sleep(120)
"""
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(Cluster, node name -> ray Node, the nodes' staging root): a head with no CPUs (the driver's) and four workers."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    staging = tmp_path_factory.mktemp("node-staging")
    saved = os.environ.get("XLARUN_NODE_STAGING")
    os.environ["XLARUN_NODE_STAGING"] = str(staging)  # the nodes' processes inherit it
    small = 80 << 20
    started = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": small,
            "include_dashboard": False,
            # a node whose raylet is killed is declared dead within ~1 s, not Ray's default ~30 s
            "_system_config": {
                "health_check_period_ms": 500,
                "health_check_failure_threshold": 2,
                "health_check_initial_delay_ms": 0,
            },
        },
    )
    nodes = {name: started.add_node(num_cpus=1, resources=res, object_store_memory=small) for name, res in NODE_RESOURCES.items()}
    started.wait_for_nodes()
    ray.init(address=started.address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    session = ray.get_runtime_context().gcs_address
    try:
        yield started, nodes, staging
    finally:
        ray.shutdown()
        started.shutdown()  # kills each node's processes by pid
        _stop_orphaned_workers(session)
        if saved is None:
            os.environ.pop("XLARUN_NODE_STAGING", None)
        else:
            os.environ["XLARUN_NODE_STAGING"] = saved


def _stop_orphaned_workers(gcs_address: str) -> None:
    """Workers of a node whose raylet a test killed outlive it for a while: stop those of this cluster, by pid."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "default_worker.py" in cmdline and gcs_address in cmdline:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def _modules(store: LocalStore, run_id: str) -> set[tuple[str, str]]:
    return {(m.name, m.fingerprint) for m in store.index.modules(run_id)}


def _ready_logs(staging: Path) -> list[Path]:
    return [p for p in staging.glob("*/store/staging/*/stdout.log") if "ready" in p.read_text()]


def _start_waiting_batch(tmp_path: Path, address: str, scales: list[str], store: Path) -> tuple[subprocess.Popen, Path]:
    """`xlarun batch --executor ray --json` in a process of its own, over cells whose jobs say "ready" and wait;
    returns the driver and the folder where each job leaves its pid."""
    markers = tmp_path / "markers"
    markers.mkdir()
    spec = write_spec(
        tmp_path / "p",
        f"name: wait\nscript: job.py\nargs: ['${{matrix.scale}}']\nenv:\n  MARKER_DIR: {markers}\n  ALWAYS_WAIT: '1'\n"
        f"matrix:\n  scale: [{', '.join(scales)}]\n",
        WAITING,
    )
    env = dict(os.environ, XLARUN_STORE=str(store), PYTHONUNBUFFERED="1")
    # SIGINT at its default in the child, as in a terminal: the suite may run under nohup, where it is ignored
    driver = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "batch", str(spec), "--executor", "ray", "--address", address, "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return driver, markers


def test_without_ray_the_ray_executor_exits_3_naming_the_extra(cli, tmp_path, monkeypatch):
    spec = write_spec(tmp_path / "p", "name: r\nscript: job.py\nexecutor: ray\nmatrix:\n  n: [1]\n", TINY)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is not installed
    for args in ((), ("--executor", "ray")):  # the spec's executor, and the option
        out = cli("batch", spec, *args, "--store", tmp_path / "s")
        assert out.exit_code == 3, out.stdout + out.stderr
        assert "xlarun[ray]" in out.stderr
    assert not (tmp_path / "s" / "runs").exists() or not any((tmp_path / "s" / "runs").iterdir())


@pytest.mark.slow
def test_collect_needs_a_cluster_to_look_at(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, "-m", "xlarun", "collect", "--store", str(tmp_path / "s"), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and json.loads(out.stdout)["error"].startswith("give the cluster with --address"), out.stderr


def test_a_cell_no_node_can_serve_fails_at_once_naming_what_the_cluster_offers(cluster, tmp_path):
    spec = write_spec(tmp_path / "p", "name: gpu\nscript: job.py\nbackend: docker-gpu\nmatrix:\n  n: [1]\n", TINY)
    store = LocalStore.open(tmp_path / "s")
    started = time.monotonic()
    result = run_batch_on("ray", load_batch(spec), store)
    assert time.monotonic() - started < 10
    [cell] = result.cells
    assert cell.status == "error" and not result.ok
    assert "no node of the cluster offers xlarun_docker_gpu" in cell.error
    assert "xlarun_local 3" in cell.error and "xlarun_docker_cpu 2" in cell.error
    assert store.run_ids() == []


def test_a_shipped_run_is_verified_committed_once_and_carries_only_what_the_store_lacks(tmp_path):
    spec = write_spec(tmp_path / "p", "name: tiny\nscript: job.py\nmatrix:\n  n: [1]\n", TINY)
    node_store = LocalStore.open(tmp_path / "node")
    [cell] = run_batch(load_batch(spec), node_store).cells
    run_id = cell.result.run_id
    driver = LocalStore.open(tmp_path / "driver")
    files = node_store.stored_files(run_id)
    damaged = pack_run(node_store, run_id)
    damaged.payload = damaged.payload[:-1] + bytes([damaged.payload[-1] ^ 1])
    with pytest.raises(StoreError, match="arrived damaged"):
        receive_run(driver, damaged)
    assert driver.run_ids() == [] and not list(driver.staging_dir.iterdir())

    full = pack_run(node_store, run_id, lacking(driver, [f.digest for f in files]))
    assert len(full.sent) == len({f.digest for f in files})
    first = receive_run(driver, full)
    again = receive_run(driver, full)  # a result that arrives twice
    assert first.new and not again.new and driver.run_ids() == [run_id]
    assert driver.stored_files(run_id) == files
    assert all(driver.read_file(run_id, f.path) == node_store.read_file(run_id, f.path) for f in files)
    assert _modules(driver, run_id) == _modules(node_store, run_id)
    # a store that holds every file is sent none of them
    assert lacking(driver, [f.digest for f in files]) == set()
    assert pack_run(node_store, run_id, set()).sent == []


@pytest.mark.docker
def test_a_ray_batch_over_local_and_docker_cpu_matches_the_same_batch_run_locally(cluster, tmp_path, cpu_image, docker_client):
    _cluster, nodes, _staging = cluster
    spec = write_spec(
        tmp_path / "p",
        "name: tiny\nscript: job.py\nframework: jax\nbackend:\n  kind: ${matrix.backend}\n"
        "dump:\n  formats: [text]\nmatrix:\n  backend: [local, docker-cpu]\n",
        TINY,
    )
    here = LocalStore.open(tmp_path / "local")
    local = run_batch(load_batch(spec), here, jobs=2)
    assert local.ok, [c.error for c in local.cells]
    store = LocalStore.open(tmp_path / "s")
    spread = run_batch_on("ray", load_batch(spec), store)
    assert spread.ok, [c.error for c in spread.cells]
    docker_nodes = {nodes[n].node_id[:8] for n in ("local-docker", "docker")}
    local_nodes = {nodes[n].node_id[:8] for n in ("local-a", "local-docker", "local-spare")}
    for mine, theirs in zip(spread.cells, local.cells, strict=True):
        assert mine.values == theirs.values
        assert mine.node.split("/")[1] in (docker_nodes if mine.values["backend"] == "docker-cpu" else local_nodes)
        run = mine.result.run_id
        assert _modules(store, run) == _modules(here, theirs.result.run_id) and _modules(store, run)
        assert {f.path for f in store.stored_files(run)} == {f.path for f in here.stored_files(theirs.result.run_id)}
        manifest = store.manifest(run)
        assert manifest["batch_id"] == spread.batch_id and manifest["matrix"] == mine.values
        assert manifest["backend"] == mine.values["backend"]
        assert manifest["backend_details"]["ray"]["node_id"].startswith(mine.node.split("/")[1])
        assert manifest["backend_details"]["ray"]["project"] == {
            "ran_from": "in place",
            "why": f"this node has the same 2 file(s) at {tmp_path / 'p'}",
        }
        assert mine.shipped_bytes > 0
    assert store.check().damaged == []
    # the second cell's identical files were not sent again
    sent = sorted(store.manifest(c.result.run_id)["backend_details"]["ray"]["files_shipped"] for c in spread.cells)
    assert sent[0] < len(store.stored_files(spread.cells[0].result.run_id))


PROJECT_JOB = """
import os, pathlib, helpers
import jax, jax.numpy as jnp
table = pathlib.Path("data/table.csv").read_text().strip().replace(chr(10), "|")
print("ran", __file__, "in", os.getcwd(), "helper", helpers.VALUE, "table", table, flush=True)
print("value", float(jax.jit(lambda x: (x * helpers.VALUE).sum())(jnp.ones(4))), flush=True)
"""


@pytest.mark.docker
def test_with_ship_always_every_node_runs_the_project_as_it_was_when_the_batch_started(cli, cluster, tmp_path, cpu_image):
    """The script, the module it imports and the data it reads come from the driver's snapshot, unpacked in the
    cell's staging folder on the node, for a local cell and a container cell alike."""
    _cluster, _nodes, staging = cluster
    spec = write_spec(
        tmp_path / "p",
        "name: proj\nscript: job.py\nframework: jax\nbackend:\n  kind: ${matrix.backend}\ndump:\n  formats: [text]\n"
        "matrix:\n  backend: [local, docker-cpu]\n",
        PROJECT_JOB,
    )
    (tmp_path / "p" / "helpers.py").write_text("VALUE = 3\n")
    (tmp_path / "p" / "data").mkdir()
    (tmp_path / "p" / "data" / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "p" / ".git").mkdir()  # not sent
    (tmp_path / "p" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    out = cli("batch", spec, "--executor", "ray", "--ship", "always", "--store", tmp_path / "s", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    cells = json.loads(out.stdout)["cells"]
    store = LocalStore.open(tmp_path / "s")
    for cell in cells:
        run = cell["run_id"]
        project = store.manifest(run)["backend_details"]["ray"]["project"]
        assert project == {
            "ran_from": "snapshot",
            "why": "--ship always",
            "files": 4,
            "bytes": project["bytes"],
            "root": str(tmp_path / "p"),
        }
        assert project["bytes"] == sum(
            len((tmp_path / "p" / rel).read_bytes()) for rel in ("job.py", "helpers.py", "spec.yaml", "data/table.csv")
        )
        log = store.read_log(run, "stdout")
        resolved = json.loads((store.run_path(run) / "spec.resolved.json").read_text())
        assert resolved["spec_path"] == str(spec)  # the file the user knows; what ran is the copy:
        assert resolved["script"].startswith(str(staging)) and resolved["script"].endswith("/project/job.py")
        assert resolved["workdir"] == resolved["script"].rsplit("/", 1)[0]
        ran = log.split("ran ", 1)[1].split()
        if cell["values"]["backend"] == "local":
            assert ran[0] == resolved["script"] and ran[2] == resolved["workdir"], log
        else:  # the container sees the copy where it mounts a script's folder
            assert ran[0] == "/xlarun/script/job.py", log
        assert "helper 3 table a,b|1,2" in log and "value 12.0" in log
        assert _modules(store, run)
    _wait_until(lambda: not any(staging.iterdir()), 20, "the nodes' staging stores (and the copies) removed")
    bad = cli("batch", spec, "--executor", "ray", "--ship", "sometimes", "--store", tmp_path / "s")
    assert bad.exit_code == 2 and "unknown --ship setting 'sometimes'" in bad.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_stopping_the_driver_stops_the_jobs_on_the_nodes_and_leaves_nothing_running(cli, cluster, tmp_path, sig):
    """Ctrl-C: the running cells come back as interrupted runs with what their jobs wrote, the queued one is
    skipped. kill -9: nothing is kept, nothing is left running."""
    cluster_, _nodes, staging = cluster
    scales = ["1.0", "2.0", "3.0", "4.0"] if sig == signal.SIGINT else ["1.0", "2.0"]  # 3 local slots: one cell waits
    running = min(len(scales), 3)
    driver, markers = _start_waiting_batch(tmp_path, cluster_.address, scales, tmp_path / "s")
    try:
        _wait_until(lambda: len(_ready_logs(staging)) == running, 90, "the cells running on their nodes")
        jobs = [int(p.name.split("-")[1]) for p in markers.glob("pid-*")]
        assert len(jobs) == running and all(_alive(pid) for pid in jobs)
        # what each job had written when it was stopped, by run id (the run's staging folder on its node)
        dumped = {
            log.parent.name: {str(p.relative_to(log.parent / "dump")) for p in (log.parent / "dump").rglob("*") if p.is_file()}
            for log in _ready_logs(staging)
        }
        assert all(dumped.values())
        stopped_at = time.monotonic()
        driver.send_signal(sig)
        out, err = driver.communicate(timeout=60)
        took = time.monotonic() - stopped_at
    finally:
        if driver.poll() is None:
            driver.kill()
    if sig == signal.SIGINT:
        assert driver.returncode == 130, err[-2000:]
        print(f"SIGINT to the driver's exit, {running} interrupted runs shipped and committed: {took:.1f} s")
        data = json.loads(out)
        assert data["interrupted"]
        assert sorted(c["status"] for c in data["cells"]) == ["interrupted"] * running + ["skipped"], data["cells"]
        [skipped] = [c for c in data["cells"] if c["status"] == "skipped"]
        assert skipped["run_id"] is None and skipped["node"] is None and skipped["error"] is None
        store = LocalStore.open(tmp_path / "s")
        runs = sorted(c["run_id"] for c in data["cells"] if c["run_id"])
        assert store.run_ids() == runs == sorted(dumped)
        for run in runs:
            manifest = store.manifest(run)
            assert manifest["status"] == "interrupted" and manifest["signal"] == "SIGINT"
            assert any("stopped by SIGINT" in w for w in manifest["warnings"])
            assert manifest["backend_details"]["ray"]["files_shipped"] > 0
            assert dumped[run] <= {f.path for f in store.stored_files(run)}  # what the job wrote before the stop
            assert _modules(store, run)
        checked = cli("check", "--store", tmp_path / "s")
        assert checked.exit_code == 0, checked.stdout + checked.stderr
        assert not any(_alive(pid) for pid in jobs)  # the driver waited for the nodes to stop them: none is orphaned
        assert not any(staging.iterdir())  # and for them to drop what it shipped
    else:  # nobody waits: Ray ends the driver's workers, and each capture stops its job when its worker is gone
        _wait_until(lambda: not any(_alive(pid) for pid in jobs), 20, "the jobs stopped after the driver was killed")
        assert not (tmp_path / "s" / "runs").exists() or not any((tmp_path / "s" / "runs").iterdir())
    _wait_until(lambda: not any(staging.iterdir()), 20, "the nodes' staging stores removed")


def test_collect_brings_in_the_run_a_driver_stopped_at_once_left_on_its_node(cli, cluster, tmp_path):
    """Ctrl-C twice: the driver exits at once while the node archives the interrupted cell; `xlarun collect`
    ships that run in later. A cell a batch still runs is left alone."""
    cluster_, _nodes, staging = cluster
    driver, _markers = _start_waiting_batch(tmp_path, cluster_.address, ["5.0"], tmp_path / "driver")
    try:
        _wait_until(lambda: len(_ready_logs(staging)) == 1, 90, "the cell running on its node")
        [log] = _ready_logs(staging)
        scratch = log.parents[3]
        busy = json.loads(cli("collect", "--store", tmp_path / "mine", "--json").stdout)["found"]
        assert [(r["scratch"], r["state"], r["action"]) for r in busy] == [(str(scratch), "in use", "left")]
        driver.send_signal(signal.SIGINT)
        _wait_until(lambda: (scratch / "interrupt").exists(), 30, "the node told to stop the cell")
        driver.send_signal(signal.SIGINT)  # the second: the driver exits at once
        _out, err = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130 and "stays there (`xlarun collect` fetches it)" in err, err[-2000:]
    _wait_until(lambda: (scratch / "report.json").exists(), 60, "the node archived the interrupted run")
    _wait_until(lambda: not _alive(int((scratch / "worker.pid").read_text())), 30, "Ray ended the driver's worker")
    out = cli("collect", "--store", tmp_path / "mine", "--json")
    assert out.exit_code == 0, out.stdout + out.stderr
    [row] = json.loads(out.stdout)["found"]
    assert (row["state"], row["action"], row["status"]) == ("collect", "collected", "interrupted")
    store = LocalStore.open(tmp_path / "mine")
    assert store.run_ids() == [row["run_id"]]
    manifest = store.manifest(row["run_id"])
    assert manifest["signal"] == "SIGINT" and manifest["matrix"] == {"scale": 5.0}
    assert manifest["backend_details"]["ray"]["collected"] is True and _modules(store, row["run_id"])
    assert cli("check", "--store", tmp_path / "mine").exit_code == 0
    assert not scratch.exists()
    again = cli("collect", "--store", tmp_path / "mine")
    assert again.exit_code == 0 and "no Ray batch left anything on the nodes" in again.stdout + again.stderr


def test_collect_takes_only_runs_no_driver_will_fetch(cli, cluster, tmp_path):
    """How a node classifies its staging folders, each laid out as the case leaves it (the listing runs as a Ray
    task on a node, as `xlarun collect` runs it)."""
    import ray

    from xlarun.executors.node_side import left_on_node

    _cluster, _nodes, staging = cluster
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has: a worker Ray ended with its driver
    long_ago = time.time() - 3600
    cases = {
        "stopped-then-given-up": ({"report.json": '{"run_id": "r1", "files": []}', "interrupt": "SIGINT", "abandoned": ""}, None),
        "stopped-driver-gone": (
            {"report.json": '{"run_id": "r2", "files": []}', "interrupt": "SIGINT", "worker.pid": str(gone.pid)},
            None,
        ),
        "being-fetched": ({"report.json": '{"run_id": "r3", "files": []}', "worker.pid": str(os.getpid())}, None),
        "reported-driver-gone-just-now": ({"report.json": '{"run_id": "r4", "files": []}', "worker.pid": str(gone.pid)}, None),
        "reported-driver-gone-long-ago": (
            {"report.json": '{"run_id": "r5", "files": []}', "worker.pid": str(gone.pid)},
            long_ago,
        ),
        "still-archiving": ({"interrupt": "SIGINT", "abandoned": "", "capture.pid": str(os.getpid())}, None),
        "failed": ({"report.json": '{"error": "the job could not start"}'}, None),
        "crashed-long-ago": ({"capture.pid": str(gone.pid)}, long_ago),
    }
    for name, (files, mtime) in cases.items():
        folder = staging / name
        folder.mkdir()
        for file, text in files.items():
            (folder / file).write_text(text)
            if mtime:
                os.utime(folder / file, (mtime, mtime))
    try:
        listing = ray.remote(num_cpus=0, max_retries=0)(left_on_node)
        states = {Path(e["scratch"]).name: e["state"] for e in ray.get(listing.remote(), timeout=60)}
        # these folders hold no staging store: what collect takes cannot be shipped, and stays where it is
        out = cli("collect", "--prune", "--store", tmp_path / "s", "--json")
        actions = {Path(r["scratch"]).name: (r["action"], r["error"] is not None) for r in json.loads(out.stdout)["found"]}
        left = sorted(p.name for p in staging.iterdir())
    finally:
        for name in cases:
            shutil.rmtree(staging / name, ignore_errors=True)
    assert states == {
        "stopped-then-given-up": "collect",
        "stopped-driver-gone": "collect",
        "being-fetched": "in use",
        "reported-driver-gone-just-now": "in use",
        "reported-driver-gone-long-ago": "collect",
        "still-archiving": "archiving",
        "failed": "dead",
        "crashed-long-ago": "dead",
    }
    assert out.exit_code == 3
    taken = ("stopped-then-given-up", "stopped-driver-gone", "reported-driver-gone-long-ago")
    assert actions == {
        **{name: ("failed", True) for name in taken},
        "being-fetched": ("left", False),
        "reported-driver-gone-just-now": ("left", False),
        "still-archiving": ("left", False),
        "failed": ("pruned", True),  # its report's error
        "crashed-long-ago": ("pruned", False),
    }
    assert left == sorted(set(cases) - {"failed", "crashed-long-ago"})


def test_a_cell_whose_node_dies_is_retried_elsewhere_or_fails_with_the_reason(cluster, tmp_path):
    _cluster, nodes, staging = cluster
    markers = tmp_path / "markers"
    markers.mkdir()
    spec = write_spec(
        tmp_path / "p",
        f"name: lost\nscript: job.py\nargs: ['${{matrix.scale}}']\nenv:\n  MARKER_DIR: {markers}\nmatrix:\n  scale: ['1.0']\n",
        WAITING,
    )
    by_id = {node.node_id[:8]: node for node in nodes.values()}

    def run_and_kill(retries: int):
        store = LocalStore.open(tmp_path / f"s{retries}")
        seen: dict = {}
        box: dict = {}

        def on_event(cell):
            if cell.node and "first" not in seen:
                seen["first"] = cell.node

        thread = threading.Thread(
            target=lambda: box.setdefault(
                "result", run_batch_on("ray", load_batch(spec), store, retries=retries, on_event=on_event)
            )
        )
        thread.start()
        _wait_until(lambda: "first" in seen and _ready_logs(staging), 90, "the cell running on a node")
        victim = by_id[seen["first"].split("/")[1]]
        jobs = [int(p.name.split("-")[1]) for p in markers.glob("pid-*")]
        os.kill(victim.all_processes["raylet"][0].process.pid, signal.SIGKILL)
        thread.join(timeout=90)
        assert not thread.is_alive(), "the batch hung after its node died"
        _wait_until(lambda: not any(_alive(pid) for pid in jobs), 15, "the job on the lost node stopped")
        return store, box["result"].cells[0], seen["first"]

    store, cell, first_node = run_and_kill(retries=1)
    assert cell.ok, cell.error
    assert cell.node != first_node and len(cell.attempts) == 1 and first_node in cell.attempts[0]
    assert store.run_ids() == [cell.result.run_id]

    for marker in markers.glob("started-*"):
        marker.unlink()  # the next first attempt waits again
    store, cell, first_node = run_and_kill(retries=0)
    assert cell.status == "error" and not cell.ok
    assert first_node.split("/")[1] in cell.error and ("died" in cell.error or "raylet" in cell.error or "lost" in cell.error)
    assert store.run_ids() == []
