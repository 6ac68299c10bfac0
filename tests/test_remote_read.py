"""Finding in the team store without downloading it (store/remote_index.py) and reading a remote run's files on
demand (store/remote_fetch.py), against the real SeaweedFS server of tests/test_remote.py and a real JAX capture.

Every S3 call the commands make is counted by a botocore event hook on the clients xlarun makes: which operation,
which key, how many bytes came back."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.test_remote import BUCKET, _client, remote, s3_server  # noqa: F401 (fixtures)

pytest.importorskip("boto3")


class S3Calls:
    """Every S3 request of the ObjectStores made while it is installed: (operation, key below the prefix)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.calls: list[tuple[str, str]] = []
        self.got_bytes = 0

    def install(self, monkeypatch) -> S3Calls:
        from xlarun.store.remote import ObjectStore

        made = ObjectStore.__init__

        def counted(store, spec):
            made(store, spec)
            events = store.client.meta.events
            events.register("before-parameter-build.s3", self._before)
            events.register("after-call.s3.GetObject", self._after_get)

        monkeypatch.setattr(ObjectStore, "__init__", counted)
        return self

    def _before(self, params, model, **_) -> None:
        key = str(params.get("Key") or params.get("Prefix") or "")
        self.calls.append((model.name, key.removeprefix(f"{self.prefix}/")))

    def _after_get(self, parsed, **_) -> None:
        self.got_bytes += int(parsed.get("ContentLength") or 0)

    def reads_of(self, folder: str) -> list[str]:
        """Keys below ``folder`` read or looked up (GetObject, HeadObject)."""
        return [k for op, k in self.calls if op in ("GetObject", "HeadObject") and k.startswith(folder)]

    def downloads_of(self, folder: str) -> list[str]:
        """Keys below ``folder`` downloaded (GetObject)."""
        return [k for op, k in self.calls if op == "GetObject" and k.startswith(folder)]

    def clear(self) -> None:
        self.calls.clear()
        self.got_bytes = 0


@pytest.fixture
def pushed(jax_run, remote, tmp_path, monkeypatch, cli):
    """The real JAX capture pushed to a fresh remote 'team'; a private cache folder for its mirror."""
    store, captured = jax_run
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = cli("push", captured.run_id, "--remote", "team", "--store", store.root, "--json")
    assert result.exit_code == 0, result.output
    return store, captured.run_id, remote


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _pack_bytes(store, run_id: str) -> int:
    packs = {store.blobs.pack_of(f.digest) for f in store.stored_files(run_id)}
    return sum(store.blobs.pack_path(p).stat().st_size for p in packs)


@pytest.mark.slow
def test_modules_find_and_show_of_a_pushed_run_answer_without_a_pack(pushed, cli, monkeypatch):
    store, run_id, prefix = pushed
    calls = S3Calls(prefix).install(monkeypatch)
    here = ("--store", store.root)
    there = ("--remote", "team")

    remote_modules = _json(cli("modules", run_id, *there, "--json"))
    assert remote_modules == _json(cli("modules", run_id, *here, "--json"))
    assert len(remote_modules["modules"]) >= 3 and remote_modules["run_id"] == run_id
    first_sync = Counter(op for op, _ in calls.calls)
    assert calls.reads_of("packs/") == [] and first_sync["GetObject"] <= 12, calls.calls
    assert calls.got_bytes < 0.1 * _pack_bytes(store, run_id), (calls.got_bytes, _pack_bytes(store, run_id))

    calls.clear()  # mirrored now: each command lists runs/ once and reads nothing
    found = _json(cli("find", "dot", "--opcode", *there, "--json"))
    assert found == _json(cli("find", "dot", "--opcode", *here, "--json")) and found
    shown = _json(cli("show", f"{run_id}/jit_train_step", *there, "--json"))
    assert shown == _json(cli("show", f"{run_id}/jit_train_step", *here, "--json"))
    assert shown["name"] == "jit_train_step" and shown["files"]
    assert [op for op, _ in calls.calls] == ["ListObjectsV2", "ListObjectsV2"] and calls.got_bytes == 0

    import xlarun  # the Python front door gives the same, through the same mirror

    team = xlarun.open_store(remote="team")
    assert len(team.find("dot", opcode=True).hits) == len(found)
    assert [m.name for m in team.modules(run_id)] == [m["name"] for m in remote_modules["modules"]]
    assert calls.reads_of("packs/") == []


@pytest.mark.slow
def test_cat_fetches_the_pack_it_needs_once_and_a_second_cat_downloads_nothing(pushed, cli, monkeypatch):
    store, run_id, prefix = pushed
    calls = S3Calls(prefix).install(monkeypatch)
    ref = f"{run_id}/jit_train_step"
    local = cli("cat", ref, "--store", store.root)
    first = cli("cat", ref, "--remote", "team")
    assert first.exit_code == 0, first.output
    assert first.stdout == local.stdout and "HloModule" in first.stdout
    fetched = {k for k in calls.reads_of("packs/")}
    wanted = _remote_pack_of(next(f.digest for f in store.stored_files(run_id) if f.path == _before_path(cli, store, ref)))
    assert fetched == {f"packs/{wanted}.zst"}, fetched  # the one pack that holds the file, not the run's others

    calls.clear()
    again = cli("cat", ref, "--remote", "team")
    assert again.stdout == local.stdout
    assert calls.reads_of("packs/") == [] and calls.got_bytes == 0, calls.calls  # cached: nothing downloaded
    after = cli("cat", ref, "--remote", "team", "--stage", "after")
    assert after.exit_code == 0 and after.stdout == cli("cat", ref, "--store", store.root, "--stage", "after").stdout
    assert not set(calls.reads_of("packs/")) & fetched  # another pack, if any: the first is never fetched again


def _remote_pack_of(digest: str) -> str:
    """The remote pack holding a file (a push packs the files the remote lacks anew: not the local pack's name)."""
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_files import RemoteFiles

    pack = RemoteFiles.read(ObjectStore(find_remote("team"))).pack_of(digest)
    assert pack is not None
    return pack


def _before_path(cli, store, ref: str) -> str:
    shown = json.loads(cli("show", ref, "--store", store.root, "--json").stdout)
    return next(f["path"] for f in shown["files"] if f["stage"] == "before_optimizations" and f["format"] == "text")


@pytest.mark.slow
def test_a_damaged_pack_is_refused_when_read_and_nothing_of_it_is_kept(pushed, s3_server, cli, monkeypatch):
    store, run_id, prefix = pushed
    client = _client(s3_server)
    ref = f"{run_id}/jit_train_step"
    wanted = _remote_pack_of(next(f.digest for f in store.stored_files(run_id) if f.path == _before_path(cli, store, ref)))
    key = f"{prefix}/packs/{wanted}.zst"
    body = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    body[-20] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))

    damaged = cli("cat", ref, "--remote", "team")
    assert damaged.exit_code == 3 and "damaged" in damaged.stderr and wanted in damaged.stderr, damaged.output
    assert "Traceback" not in damaged.output
    from xlarun.store.remote import find_remote
    from xlarun.store.remote_index import mirror_root

    packs = mirror_root(find_remote("team")) / "blobs" / "packs"
    assert not list(packs.glob("*")), list(packs.glob("*"))  # neither the pack nor a temporary copy stays


@pytest.mark.slow
def test_replay_of_a_remote_module_gives_the_local_verdict_and_report_builds_from_the_remote(pushed, cli, tmp_path):
    store, run_id, _ = pushed
    ref = f"{run_id}/jit_train_step"
    local = _json(cli("replay", ref, "--store", store.root, "--json", "-q"))
    remote_replay = _json(cli("replay", ref, "--remote", "team", "--json", "-q"))
    assert remote_replay["verdict"] == local["verdict"] == "match", remote_replay
    assert remote_replay["source"] == local["source"]

    built = cli("report", run_id, "--remote", "team", "-o", tmp_path / "site", "-q", "--no-graphs")
    assert built.exit_code == 0, built.output
    index = json.loads((tmp_path / "site" / "index.json").read_text())
    assert index["run"]["run_id"] == run_id and len(index["modules"]) >= 3


@pytest.mark.slow
def test_bisect_of_a_remote_run_names_the_pass_a_local_bisection_names(remote, cli, tmp_path, monkeypatch):
    from tests.conftest import CONFIGS
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "store", create=True)
    captured = capture(CONFIGS / "bisect-algsimp.yaml", store)  # residual: algsimp folds (x / 3) * 3 - x to 0
    assert captured.ok, captured.warnings
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cli("push", captured.run_id, "--remote", "team", "--store", store.root).exit_code == 0
    calls = S3Calls(remote).install(monkeypatch)

    result = cli("bisect", "residual", "--remote", "team", "--json")
    assert result.exit_code == 1, result.output  # 1: a step diverged
    found = json.loads(result.stdout)
    assert found["culprit_pass"] == "algsimp" and found["culprit_pipeline"] == "simplification"
    assert found["error_after"]["max_abs_error"] > 0.1
    fetched = calls.downloads_of("packs/")
    assert fetched and len(fetched) == len(set(fetched)), fetched  # each pack it read downloaded once


@pytest.mark.slow
def test_a_run_deleted_from_the_remote_leaves_the_mirror_at_the_next_command(pushed, s3_server, cli):
    _store, run_id, prefix = pushed
    assert _json(cli("modules", run_id, "--remote", "team", "--json"))["run_id"] == run_id
    _client(s3_server).delete_object(Bucket=BUCKET, Key=f"{prefix}/runs/{run_id}.json")  # as gc --remote would
    gone = cli("modules", run_id, "--remote", "team", "--json")
    assert gone.exit_code == 2 and "no runs" in json.loads(gone.stdout)["error"], gone.output  # its only run
    from xlarun.store.remote import find_remote
    from xlarun.store.remote_index import mirror_root

    assert not (mirror_root(find_remote("team")) / "runs" / run_id).exists()


@pytest.mark.slow
def test_files_the_remote_holds_as_deltas_are_read_through_their_base_and_checked(remote, tmp_path, monkeypatch, cli):
    """A second capture pushes its changed files as deltas against the first's (and its record as a delta): reading
    them from the mirror fetches each delta and its base's pack, and gives the bytes the capture archived."""
    from pathlib import Path

    import xlarun
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    store = LocalStore.open(tmp_path / "store")
    config = Path(__file__).resolve().parents[1] / "configs" / "jax-cpu.yaml"
    first, second = (capture(config, store).run_id for _ in range(2))
    for run_id in (first, second):
        assert cli("push", run_id, "--remote", "team", "--store", store.root).exit_code == 0
    old = {f.path: f.digest for f in store.stored_files(first)}
    changed = [f for f in store.stored_files(second) if old.get(f.path) != f.digest]
    assert changed

    calls = S3Calls(remote).install(monkeypatch)
    mirror = xlarun.open_store(remote="team").store
    assert calls.downloads_of("records/") and {r.run_id for r in mirror.index.runs()} >= {first, second}
    for entry in changed:
        assert mirror.read_file(second, entry.path) == store.read_file(second, entry.path), entry.path
    deltas = calls.downloads_of("deltas/")
    assert len(deltas) == len({f.digest for f in changed})  # each changed file through its delta, once
    assert calls.downloads_of("packs/")  # and the packs holding their bases
    assert cli("check", "--store", mirror.root).exit_code == 0


def test_runs_remote_reads_each_index_object_once_and_forgets_a_run_gone_from_the_remote(pushed, s3_server, cli, monkeypatch):
    _store, run_id, prefix = pushed
    calls = S3Calls(prefix).install(monkeypatch)
    first = _json(cli("runs", "--remote", "team", "--json"))
    assert [r["run"] for r in first] == [run_id] and calls.downloads_of("runs/") == [f"runs/{run_id}.json"]
    calls.clear()
    again = _json(cli("runs", "--remote", "team", "--json"))
    assert again == first and calls.downloads_of("runs/") == []  # written once, never changed: read from the cache
    _client(s3_server).delete_object(Bucket=BUCKET, Key=f"{prefix}/runs/{run_id}.json")  # as gc --remote does
    assert _json(cli("runs", "--remote", "team", "--json")) == []


@pytest.mark.slow
def test_the_mirror_reads_a_record_many_runs_share_once_and_mirrors_every_run(remote, s3_server, tmp_path, cli, monkeypatch):
    from tests.test_remote import _imported_store
    from xlarun.store.remote import find_remote
    from xlarun.store.remote_index import mirror_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = _imported_store(cli, tmp_path / "store", times=3)  # one name: the 2nd and 3rd records go as deltas on the 1st
    assert cli("push", *runs, "--remote", "team", "--store", tmp_path / "store").exit_code == 0
    client = _client(s3_server)
    indexes = [json.loads(client.get_object(Bucket=BUCKET, Key=f"{remote}/runs/{r}.json")["Body"].read()) for r in runs]
    bases = {i.get("record_base") for i in indexes} - {None}
    assert len(bases) == 1  # every delta is against the same whole record
    calls = S3Calls(remote).install(monkeypatch)
    listed = _json(cli("modules", "--remote", "team", "--json"))
    assert listed and all(n == 1 for n in Counter(calls.downloads_of("records/")).values())
    assert f"records/{bases.pop()}.zst" in calls.downloads_of("records/")
    assert sorted(r["run_id"] for r in _json(cli("runs", "--store", mirror_root(find_remote("team")), "--json"))) == sorted(runs)
