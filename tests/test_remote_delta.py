"""Deltas on the team store: a second capture of a program pushes only how its files differ from the first's."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CONFIGS
from tests.test_remote import BUCKET, _client, remote, s3_server  # noqa: F401

pytest.importorskip("boto3")


def _json(result) -> dict:
    return json.loads(result.stdout)


def test_a_delta_decodes_only_against_its_base_and_only_to_its_digest():
    from xlarun.store.pack_format import content_digest
    from xlarun.store.remote_delta import decode_delta, encode_delta, like_path, parse_delta_name

    base = b"HloModule jit_step, entry_computation_layout={(f32[8,16])->f32[8]}\n" * 400
    data = base.replace(b"jit_step", b"jit_stop", 3)
    frame = encode_delta(data, base)
    assert len(frame) < len(data) // 50
    assert decode_delta(frame, base, len(data), content_digest(data)) == data
    assert decode_delta(frame, base, len(data), content_digest(base)) is None  # another digest: refused
    assert decode_delta(frame, base[:-1] + b"!", len(data), content_digest(data)) is None  # another base
    assert decode_delta(frame[:-3], base, len(data), content_digest(data)) is None  # cut short
    assert decode_delta(frame, base, None, content_digest(data), limit=len(data) - 1) is None  # past the limit
    assert decode_delta(frame, base, None, content_digest(data)) == data  # a size not known beforehand: a record's
    name = f"{'a' * 64}.{'b' * 64}.{'c' * 64}.zst"
    ref = parse_delta_name(name)
    assert ref is not None and ref.key == f"deltas/{name}" and ref.base_pack == "c" * 64
    assert parse_delta_name("../x.zst") is None and parse_delta_name(name.upper()) is None
    assert like_path("module_0012.jit_step.snapshot.-3215.pb") == like_path("module_0013.jit_step.snapshot.-9.pb")


@pytest.mark.slow
def test_a_second_capture_pushes_under_5_percent_and_pulls_byte_for_byte(remote, s3_server, tmp_path, cli):
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "store")
    first, second = (capture(CONFIGS / "jax-cpu.yaml", store).run_id for _ in range(2))
    old = {f.path: f.digest for f in store.stored_files(first)}
    changed = [f for f in store.stored_files(second) if old.get(f.path) != f.digest]
    assert len(changed) >= 8  # the snapshots and memory reports of a capture differ from the last one's

    one = _json(cli("push", first, "--remote", "team", "--store", store.root, "--json"))
    two = _json(cli("push", second, "--remote", "team", "--store", store.root, "--json"))
    assert one["runs"] == [first] and two["runs"] == [second] and one["bytes"] > 500_000
    assert two["bytes"] < 0.05 * one["bytes"], (one, two)
    keys = [o["Key"] for o in _client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/deltas/")["Contents"]]
    assert len(keys) == len({f.digest for f in changed})  # each changed file once, as its difference from the first capture's
    records = _client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/records/")["Contents"]
    names = [o["Key"].rsplit("/", 1)[1] for o in records]
    assert sorted(n.count(".") for n in names) == [1, 2]  # the second's record: a delta against the first's
    assert min(o["Size"] for o in records) * 5 < max(o["Size"] for o in records)  # 1.9 KB against 18.8 KB, measured
    catalogs = _client(s3_server).list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/catalogs/")["Contents"]
    names = [o["Key"].rsplit("/", 1)[1] for o in catalogs]
    assert sorted(n.count(".") for n in names) == [1, 2]  # the second's catalog (its index rows): a delta too
    assert min(o["Size"] for o in catalogs) * 4 < max(o["Size"] for o in catalogs)
    mirrored = cli("modules", second, "--remote", "team", "--json")  # the mirror reads the catalog through its base
    assert mirrored.exit_code == 0, mirrored.output
    local = _json(cli("modules", second, "--store", store.root, "--json"))
    assert _json(mirrored) == local and len(local) > 0

    for target, pulled_first in (("fresh", False), ("has-first", True)):  # its bases fetched, or already here
        other = tmp_path / target
        if pulled_first:
            assert cli("pull", first, "--remote", "team", "--store", other).exit_code == 0
        pulled = cli("pull", second, "--remote", "team", "--store", other, "--json")
        assert pulled.exit_code == 0, pulled.output
        copy = LocalStore.open(other)
        for entry in store.stored_files(second):
            assert copy.read_file(second, entry.path) == store.read_file(second, entry.path)
        assert cli("check", "--store", other).exit_code == 0
    assert _json(pulled)["bytes"] < 0.05 * one["bytes"]  # into a store with the first: the deltas and small files

    third = capture(CONFIGS / "jax-cpu.yaml", store).run_id  # encoded against a pack the remote holds, never a delta
    three = _json(cli("push", third, "--remote", "team", "--store", store.root, "--json"))
    assert three["runs"] == [third] and three["bytes"] < 0.05 * one["bytes"]
    assert cli("pull", third, "--remote", "team", "--store", tmp_path / "third").exit_code == 0


@pytest.mark.slow
def test_a_damaged_delta_is_reported_and_nothing_of_the_run_is_kept(remote, s3_server, tmp_path, cli):
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "store")
    first, second = (capture(CONFIGS / "jax-cpu.yaml", store).run_id for _ in range(2))
    for run_id in (first, second):
        assert cli("push", run_id, "--remote", "team", "--store", store.root).exit_code == 0
    client = _client(s3_server)
    key = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{remote}/deltas/")["Contents"][0]["Key"]
    body = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[len(body) // 2] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))

    pulled = cli("pull", second, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 3 and "damaged" in _json(pulled)["error"]
    assert key.removeprefix(f"{remote}/") in _json(pulled)["error"]
    assert _json(cli("runs", "--store", tmp_path / "other", "--json")) == []
