"""``batch --executor ray --remote NAME``: each node pushes its cell's run straight to the team store. A real Ray
cluster (tests/test_batch_ray.py's, started for this module) and the real SeaweedFS server of tests/test_remote.py.

The nodes are started with the admin credentials in their environment, as a node of a real cluster has its own
(an instance role, a profile): the driver sends them none."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import write_spec
from tests.test_batch_ray import TINY, cluster  # noqa: F401 (fixture: this module's own cluster)
from tests.test_remote import ADMIN, BUCKET, _client, remote, s3_server  # noqa: F401 (fixtures)

pytest.importorskip("boto3")
pytest.importorskip("ray")


@pytest.fixture(scope="module")
def node_credentials(tmp_path_factory):
    """AWS credentials in the environment the cluster's nodes start with (before `cluster`, which a test asks after)."""
    empty = tmp_path_factory.mktemp("aws")
    wanted = {**ADMIN, "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(empty / "config"),
              "AWS_SHARED_CREDENTIALS_FILE": str(empty / "credentials")}  # fmt: skip
    saved = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _spec(folder: Path) -> Path:
    return write_spec(
        folder,
        "name: tiny\nscript: job.py\nframework: jax\nargs: ['${matrix.scale}']\ndump:\n  formats: [text]\n"
        "matrix:\n  scale: [1.0, 2.0]\n",
        TINY,
    )


@pytest.mark.slow
def test_each_node_pushes_its_cells_runs_to_the_remote_and_nothing_comes_back(
    node_credentials,
    cluster,
    remote,
    s3_server,
    cli,
    tmp_path,
    monkeypatch,
):
    _cluster, nodes, staging = cluster
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    driver_store = tmp_path / "driver"
    done = cli("batch", _spec(tmp_path / "p"), "--executor", "ray", "--remote", "team", "--store", driver_store, "--json")
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert answer["ok"] and answer["remote"] == f"s3://{BUCKET}/{remote}"
    run_ids = sorted(c["run_id"] for c in answer["cells"])
    worker_ids = {n.node_id[:8] for n in nodes.values()}
    assert all(c["node"].split("/")[1] in worker_ids and c["shipped_bytes"] == 0 for c in answer["cells"]), answer
    assert all(c["modules"] and c["main_module"] for c in answer["cells"]), answer

    # on the remote, published by the nodes; nothing of them in the driver's store, nothing left on the nodes
    listed = json.loads(cli("runs", "--remote", "team", "--json").stdout)
    assert sorted(r["run"] for r in listed) == run_ids and {r["status"] for r in listed} == {"succeeded"}
    assert not (driver_store / "runs").exists() or not any((driver_store / "runs").iterdir())
    assert not any(staging.iterdir()), list(staging.iterdir())
    keys = [o["Key"] for o in _client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/packs/")["Contents"]]
    assert keys  # the packs went straight from the nodes

    # collect has nothing to take back; the runs are found and read from the remote
    collected = cli("collect", "--store", tmp_path / "collected", "--json")
    assert collected.exit_code == 0 and json.loads(collected.stdout)["found"] == []
    for cell in answer["cells"]:
        modules = json.loads(cli("modules", cell["run_id"], "--remote", "team", "--json").stdout)
        assert modules["modules"][0]["name"] == cell["main_module"]
        pulled = cli("pull", cell["run_id"], "--remote", "team", "--store", tmp_path / "pulled", "--json")
        assert pulled.exit_code == 0, pulled.output
        from xlarun.store.facade import LocalStore

        manifest = LocalStore.open(tmp_path / "pulled").manifest(cell["run_id"])
        assert manifest["batch_id"] == answer["batch_id"] and manifest["matrix"] == cell["values"]
    assert cli("check", "--store", tmp_path / "pulled").exit_code == 0


@pytest.mark.slow
def test_a_push_that_fails_on_the_node_ships_the_run_to_the_driver_instead(
    node_credentials, cluster, s3_server, cli, tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    from xlarun.store.remote import add_remote

    add_remote("gone", "s3://no-such-bucket-here/team", s3_server)  # the server answers: no such bucket
    done = cli("batch", _spec(tmp_path / "p"), "--executor", "ray", "--remote", "gone", "--store", tmp_path / "driver", "--json")
    assert done.exit_code == 0, done.output
    cells = json.loads(done.stdout)["cells"]
    assert all(c["status"] == "succeeded" and c["shipped_bytes"] > 0 for c in cells), cells
    for cell in cells:  # said, with what to do
        said = (
            f"run {cell['run_id']} not pushed to s3://no-such-bucket-here/team (the bucket 'no-such-bucket-here' does not exist"
        )
        assert said in done.stderr and f"`xlarun push {cell['run_id']} --remote gone`" in done.stderr, done.stderr
    from xlarun.store.facade import LocalStore

    here = LocalStore.open(tmp_path / "driver")
    assert sorted(here.run_ids()) == sorted(c["run_id"] for c in cells)  # nothing lost
    for cell in cells:
        assert here.index.modules(cell["run_id"]) and here.manifest(cell["run_id"])["matrix"] == cell["values"]
    _cluster, _nodes, staging = cluster
    assert not any(staging.iterdir())


def test_a_local_batch_with_a_remote_is_refused_with_what_to_do(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    from xlarun.store.remote import add_remote

    add_remote("team", "s3://team-bucket/runs", "http://127.0.0.1:9")  # refused before any S3 request
    refused = cli("batch", _spec(tmp_path / "p"), "--remote", "team", "--store", tmp_path / "s", "--json")
    assert refused.exit_code == 2, refused.output
    assert "only on Ray" in json.loads(refused.stdout)["error"] and "xlarun push --remote team" in refused.output
    assert not (tmp_path / "s" / "runs").exists() or not any((tmp_path / "s" / "runs").iterdir())
