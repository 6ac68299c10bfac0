"""``xlarun bundle``: a real capture's main module as a bug-report zip, replayed elsewhere by another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bundled(jax_run, tmp_path_factory):
    """jit_train_step of the bundled example, bundled with its paths redacted: (zip path, CLI JSON result)."""
    from typer.testing import CliRunner

    from xlarun.cli import app

    store, _result = jax_run
    out = tmp_path_factory.mktemp("bundle") / "train_step.zip"
    result = CliRunner().invoke(
        app, ["bundle", "jit_train_step", "-o", str(out), "--redact-paths", "--store", str(store.root), "--json"]
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def _xlarun(*args: str, store: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLARUN_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "xlarun", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_bundle_holds_the_files_a_bug_report_needs(bundled):
    path, result = bundled
    names = set(zipfile.ZipFile(path).namelist())
    dumps = {n for n in names if n.startswith("dump/")}
    for suffix in (
        "before_optimizations.txt",
        "before_optimizations.hlo.pb",
        "cpu_after_optimizations.txt",
        "cpu_after_optimizations.hlo.pb",
        "cpu_after_optimizations-buffer-assignment.txt",
        "cpu_after_optimizations-memory-usage-report.txt",
        "debug_options",
    ):
        assert f"dump/module_0012.jit_train_step.{suffix}" in dumps or any(
            n.endswith(f"jit_train_step.{suffix}") for n in dumps
        ), suffix
    snapshots = [n for n in dumps if ".snapshot." in n]
    assert len(snapshots) == 1
    assert all("jit_train_step" in n for n in dumps)  # only the one module
    assert {"README.md", "_xlarun/bundle.json", "_xlarun/manifest.json", "_xlarun/spec.yaml"} <= names
    assert not any(n.startswith("sources/") for n in names)  # off by default
    assert result["zip_bytes"] == path.stat().st_size
    assert result["warnings"] == []


def test_bundle_readme_says_what_each_file_is_and_how_to_reproduce(bundled):
    path, _result = bundled
    archive = zipfile.ZipFile(path)
    readme = archive.read("README.md").decode()
    for name in archive.namelist():
        if name != "README.md":
            assert f"`{name}`" in readme, name
    assert f"xlarun replay {path.name}" in readme
    snapshot = next(n for n in archive.namelist() if ".snapshot." in n)
    lines = readme.splitlines()
    snapshot_line = next(line for line in lines if line.startswith("run_hlo_module") and snapshot in line)
    assert snapshot_line.startswith(
        "run_hlo_module --platform=CPU --reference_platform= --input_format=pb --iterations=1 --abs_error_bound=0.001 "
        "--rel_error_bound=0.001 --run_test_hlo_passes=false "
    )
    assert snapshot_line.endswith(f"{snapshot}   # the snapshot's real arguments")
    assert (
        f"hlo_runner_main --device_type=host --input_format=snapshot_proto_binary --num_repeats=3 --run_xla_backend_only=true {snapshot}"
        in readme
    )
    assert "--run_xla_backend_only=true dump/" in readme  # the optimized text
    assert "`--profile_execution=true` on the `hlo_runner_main` lines: XLA of jaxlib 0.5.3 and later define it" in readme
    assert "jax 0.10.2" in readme or "jax " in readme
    assert "--xla_dump_hlo_snapshots" in readme
    assert "--with-sources" in readme and "may be private" in readme


def test_redact_paths_leaves_no_home_or_work_folder_in_any_file(bundled):
    path, _result = bundled
    archive = zipfile.ZipFile(path)
    for folder in {str(Path.home()), str(REPO)}:
        for name in archive.namelist():
            assert folder.encode() not in archive.read(name), f"{folder} in {name}"
    manifest = json.loads(archive.read("_xlarun/manifest.json"))
    assert any("/REDACTED-" in arg for arg in manifest["command"])


def test_bundle_replays_in_a_fresh_store_in_another_process(bundled, tmp_path):
    path, _result = bundled
    replayed = _xlarun("replay", str(path), "--json", store=tmp_path / "fresh", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    verdict = json.loads(replayed.stdout)
    assert verdict["verdict"] == "match" and verdict["arguments"] == "snapshot"
    assert verdict["max_abs_error"] == 0
    assert verdict["module"] == str(path)  # what the user gave, not the temporary store's run
    assert not (tmp_path / "fresh").exists()  # replayed without importing
    shown = _xlarun("show", str(path), "--json", store=tmp_path / "fresh", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert (document["name"], document["bundle"], document["run_id"]) == ("jit_train_step", str(path), None)
    text = _xlarun("show", str(path), store=tmp_path / "fresh", cwd=tmp_path).stdout.splitlines()
    assert text[0] == f"module_0012.jit_train_step in bundle {path}"
    assert text[1].split() == ["ref", str(path)]
    printed = _xlarun("cat", str(path), store=tmp_path / "fresh", cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout.startswith("HloModule jit_train_step")
    assert printed.stderr.startswith(f"# {path}/")


def test_unzipped_bundle_imports_and_replays_in_another_process(bundled, tmp_path):
    path, _result = bundled
    unzipped = tmp_path / "unzipped"
    zipfile.ZipFile(path).extractall(unzipped)
    store = tmp_path / "other-store"
    imported = _xlarun("import", str(unzipped), "--json", store=store, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    result = json.loads(imported.stdout)
    assert result["source_kind"] == "bundle" and result["bundle_module_id"] == 12
    assert [m["name"] for m in result["modules"]] == ["jit_train_step"]
    manifest = json.loads((store / "runs" / result["run_id"] / "manifest.json").read_text())
    assert manifest["kind"] == "import" and manifest["name"] == "jax-mlp" and manifest["versions"]["jax"]
    replayed = _xlarun("replay", "jit_train_step", "--json", store=store, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["verdict"] == "match"


def test_bundle_options_snapshot_sources_and_size_warning(jax_run, tmp_path, monkeypatch):
    from xlarun.navigate.refs import resolve_module
    from xlarun.share import bundle as bundle_module
    from xlarun.share.bundle import BundleOptions, make_bundle

    store, _result = jax_run
    module = resolve_module(store.index, "jit_train_step")
    monkeypatch.setattr(bundle_module, "WARN_BYTES", 1000)
    result = make_bundle(store, module, tmp_path / "b.zip", BundleOptions(snapshot=False, with_sources=True))
    names = zipfile.ZipFile(result.path).namelist()
    assert not any(".snapshot." in n for n in names)
    assert any(n.endswith("examples/jax_mlp.py") and n.startswith("sources/") for n in names)
    assert len(result.warnings) == 1 and "over the 25 MB" in result.warnings[0] and "protos" in result.warnings[0]
    readme = zipfile.ZipFile(result.path).read("README.md").decode()
    assert "--no-snapshot" in readme


def test_redact_manifest_hides_secret_variables():
    from xlarun.share.bundle import redact_manifest

    redacted = redact_manifest(
        {"env_delta": {"HF_TOKEN": "hf_abc", "XLA_FLAGS": "--x", "PIP_INDEX_URL": "https://me:pw@host/simple"}}
    )
    assert redacted["env_delta"] == {"HF_TOKEN": "***", "XLA_FLAGS": "--x", "PIP_INDEX_URL": "https://me:***@host/simple"}


def test_bundle_of_a_path_not_zip_is_a_usage_error(jax_run, cli, tmp_path):
    store, _result = jax_run
    result = cli("bundle", "jit_train_step", "-o", tmp_path / "b.tar", "--store", store.root)
    assert result.exit_code == 2 and "does not end in .zip" in result.stderr


def test_pick_bundle_files_takes_passes_only_when_asked():
    from xlarun.share.bundle import BundleOptions, pick_bundle_files
    from xlarun.store.rows import FileInfo, ModuleInfo

    def file(path, kind, fmt=None, stage=None, size=10, step=None):
        return FileInfo(path, "d" + path, size, kind, fmt, stage, step, None, "pass" if kind == "pass" else None, None)

    files = [
        file("m.before_optimizations.txt", "hlo", "text", "before_optimizations"),
        file("m.before_optimizations.dot", "hlo", "dot", "before_optimizations"),
        file("m.sm_8.0_gpu_after_optimizations.txt", "hlo", "text", "after_optimizations"),
        file("m.0001.p.after_a.before_b.txt", "pass", "text", "pass", step=1),
        file("m.snapshot.1.pb", "snapshot", size=50),
        file("m.snapshot.2.pb", "snapshot", size=5),
        file("m.ir-no-opt.ll", "codegen"),
    ]
    module = ModuleInfo("r", 1, "m", "gpu", [], 1, len(files), 1, 1, 0, {}, {}, None, None, 0, False, None, files=files)
    picked, notes = pick_bundle_files(module, BundleOptions())
    assert [f.path for f in picked] == ["m.before_optimizations.txt", "m.sm_8.0_gpu_after_optimizations.txt", "m.snapshot.2.pb"]
    picked, _ = pick_bundle_files(module, BundleOptions(passes=True, snapshot_limit_bytes=1))
    assert "m.0001.p.after_a.before_b.txt" in [f.path for f in picked] and not any("snapshot" in f.path for f in picked)
    _, notes = pick_bundle_files(module, BundleOptions(snapshot_limit_bytes=1))
    assert any("over the snapshot limit" in n for n in notes)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_the_bundle_lines_are_the_lines_replay_runs(tmp_path, backend):
    """Each runner line of a bundle's README is the argv replay runs with the same options (one builder)."""
    import shlex

    from tests.test_replay_drivers import AFTER_TXT, BEFORE_TXT, SNAPSHOT, make_runner, recorded_argv
    from xlarun.replay.drivers import run_runner
    from xlarun.replay.options import ReplayOptions
    from xlarun.share.bundle import runner_lines

    lines, left_out = runner_lines(backend, SNAPSHOT, BEFORE_TXT, AFTER_TXT, [])
    asked = [
        ("run_hlo_module", SNAPSHOT, ReplayOptions(platform=backend)),
        ("run_hlo_module", BEFORE_TXT, ReplayOptions(platform=backend, reference_platform="interpreter")),
        ("hlo_runner_main", SNAPSHOT, ReplayOptions(platform=backend, iterations=3)),
        ("hlo_runner_main", BEFORE_TXT, ReplayOptions(platform=backend, iterations=3)),
        ("hlo_runner_main", AFTER_TXT, ReplayOptions(platform=backend)),
    ]
    assert len(lines) == len(asked)
    for line, (runner, path, options) in zip(lines, asked, strict=True):
        folder = tmp_path / f"{runner}-{Path(path).name}"
        folder.mkdir()
        options.runner_path = str(make_runner(folder, runner))  # its --help lists no flag, like an unknown build
        result = run_runner(runner, path, options)
        replayed = recorded_argv(folder)
        assert replayed == result.command and replayed[-1] == path
        assert shlex.split(line.split("   # ")[0]) == [runner, *replayed[1:]]
    assert left_out == [
        "`--profile_execution=true` on the `hlo_runner_main` lines: XLA of jaxlib 0.5.3 and later define it"
        " (older builds take it for a file name); add it when `hlo_runner_main --help` lists it"
    ]


def test_the_bundle_lines_carry_the_runs_xla_flags_and_fall_back_to_cpu():
    from xlarun.share.bundle import runner_lines

    lines, _ = runner_lines("tpu", None, "dump/m.before_optimizations.txt", None, ["--xla_cpu_enable_fast_math=false"])
    assert lines[0].startswith("run_hlo_module --platform=CPU --reference_platform=Interpreter ")
    assert all(line.endswith("--xla_cpu_enable_fast_math=false dump/m.before_optimizations.txt") for line in lines)
    assert [line.split()[0] for line in lines] == ["run_hlo_module", "hlo_runner_main"]


def test_a_run_spec_is_read_back_for_redaction_within_the_readers_bounds(tmp_path):
    import os

    from xlarun.share.bundle import _read_spec

    (tmp_path / "spec.yaml").write_text("name: t\nscript: j.py\nenv: {HF_TOKEN: abc, N: '1'}\n")
    assert _read_spec(tmp_path).decode().splitlines()[-3:] == ["env:", "  HF_TOKEN: '***'", "  N: '1'"]
    bomb = "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 9) + "]\n" for i in range(9))
    (tmp_path / "spec.yaml").write_text(bomb)  # a spec replaced in the run folder after the capture read it
    assert _read_spec(tmp_path) == b"# the spec could not be read back to redact it, so it is left out\n"
    (tmp_path / "spec.yaml").unlink()
    os.mkfifo(tmp_path / "spec.yaml")
    assert _read_spec(tmp_path) == b""  # not a regular file: nothing to read, and no wait for a writer
