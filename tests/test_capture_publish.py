"""A spec's ``remote:``: a real capture of a small JAX program pushed to the session's SeaweedFS cluster once it is
committed; a failed push keeps the run here and says how to push it; without ``remote:`` no remote code is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_spec
from tests.test_capture import TINY_JAX
from tests.test_remote import ADMIN, READER, remote, s3_server  # noqa: F401 (fixtures)

pytest.importorskip("jax")
pytest.importorskip("boto3")


def _spec(folder: Path, remote_name: str | None) -> Path:
    text = "name: tiny-pushed\nscript: job.py\n" + (f"remote: {remote_name}\n" if remote_name else "")
    return write_spec(folder, text, TINY_JAX)


def _runs_here(cli, store: Path) -> list[str]:
    return [r["run_id"] for r in json.loads(cli("runs", "--store", store, "--json").stdout)]


@pytest.mark.slow
def test_a_spec_naming_a_remote_pushes_its_run_once_committed(remote, tmp_path, cli):
    store = tmp_path / "store"
    captured = cli("capture", _spec(tmp_path / "spec", "team"), "--store", store, "--json")
    assert captured.exit_code == 0, captured.output
    answer = json.loads(captured.stdout)
    run_id = answer["run_id"]
    assert answer["push"]["remote"] == "team" and answer["push"]["pushed"] is True and answer["push"]["error"] is None
    assert answer["push"]["bytes"] > 1000
    [listed] = json.loads(cli("runs", "--remote", "team", "--json").stdout)
    assert listed["run"] == run_id and listed["name"] == "tiny-pushed" and listed["status"] == "succeeded"
    pulled = cli("pull", run_id, "--remote", "team", "--store", tmp_path / "other", "--json")
    assert pulled.exit_code == 0, pulled.output
    main = answer["modules"][0]["name"]
    here, there = (cli("cat", f"{run_id}/{main}", "--store", s) for s in (store, tmp_path / "other"))
    assert here.exit_code == 0 and here.stdout == there.stdout and "tanh" in here.stdout


@pytest.mark.slow
def test_a_failed_push_keeps_the_run_here_exits_3_and_says_how_to_push_it(remote, tmp_path, cli, monkeypatch):
    store = tmp_path / "store"
    for key, value in READER.items():  # read-only credentials: the push is refused
        monkeypatch.setenv(key, value)
    captured = cli("capture", _spec(tmp_path / "spec", "team"), "--store", store, "--json")
    assert captured.exit_code == 3, captured.output
    answer = json.loads(captured.stdout)
    run_id = answer["run_id"]
    assert answer["status"] == "succeeded" and answer["push"]["pushed"] is False and answer["exit_code"] == 0
    assert "access denied" in answer["push"]["error"]
    assert f"xlarun push {run_id} --remote team" in answer["hint"] and run_id in answer["error"]
    assert _runs_here(cli, store) == [run_id]  # kept here
    assert json.loads(cli("runs", "--remote", "team", "--json").stdout) == []

    plain = cli("capture", _spec(tmp_path / "spec", "team"), "--store", store)
    assert plain.exit_code == 3 and "Traceback" not in plain.output
    assert len(plain.stderr.strip().splitlines()) <= 2 and "--remote team" in plain.stderr

    for key, value in ADMIN.items():  # the push the hint names, with write access
        monkeypatch.setenv(key, value)
    assert cli("push", run_id, "--remote", "team", "--store", store).exit_code == 0
    assert [r["run"] for r in json.loads(cli("runs", "--remote", "team", "--json").stdout)] == [run_id]


def test_a_remote_that_is_not_named_stops_the_capture_before_anything_runs(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    store = tmp_path / "store"
    refused = cli("capture", _spec(tmp_path / "spec", "nobody"), "--store", store, "--json")
    assert refused.exit_code == 2
    assert "no remote named 'nobody'" in json.loads(refused.stdout)["error"]
    assert _runs_here(cli, store) == []


@pytest.mark.slow
def test_a_capture_without_a_remote_loads_no_remote_code_and_one_with_it_does(remote, tmp_path):
    probe = (
        "import json, sys\n"
        "from xlarun.capture.launch import capture\n"
        "from xlarun.store.facade import LocalStore\n"
        "result = capture(sys.argv[1], LocalStore.open(sys.argv[2]))\n"
        "loaded = sorted(m for m in ('boto3', 'botocore', 'xlarun.store.remote_sync') if m in sys.modules)\n"
        "print(json.dumps({'status': result.status.value, 'loaded': loaded, 'pushed': result.push and result.push.pushed}))\n"
    )
    answers = {}
    for name in (None, "team"):
        spec = _spec(tmp_path / f"spec-{name}", name)
        out = subprocess.run(
            [sys.executable, "-c", probe, str(spec), str(tmp_path / f"store-{name}")], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        answers[name] = json.loads(out.stdout.strip().splitlines()[-1])
    assert answers[None] == {"status": "succeeded", "loaded": [], "pushed": None}
    assert answers["team"]["pushed"] is True
    assert answers["team"]["loaded"] == ["boto3", "botocore", "xlarun.store.remote_sync"]


@pytest.mark.slow
def test_each_cell_of_a_batch_naming_a_remote_is_pushed(remote, tmp_path, cli):
    text = 'name: scaled\nscript: job.py\nargs: ["${matrix.scale}"]\nremote: team\nmatrix:\n  scale: ["1.0", "2.0"]\n'
    script = "import sys\n" + TINY_JAX.replace("jnp.tanh(x @ x.T)", "jnp.tanh(x @ x.T * float(sys.argv[1]))")
    spec = write_spec(tmp_path / "spec", text, script)
    done = cli("batch", spec, "-j", "2", "--store", tmp_path / "store", "--json")
    assert done.exit_code == 0, done.output
    cells = json.loads(done.stdout)["cells"]
    assert all(c["status"] == "succeeded" and c["push"]["pushed"] and c["push"]["bytes"] > 1000 for c in cells)
    on_remote = json.loads(cli("runs", "--remote", "team", "--json").stdout)
    assert sorted(r["run"] for r in on_remote) == sorted(c["run_id"] for c in cells)
