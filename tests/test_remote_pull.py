"""A pull of several runs at once (store/remote_pull.py) against the session's SeaweedFS cluster: a pack two runs
share is fetched once, every file comes back byte for byte, and a damaged pack stops the pull at its run with the
runs before it committed and nothing of its own kept."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.test_remote import BUCKET, REPO, _client, _imported_store, remote, s3_server  # noqa: F401 (fixtures)
from tests.test_remote_read import S3Calls

pytest.importorskip("boto3")

OTHER_DUMP = REPO / "tests" / "fixtures" / "compat" / "jax-0.5.3" / "dumps.tar.gz"


def _runs(cli, store: Path) -> list[str]:
    return [r["run_id"] for r in json.loads(cli("runs", "--store", store, "--json").stdout)]


@pytest.mark.slow
def test_a_pull_of_runs_sharing_packs_fetches_each_pack_once_and_gives_the_same_bytes(remote, tmp_path, cli, monkeypatch):
    runs = _imported_store(cli, tmp_path / "store", times=3)  # the same dump three times: the runs share their packs
    assert cli("push", *runs, "--remote", "team", "--store", tmp_path / "store").exit_code == 0
    calls = S3Calls(remote).install(monkeypatch)
    pulled = cli("pull", *runs, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 0, pulled.output
    assert sorted(json.loads(pulled.stdout)["runs"]) == sorted(runs)
    fetched = Counter(calls.downloads_of("packs/"))
    assert fetched and set(fetched.values()) == {1}  # each shared pack once, not once a run
    from xlarun.store.facade import LocalStore

    here, there = LocalStore.open(tmp_path / "store"), LocalStore.open(tmp_path / "other")
    for run_id in runs:
        files = here.stored_files(run_id)
        assert [f.path for f in there.stored_files(run_id)] == [f.path for f in files]
        assert all(there.read_file(run_id, f.path) == here.read_file(run_id, f.path) for f in files)
    assert cli("check", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
def test_a_damaged_pack_stops_the_pull_at_its_run_keeping_the_runs_before_it(remote, s3_server, tmp_path, cli):
    [first] = _imported_store(cli, tmp_path / "a")
    [second] = _imported_store(cli, tmp_path / "b", source=OTHER_DUMP)
    for store, run_id in ((tmp_path / "a", first), (tmp_path / "b", second)):
        assert cli("push", run_id, "--remote", "team", "--store", store).exit_code == 0
    from xlarun.store.facade import LocalStore
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_files import RemoteFiles

    held = RemoteFiles.read(ObjectStore(find_remote("team")))  # remote packs are cut by the push: not the local ones
    first_files = LocalStore.open(tmp_path / "a").stored_files(first)
    own = {f.digest for f in LocalStore.open(tmp_path / "b").stored_files(second)} - {f.digest for f in first_files}
    client = _client(s3_server)
    # an object only the second run needs: a pack of its own files, or (when the push sent them all as deltas
    # against the first run's files, as it does for two captures this alike) one of its deltas
    own_packs = sorted({held.pack_of(d) for d in own} - {held.pack_of(f.digest) for f in first_files} - {None})
    deltas = [
        o["Key"][len(remote) + 1 :]
        for o in client.list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/deltas/").get("Contents", [])
        if o["Key"].rsplit("/", 1)[-1].split(".")[0] in own
    ]
    damaged = f"packs/{own_packs[0]}.zst" if own_packs else sorted(deltas)[0]
    key = f"{remote}/{damaged}"
    body = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[-6] ^= 0xFF  # one flipped byte inside the zstd frame
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))

    pulled = cli("pull", first, second, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 3
    answer = json.loads(pulled.stdout)
    assert "damaged" in answer["error"] and damaged in answer["error"]
    assert _runs(cli, tmp_path / "other") == [first]  # the run before it is whole, its own run is not there
    packs = tmp_path / "other" / "blobs" / "packs"
    assert not any((packs / f"{p}.zst").exists() for p in own_packs) and not list(packs.glob(".tmp-*"))
    assert not list((tmp_path / "other" / "staging").glob("*"))
    assert cli("check", "--store", tmp_path / "other").exit_code == 0
