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

    second_store = LocalStore.open(tmp_path / "b")
    first_packs = {
        LocalStore.open(tmp_path / "a").blobs.pack_of(f.digest) for f in LocalStore.open(tmp_path / "a").stored_files(first)
    }
    only_second = sorted({second_store.blobs.pack_of(f.digest) for f in second_store.stored_files(second)} - first_packs)
    key = f"{remote}/packs/{only_second[0]}.zst"
    client = _client(s3_server)
    body = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[-20] ^= 0xFF  # one flipped byte inside the zstd frame
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))

    pulled = cli("pull", first, second, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 3
    answer = json.loads(pulled.stdout)
    assert "damaged" in answer["error"] and f"packs/{only_second[0]}.zst" in answer["error"]
    assert _runs(cli, tmp_path / "other") == [first]  # the run before it is whole, its own run is not there
    packs = tmp_path / "other" / "blobs" / "packs"
    assert not (packs / f"{only_second[0]}.zst").exists() and not list(packs.glob(".tmp-*"))
    assert not list((tmp_path / "other" / "staging").glob("*"))
    assert cli("check", "--store", tmp_path / "other").exit_code == 0
