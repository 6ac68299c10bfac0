"""A team's hosts on one remote: separate stores capturing the same program push its files once, in turn or at once
(store/remote_files.py, remote_push.py, remote_bases.py), and every run pulls back byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import CONFIGS
from tests.test_remote import BUCKET, _client, remote, s3_server  # noqa: F401

pytest.importorskip("boto3")


@pytest.fixture(scope="module")
def hosts(jax_run, tmp_path_factory):
    """Three hosts: the session's capture of configs/jax-cpu.yaml and two more captures of it, each in a store of
    its own (their packs their own, as on separate machines): [(store, run id)]."""
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store, result = jax_run
    made = [(store, result.run_id)]
    for n in (1, 2):
        other = LocalStore.open(tmp_path_factory.mktemp(f"host{n}") / "store")
        made.append((other, capture(CONFIGS / "jax-cpu.yaml", other).run_id))
    return made


def _keys(s3_server, prefix: str) -> dict[str, int]:
    """The remote's objects and their sizes, below the prefix."""
    found: dict[str, int] = {}
    for page in _client(s3_server).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        found.update({o["Key"][len(prefix) + 1 :]: int(o["Size"]) for o in page.get("Contents", ())})
    return found


def _file_bytes(keys: dict[str, int]) -> int:
    return sum(size for key, size in keys.items() if key.startswith(("packs/", "deltas/")))


def _held_once(prefix_keys: dict[str, int]) -> Counter:
    """How many remote objects hold each digest (a pack's header, a delta's name)."""
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_files import read_pack_digests

    remote = ObjectStore(find_remote("team"))
    held: Counter = Counter()
    for key in prefix_keys:
        if key.startswith("packs/"):
            held.update(read_pack_digests(remote, key[len("packs/") : -len(".zst")]) or ["unreadable " + key])
        elif key.startswith("deltas/"):
            held[key[len("deltas/") :].split(".")[0]] += 1
    return held


def _pulled_byte_for_byte(cli, hosts, tmp_path: Path) -> None:
    from xlarun.store.facade import LocalStore

    for n, (store, run_id) in enumerate(hosts):
        target = tmp_path / f"pulled{n}"
        pulled = cli("pull", run_id, "--remote", "team", "--store", target, "--json")
        assert pulled.exit_code == 0, pulled.output
        copy = LocalStore.open(target)
        files = store.stored_files(run_id)
        assert [f.path for f in copy.stored_files(run_id)] == [f.path for f in files]
        for entry in files:
            assert copy.read_file(run_id, entry.path) == store.read_file(run_id, entry.path), entry.path
        assert cli("check", "--store", target).exit_code == 0


def test_a_push_pack_is_the_same_bytes_for_the_same_files_and_a_store_adopts_it(jax_run, tmp_path):
    from xlarun.store.facade import LocalStore
    from xlarun.store.remote_files import build_pack, push_pack_groups

    store, result = jax_run
    files = store.stored_files(result.run_id)
    groups = push_pack_groups(files)
    assert [f.digest for g in groups for f in g] == list(dict.fromkeys(f.digest for f in files))  # each once, in order
    members = [(f.digest, store.blobs.get(f.digest)) for f in groups[0]]
    name, body = build_pack(members)
    assert build_pack(members) == (name, body)  # two hosts with these files send the same object
    assert build_pack(members[::-1])[0] != name

    other = LocalStore.open(tmp_path / "other")  # the store's own pack reader takes it as it is
    other.blobs.packs_dir.mkdir(parents=True, exist_ok=True)
    (other.blobs.packs_dir / ".incoming").write_bytes(body)
    adopted = other.blobs.adopt_pack(other.blobs.packs_dir / ".incoming", name)
    assert [d for d, _o, _n in adopted] == [d for d, _data in members]
    assert all(other.blobs.get(d) == data for d, data in members)


@pytest.mark.slow
def test_hosts_pushing_the_same_program_in_turn_store_its_files_once(hosts, remote, s3_server, cli, tmp_path):
    sent, remote_bytes = [], []
    for store, run_id in hosts:
        pushed = cli("push", run_id, "--remote", "team", "--store", store.root, "--json")
        assert pushed.exit_code == 0 and json.loads(pushed.stdout)["runs"] == [run_id], pushed.output
        sent.append(json.loads(pushed.stdout)["bytes"])
        remote_bytes.append(_keys(s3_server, remote))
    first_files = _file_bytes(remote_bytes[0])
    assert first_files > 500_000
    for n in (1, 2):  # a later host sends only how its files differ: measured 0 B of packs, 2.5 KB of deltas
        assert _file_bytes(remote_bytes[n]) - _file_bytes(remote_bytes[n - 1]) < 0.05 * first_files, remote_bytes
        assert sent[n] < 0.10 * sent[0], sent  # with its own record (a delta) and catalog: measured 3.3%
    keys = remote_bytes[-1]
    held = _held_once(keys)
    assert held and max(held.values()) == 1, held.most_common(3)  # each digest's bytes once on the remote
    digests = {f.digest for store, run_id in hosts for f in store.stored_files(run_id)}
    assert digests <= set(held)
    assert not any(k.startswith("locks/") for k in keys)  # the pushes' locks and turns are gone
    _pulled_byte_for_byte(cli, hosts, tmp_path)
    store, run_id = hosts[2]  # read without pulling: the mirror fetches another host's pack and checks it
    for stage in ("before", "after"):
        ref = f"{run_id}/jit_train_step"
        mirrored = cli("cat", ref, "--remote", "team", "--stage", stage)
        assert mirrored.exit_code == 0 and mirrored.stdout == cli("cat", ref, "--store", store.root, "--stage", stage).stdout

    # gc reads the runs' references to other hosts' packs: keeping only the newest run keeps the packs it names
    applied = cli("gc", "--remote", "team", "--keep", "1", "--apply", "--json")
    assert applied.exit_code == 0 and json.loads(applied.stdout)["runs"] == sorted(r for _s, r in hosts[:2]), applied.output
    _pulled_byte_for_byte(cli, hosts[2:], tmp_path / "after-gc")


@pytest.mark.slow
def test_hosts_pushing_the_same_new_files_at_once_store_them_once(hosts, remote, s3_server, cli, tmp_path):
    env = {**os.environ}
    argv = [sys.executable, "-m", "xlarun", "push", "--remote", "team", "--json"]
    procs = [
        subprocess.Popen([*argv, run_id, "--store", str(store.root)], stdout=subprocess.PIPE, env=env) for store, run_id in hosts
    ]
    answers = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert sorted(r for a in answers for r in a["runs"]) == sorted(r for _s, r in hosts), answers
    sent = sorted(a["bytes"] for a in answers)
    assert sent[1] < 0.10 * sent[2], sent  # one host sent the files, the others took their turn after it
    keys = _keys(s3_server, remote)
    held = _held_once(keys)
    assert max(held.values()) == 1, held.most_common(3)
    assert not any(k.startswith("locks/") for k in keys)
    _pulled_byte_for_byte(cli, hosts, tmp_path)


@pytest.mark.slow
def test_a_turn_left_by_a_killed_push_of_this_host_is_taken_over_at_once(hosts, remote, s3_server, cli):
    import hashlib
    import socket
    import time

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store, run_id = hosts[0]
    turn = f"{remote}/locks/turn-{hashlib.sha256(b'jax-mlp').hexdigest()[:16]}.json"
    body = json.dumps({"host": socket.gethostname(), "pid": dead.pid, "id": "killed"}).encode()
    _client(s3_server).put_object(Bucket=BUCKET, Key=turn, Body=body)
    started = time.monotonic()
    pushed = cli("push", run_id, "--remote", "team", "--store", store.root, "--json")
    assert pushed.exit_code == 0 and json.loads(pushed.stdout)["runs"] == [run_id], pushed.output
    assert time.monotonic() - started < 30  # not the minute a turn held by a live push is waited for
    assert not any(k.startswith("locks/") for k in _keys(s3_server, remote))
