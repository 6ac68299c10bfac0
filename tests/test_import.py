"""``xlarun import``: real raw dumps made by JAX outside xlarun, their archives, and a hostile corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from .hostile_archives import make_hostile_corpus

PROGRAM = """
import jax, jax.numpy as jnp

@jax.jit
def mlp_step(w, x):
    return jnp.tanh(x @ w).sum()

print(mlp_step(jnp.ones((8, 8)), jnp.ones((4, 8))))
"""


@pytest.fixture(scope="module")
def raw_dump(tmp_path_factory) -> Path:
    """A dump folder written by a JAX run with XLA_FLAGS, outside xlarun (text, proto and snapshots)."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("raw")
    (folder / "prog.py").write_text(PROGRAM)
    dump = folder / "xla_dump"
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text --xla_dump_hlo_as_proto --xla_dump_hlo_snapshots",
        "JAX_PLATFORMS": "cpu",
    }
    subprocess.run([sys.executable, str(folder / "prog.py")], env=env, check=True, capture_output=True, timeout=300)
    assert any(p.name.endswith("jit_mlp_step.before_optimizations.txt") for p in dump.iterdir())
    return dump


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.slow
def test_import_raw_dump_folder_then_navigate_and_replay(raw_dump, store_path, cli):
    before = _tree(raw_dump)
    result = cli("import", raw_dump, "--store", store_path, "--json")
    assert result.exit_code == 0, result.output
    imported = json.loads(result.stdout)
    assert imported["source_kind"] == "folder"
    assert imported["modules"][0]["name"] == "jit_mlp_step"  # the main program first
    assert imported["modules"][0]["entry_signature"] == "(f32[8,8], f32[4,8]) -> f32[]"
    assert imported["files"] == sum(1 for p in raw_dump.rglob("*") if p.is_file())
    assert _tree(raw_dump) == before  # the source is left as it was
    run_id = imported["run_id"]

    runs = json.loads(cli("runs", "--store", store_path, "--json").stdout)
    assert [(r["run_id"], r["kind"], r["name"]) for r in runs] == [(run_id, "import", "xla_dump")]
    manifest = json.loads((store_path / "runs" / run_id / "manifest.json").read_text())
    assert manifest["imported_from"]["path"] == str(raw_dump)
    assert manifest["imported_from"]["kind"] == "folder"
    assert manifest["framework"] == "jax"
    assert f"--xla_dump_to={raw_dump}" in manifest["xla_flags"]  # read back from debug_options

    shown = cli("show", "jit_mlp_step", "--store", store_path, "--json")
    module = json.loads(shown.stdout)
    assert module["opcodes_before"]["tanh"] == 1 and module["opcodes_before"]["dot"] == 1
    assert {"before_optimizations", "cpu_after_optimizations"} <= set(module["stages"])
    found = cli("find", "tanh", "--opcode", "--store", store_path, "--json")
    assert [h["module_name"] for h in json.loads(found.stdout)] == ["jit_mlp_step"]

    replayed = cli("replay", "jit_mlp_step", "--store", store_path, "--json")
    assert replayed.exit_code == 0, replayed.output
    verdict = json.loads(replayed.stdout)
    assert verdict["verdict"] == "match" and verdict["arguments"] == "snapshot"


@pytest.mark.slow
def test_import_tar_gz_of_a_raw_dump_matches_the_folder(raw_dump, tmp_path, store_path, cli):
    archive = tmp_path / "ci-artifact.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(raw_dump, arcname="xla_dump")  # one folder at the top, as people archive them
    folder = json.loads(cli("import", raw_dump, "--store", store_path, "--json").stdout)
    packed = json.loads(cli("import", archive, "--store", store_path, "--json").stdout)
    assert packed["source_kind"] == "tar.gz"
    assert packed["files"] == folder["files"]
    fingerprints = lambda r: {(m["name"], m["module_id"]): m["fingerprint"] for m in r["modules"]}
    assert fingerprints(packed) == fingerprints(folder)
    runs = json.loads(cli("runs", "--store", store_path, "--json").stdout)
    assert runs[-1]["name"] == "ci-artifact"
    diff = cli("diff", f"{folder['run_id']}/jit_mlp_step", f"{packed['run_id']}/jit_mlp_step", "--summary", "--store", store_path)
    assert diff.exit_code == 0, diff.output


def test_import_zip_and_tar_zst(raw_dump, tmp_path, store_path, cli):
    import zipfile

    import zstandard

    zipped = tmp_path / "dump.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(raw_dump.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(raw_dump).as_posix())
    tar_zst = tmp_path / "dump.tar.zst"
    with (
        open(tar_zst, "wb") as out,
        zstandard.ZstdCompressor().stream_writer(out) as writer,
        tarfile.open(fileobj=writer, mode="w|") as tar,
    ):
        tar.add(raw_dump, arcname=".")
    for source, kind in ((zipped, "zip"), (tar_zst, "tar.zst")):
        result = cli("import", source, "--store", store_path, "--json")
        assert result.exit_code == 0, result.output
        imported = json.loads(result.stdout)
        assert imported["source_kind"] == kind
        assert imported["modules"][0]["name"] == "jit_mlp_step"


def test_import_refuses_a_missing_or_unknown_source(tmp_path, store_path, cli):
    result = cli("import", tmp_path / "nope", "--store", store_path)
    assert result.exit_code == 2 and "no such file or folder" in result.stderr
    (tmp_path / "notes.txt").write_text("hi")
    result = cli("import", tmp_path / "notes.txt", "--store", store_path)
    assert result.exit_code == 2 and "not a folder or a known archive" in result.stderr
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    result = cli("import", tmp_path / "broken.zip", "--store", store_path)
    assert result.exit_code == 2 and "cannot read broken.zip" in result.stderr


def test_import_refuses_a_folder_with_a_symlink(tmp_path, store_path, cli):
    folder = tmp_path / "dump"
    folder.mkdir()
    (folder / "module_0000.jit_f.before_optimizations.txt").write_text("HloModule m\n")
    (folder / "secrets").symlink_to("/etc/passwd")
    result = cli("import", folder, "--store", store_path)
    assert result.exit_code == 2
    assert "'secrets': symbolic link" in result.stderr


# --- the hostile corpus ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, raw_dump):
    """The corpus, an 'outside' folder a successful attack would write into, and a store holding one sound run."""
    root = tmp_path_factory.mktemp("hostile")
    outside = root / "outside"
    outside.mkdir()
    cases = make_hostile_corpus(root / "corpus", outside / "pwned.txt")
    store = root / "store"
    from xlarun.share.import_dump import import_dump
    from xlarun.store.facade import LocalStore

    import_dump(raw_dump, LocalStore.open(store))
    return cases, outside, store


@pytest.mark.slow
def test_hostile_corpus_is_big_enough(hostile):
    cases, _outside, _store = hostile
    assert len(cases) >= 20
    kinds = {c.name.split(".", 1)[1] for c in cases}
    assert {"zip", "tar.gz", "tgz", "tar.zst"} <= kinds


@pytest.mark.slow
def test_every_hostile_archive_is_refused_and_nothing_escapes(hostile, cli, tmp_path, monkeypatch):
    cases, outside, store = hostile
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    runs_before = sorted(os.listdir(store / "runs"))
    refused = []
    for case in cases:
        result = cli("import", case.path, "--store", store, *case.options)
        assert result.exit_code == 2, f"{case.name}: {result.output}"
        line = result.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, f"{case.name}: {result.stderr}"
        assert case.why in line, f"{case.name}: {line}"
        refused.append(case.name)
        assert list(outside.iterdir()) == [], f"{case.name} wrote outside the store"
        assert list(work.iterdir()) == [], f"{case.name} wrote into the working folder"
        assert [p for p in (store / "staging").iterdir() if not p.name.startswith(".trash-")] == [], (
            f"{case.name} left staging behind"
        )
    assert len(refused) == len(cases)
    assert sorted(os.listdir(store / "runs")) == runs_before  # no run was added
    check = cli("check", "--store", store, "--json")
    assert check.exit_code == 0, check.output
    assert json.loads(check.stdout)["damaged"] == []


def test_import_an_xlarun_export_keeps_the_original_manifest(jax_run, tmp_path, store_path, cli):
    store, captured = jax_run
    exported = tmp_path / "exported"
    store.export(captured.run_id, exported)
    result = cli("import", exported, "--store", store_path, "--json")
    assert result.exit_code == 0, result.output
    imported = json.loads(result.stdout)
    assert imported["source_kind"] == "folder" and imported["files"] == captured.manifest.files
    assert [m["name"] for m in imported["modules"]] == [m.name for m in captured.modules]
    assert [m["fingerprint"] for m in imported["modules"]] == [m.fingerprint for m in captured.modules]
    run_dir = store_path / "runs" / imported["run_id"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["kind"] == "import" and manifest["name"] == "jax-mlp"
    assert manifest["imported_from"]["original_run_id"] == captured.run_id
    assert manifest["versions"]["jax"] == captured.manifest.versions["jax"]
    assert manifest["xla_flags"] == captured.manifest.xla_flags
    assert (run_dir / "origin-manifest.json").is_file() and (run_dir / "spec.yaml").is_file()
    assert "_xlarun/manifest.json" not in {f["path"] for f in json.loads((run_dir / "files.json").read_text())}
    report = cli("report", imported["run_id"], "-o", tmp_path / "report", "--store", store_path)
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "index.html").is_file()


HOST_PROGRAM = """
import sys
import jax, jax.numpy as jnp

@jax.jit
def mlp_step(w, x):
    h = x @ w
    return (jnp.sin(h) if sys.argv[1] == "other" else jnp.tanh(h)).sum()

@jax.jit
def scale(x):
    return x * 3.0

print(mlp_step(jnp.ones((8, 8)), scale(jnp.ones((4, 8)))))
"""


@pytest.fixture(scope="module")
def per_host_dumps(tmp_path_factory) -> Path:
    """hosts/host0 and hosts/host1, each the dump of one JAX process (host1's step compiled other HLO: a desync)."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("hosts")
    (folder / "prog.py").write_text(HOST_PROGRAM)
    for host, variant in (("host0", "same"), ("host1", "other")):
        env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={folder / 'hosts' / host}", "JAX_PLATFORMS": "cpu"}
        subprocess.run([sys.executable, str(folder / "prog.py"), variant], env=env, check=True, capture_output=True, timeout=300)
    return folder / "hosts"


@pytest.mark.slow
def test_import_of_per_host_folders_is_one_run_of_processes_with_the_desync_found(per_host_dumps, store_path, cli):
    out = cli("import", per_host_dumps, "--store", store_path)
    assert out.exit_code == 0, out.output
    assert "per-host folders as processes: host0/ -> process 0, host1/ -> process 1" in out.stdout
    found = json.loads(cli("modules", "--store", store_path, "--json").stdout)
    by_process = {(m["process"], m["name"]): m["module_id"] for m in found["modules"]}
    assert {p for p, _name in by_process} == {0, 1}
    assert by_process[(1, "jit_mlp_step")] == by_process[(0, "jit_mlp_step")] + 1_000_000
    processes = found["processes"]
    assert [m["name"] for m in processes["desync"]] == ["jit_mlp_step"]
    assert "jit_scale" in [m["name"] for m in processes["identical"]]
    files = json.loads(cli("files", "--store", store_path, "--json").stdout)["files"]
    assert {f["path"].split("/")[0] for f in files} == {"process-0", "process-1"}
    manifest = json.loads(next(store_path.glob("runs/*/manifest.json")).read_text())
    assert manifest["imported_from"]["processes"] == {"process-0": "host0", "process-1": "host1"}


def test_per_host_folders_are_numbered_by_their_names_and_only_when_nothing_else_is_a_dump(tmp_path):
    from xlarun.share.import_dump import per_host_folders

    for host in ("host2", "host10", "host0"):
        (tmp_path / host).mkdir()
        (tmp_path / host / "module_0001.jit_f.before_optimizations.txt").write_text("HloModule f")
    (tmp_path / "module_0003.jit_g").mkdir()  # a PJRT compile-input folder: not a host
    (tmp_path / "module_0003.jit_g" / "module_0001.jit_f.before_optimizations.txt").write_text("HloModule f")
    (tmp_path / "notes").mkdir()  # no dump in it: not a host
    assert per_host_folders(tmp_path) == {"host0": 0, "host2": 1, "host10": 2}
    (tmp_path / "module_0004.jit_h.before_optimizations.txt").write_text("HloModule h")
    assert per_host_folders(tmp_path) == {}  # a dump at the top: one process's, with folders beside it
