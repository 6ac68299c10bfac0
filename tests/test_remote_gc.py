"""``xlarun gc --remote``: a retention policy on a real SeaweedFS remote, with local gc's safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_remote import BUCKET, REPO, _client, remote, s3_server  # noqa: F401

pytest.importorskip("boto3")
COMPAT = REPO / "tests" / "fixtures" / "compat"


def _json(result) -> dict:
    return json.loads(result.stdout)


def _keys(s3_server, prefix: str) -> set[str]:
    pages = _client(s3_server).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
    return {o["Key"].removeprefix(f"{prefix}/") for page in pages for o in page.get("Contents", ())}


def _import_as(cli, tmp_path: Path, store: Path, version: str, name: str, started: str, tags: dict) -> str:
    """A run of the compat dump of ``version`` named ``name``, started then, with these spec tags (an export whose
    manifest says so, imported: what a capture of that spec would record)."""
    scratch = tmp_path / f"scratch-{name}-{started[:10]}"
    assert cli("import", COMPAT / version / "dumps.tar.gz", "--store", scratch).exit_code == 0
    [run_id] = [r["run_id"] for r in _json(cli("runs", "--store", scratch, "--json"))]
    exported = tmp_path / f"export-{name}-{started[:10]}"
    assert cli("export", run_id, str(exported), "--store", scratch).exit_code == 0
    manifest_path = exported / "_xlarun" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.update(name=name, started=started, tags=tags)
    manifest_path.write_text(json.dumps(manifest))
    imported = cli("import", exported, "--store", store, "--json")
    assert imported.exit_code == 0, imported.output
    return _json(imported)["run_id"]


@pytest.fixture
def four_runs(cli, tmp_path, remote):
    """Four runs pushed: mlp (Jan, Feb, Mar; the first two tagged nightly) and, of another dump, cnn (Jan)."""
    store = tmp_path / "store"
    runs = {
        "mlp-jan": _import_as(cli, tmp_path, store, "jax-0.8.3", "mlp", "2026-01-05T10:00:00+00:00", {"kind": "nightly"}),
        "mlp-feb": _import_as(cli, tmp_path, store, "jax-0.8.3", "mlp", "2026-02-05T10:00:00+00:00", {"kind": "nightly"}),
        "mlp-mar": _import_as(cli, tmp_path, store, "jax-0.8.3", "mlp", "2026-03-05T10:00:00+00:00", {}),
        "cnn-jan": _import_as(cli, tmp_path, store, "jax-0.9.2", "cnn", "2026-01-06T10:00:00+00:00", {"kind": "nightly"}),
    }
    pushed = cli("push", *runs.values(), "--remote", "team", "--store", store, "--json")
    assert pushed.exit_code == 0 and len(_json(pushed)["runs"]) == 4, pushed.output
    return store, runs


@pytest.mark.slow
def test_keep_per_spec_is_a_dry_run_until_apply_and_the_kept_runs_pull_whole(four_runs, remote, s3_server, cli, tmp_path):
    _store, runs = four_runs
    before = _keys(s3_server, remote)
    dry = cli("gc", "--remote", "team", "--keep", "1", "--json")
    assert dry.exit_code == 0, dry.output
    assert _json(dry)["runs"] == sorted([runs["mlp-jan"], runs["mlp-feb"]]) and _json(dry)["applied"] is False
    assert _json(dry)["kept_runs"] == 2 and _keys(s3_server, remote) == before  # nothing deleted

    applied = _json(cli("gc", "--remote", "team", "--keep", "1", "--apply", "--json"))
    assert applied["runs"] == _json(dry)["runs"]
    listed = sorted(r["run"] for r in _json(cli("runs", "--remote", "team", "--json")))
    assert listed == sorted([runs["mlp-mar"], runs["cnn-jan"]])
    after = _keys(s3_server, remote)
    assert {f"runs/{runs['mlp-jan']}.json", f"runs/{runs['mlp-feb']}.json"} <= before - after
    assert not any(k.startswith("locks/") for k in after)  # the gc's lock is gone with it
    kept_index = _client(s3_server).get_object(Bucket=BUCKET, Key=f"{remote}/runs/{runs['mlp-mar']}.json")["Body"].read()
    base = json.loads(kept_index)["record_base"]  # its record went as a delta against mlp-jan's, now deleted
    assert f"records/{base}.zst" in after
    mar = json.loads(kept_index)  # its catalog (index rows) too: a delta against mlp-jan's
    assert f"catalogs/{mar['catalog']}.{mar['catalog_base']}.zst" in after and f"catalogs/{mar['catalog_base']}.zst" in after
    gone = {k for k in before - after if k.startswith("catalogs/")}
    assert len(gone) == 1 and all(k.count(".") == 2 for k in gone)  # mlp-feb's catalog delta; mlp-jan's is mar's base
    assert _json(cli("modules", runs["mlp-mar"], "--remote", "team", "--json"))  # the mirror reads the kept catalog
    for run_id in listed:  # what the kept runs name is all there
        assert cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other").exit_code == 0
    assert cli("check", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
def test_age_and_label_select_and_packs_only_deleted_runs_named_go(four_runs, remote, s3_server, cli):
    store, runs = four_runs
    nothing = _json(cli("gc", "--remote", "team", "--older-than", "30d", "--label", "kind=weekly", "--json"))
    assert nothing["runs"] == [] and nothing["objects"] == 0
    before = _keys(s3_server, remote)
    sizes = {
        o["Key"].removeprefix(f"{remote}/"): o["Size"]
        for o in _client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/packs/")["Contents"]
    }
    cnn_packs = {k for k in before if k.startswith("packs/")} - _pack_keys_of(s3_server, remote, runs["mlp-mar"])
    assert cnn_packs  # the other dump's packs, named by cnn-jan alone
    gone = _json(cli("gc", "--remote", "team", "--older-than", "30d", "--label", "kind=nightly", "--apply", "--json"))
    assert gone["runs"] == sorted([runs["mlp-jan"], runs["mlp-feb"], runs["cnn-jan"]])
    after = _keys(s3_server, remote)
    assert cnn_packs.isdisjoint(after) and gone["bytes"] >= sum(sizes[k] for k in cnn_packs) > 10_000
    assert _pack_keys_of(s3_server, remote, runs["mlp-mar"]) <= after  # shared with deleted runs, named by a kept one
    assert [r["run"] for r in _json(cli("runs", "--remote", "team", "--json"))] == [runs["mlp-mar"]]
    assert cli("gc", "--remote", "team", "--older-than", "30x").exit_code == 2
    assert cli("gc", "--keep", "1", "--store", store).exit_code == 2  # policy options need --remote


def _pack_keys_of(s3_server, prefix: str, run_id: str) -> set[str]:
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_records import checked_record, read_record, read_remote_json

    remote_store = ObjectStore(find_remote("team"))
    index = read_remote_json(remote_store, f"runs/{run_id}.json", None) or {}
    record = read_record(remote_store, index, run_id)
    return {f"packs/{name}.zst" for name in checked_record(record, run_id)[2]}


@pytest.mark.slow
def test_a_damaged_remote_is_refused_with_nothing_deleted(four_runs, remote, s3_server, cli):
    _store, runs = four_runs
    victim = sorted(_pack_keys_of(s3_server, remote, runs["cnn-jan"]))[0]
    _client(s3_server).delete_object(Bucket=BUCKET, Key=f"{remote}/{victim}")
    before = _keys(s3_server, remote)
    refused = cli("gc", "--remote", "team", "--keep", "1", "--apply", "--json")
    assert refused.exit_code == 3
    assert "looks damaged" in _json(refused)["error"] and victim in _json(refused)["error"]
    assert runs["cnn-jan"] in _json(refused)["hint"]
    assert _keys(s3_server, remote) == before


@pytest.mark.slow
def test_a_push_under_way_stops_gc_and_a_gc_stops_a_push(remote, s3_server, cli, tmp_path):
    store = tmp_path / "store"
    first = _import_as(cli, tmp_path, store, "jax-0.8.3", "mlp", "2026-01-05T10:00:00+00:00", {})
    second = _import_as(cli, tmp_path, store, "jax-0.9.2", "cnn", "2026-01-06T10:00:00+00:00", {})
    assert cli("push", first, "--remote", "team", "--store", store).exit_code == 0
    hold = tmp_path / "holding"
    env = {**os.environ, "XLARUN_HOLD_AT": "remote-pack-sent", "XLARUN_HOLD_FILE": str(hold)}
    argv = [sys.executable, "-m", "xlarun", "push", second, "--remote", "team", "--store", str(store), "--json"]
    push = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not hold.exists() and push.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hold.exists(), push.communicate()
        # the push sent a pack no published run names yet: a gc now must not take it
        dry = _json(cli("gc", "--remote", "team", "--json"))
        assert dry["young_kept"] >= 1 and dry["objects"] == 0
        refused = cli("gc", "--remote", "team", "--keep", "0", "--apply", "--json")
        assert refused.exit_code == 3 and "under way" in _json(refused)["error"]
    finally:
        hold.unlink(missing_ok=True)
    out, err = push.communicate(timeout=120)
    assert push.returncode == 0 and _json_text(out)["runs"] == [second], err
    assert cli("pull", second, "--remote", "team", "--store", tmp_path / "other").exit_code == 0

    from xlarun.store.remote import ObjectStore, find_remote

    ObjectStore(find_remote("team")).put("locks/gc-by-hand.json", b"{}")  # a gc holding its lock
    third = _import_as(cli, tmp_path, store, "jax-0.10.2", "other", "2026-01-07T10:00:00+00:00", {})
    blocked = cli("push", third, "--remote", "team", "--store", store, "--json")
    assert blocked.exit_code == 3 and "gc --remote is deleting" in _json(blocked)["error"]
    assert third not in {r["run"] for r in _json(cli("runs", "--remote", "team", "--json"))}
    assert [k for k in _keys(s3_server, remote) if k.startswith("locks/")] == ["locks/gc-by-hand.json"]


def _json_text(text: bytes) -> dict:
    return json.loads(text)


@pytest.mark.slow
def test_a_young_delta_keeps_its_base_pack_when_every_run_goes(remote, s3_server, cli, tmp_path):
    store = tmp_path / "store"
    run_id = _import_as(cli, tmp_path, store, "jax-0.8.3", "mlp", "2026-01-05T10:00:00+00:00", {})
    other = _import_as(cli, tmp_path, store, "jax-0.10.2", "other", "2026-01-05T11:00:00+00:00", {})
    for pushed in (run_id, other):
        assert cli("push", pushed, "--remote", "team", "--store", store).exit_code == 0
    packs = sorted(_pack_keys_of(s3_server, remote, run_id))
    others = set(_pack_keys_of(s3_server, remote, other)) - set(packs)
    assert packs and others  # a small dump's series share one pack: the other run's packs are the ones to go
    base_pack = packs[0].removeprefix("packs/").removesuffix(".zst")
    young = f"deltas/{'f' * 64}.{'e' * 64}.{base_pack}.zst"  # sent by a push that has not published yet
    _client(s3_server).put_object(Bucket=BUCKET, Key=f"{remote}/{young}", Body=b"delta")

    gone = _json(cli("gc", "--remote", "team", "--keep", "0", "--apply", "--json"))
    assert sorted(gone["runs"]) == sorted([run_id, other]) and gone["young_kept"] == 1
    after = _keys(s3_server, remote)
    assert young in after and packs[0] in after  # the delta, and the pack it needs
    assert not others & after  # the packs no young delta needs went with their runs
