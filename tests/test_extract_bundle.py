"""xlarun bundle FILE: what `xlarun extract` wrote, or any HLO text with a snapshot beside it,
becomes a bug-report bundle of a few kilobytes that replays to the value the run computed."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.test_bisect_first_move import TEXT  # a small module: parameter, broadcast, divide, reduce
from xlarun.errors import InputError
from xlarun.share.extract_bundle import is_module_file, module_files


def test_a_module_file_is_told_from_a_ref_by_its_name_and_its_existence(tmp_path):
    (tmp_path / "f.hlo.txt").write_text(TEXT)
    assert is_module_file(str(tmp_path / "f.hlo.txt"))
    assert not is_module_file(str(tmp_path / "g.hlo.txt"))  # no such file: a module REF (and refused as one)
    assert not is_module_file("jit_train_step") and not is_module_file("module_0006")
    found = module_files(tmp_path / "f.hlo.txt")
    assert (found.module_name, found.root, found.snapshot, found.stem) == ("jit_f", "sum", None, tmp_path / "f")


def test_a_file_that_is_not_hlo_text_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.hlo.txt").write_text("these are my notes\n")
    with pytest.raises(InputError, match=r"is not HLO text \(no 'HloModule' line\)"):
        module_files(tmp_path / "notes.hlo.txt")


def test_hlo_text_alone_is_bundled_and_the_readme_says_replays_run_on_generated_arguments(cli, tmp_path):
    (tmp_path / "f.hlo.txt").write_text(TEXT)
    result = cli("bundle", tmp_path / "f.hlo.txt", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["path"] == str(tmp_path / "f.bundle.zip")  # beside the file, named for its stem
    with zipfile.ZipFile(data["path"]) as archive:
        names = archive.namelist()
        readme = archive.read("README.md").decode()
        kept = archive.read("dump/module_0000.jit_f.before_optimizations.txt").decode()
    assert kept == TEXT and not [n for n in names if "snapshot" in n]
    assert "made from `f.hlo.txt`" in readme and "No snapshot was given: replays run on generated arguments" in readme
    assert "run_hlo_module" in readme  # XLA's runner lines for the text
    assert "Entry signature: `(f32[4]) -> f32[]`; 9 instructions before optimizations, no optimized dump." in readme


def test_bad_uses_are_refused_with_a_hint(cli, tmp_path):
    (tmp_path / "notes.hlo.txt").write_text("these are my notes\n")
    refused = cli("bundle", tmp_path / "notes.hlo.txt", "--json")
    assert refused.exit_code == 2 and "is not HLO text" in json.loads(refused.stdout)["error"]
    (tmp_path / "f.hlo.txt").write_text(TEXT)
    with_run = cli("bundle", tmp_path / "f.hlo.txt", "--run", "latest")
    assert with_run.exit_code == 2 and "--run names a run of the store" in with_run.stderr
    assert not (tmp_path / "f.bundle.zip").exists()
    missing = cli("bundle", tmp_path / "gone.snapshot.pb", "--json", "--store", tmp_path / "s")
    assert missing.exit_code == 2 and json.loads(missing.stdout)["error"] == f"{tmp_path / 'gone.snapshot.pb'}: no such file"


@pytest.mark.slow
def test_an_extract_bundles_in_kilobytes_and_its_bundle_replays_to_the_run_value(cli, bisect_store, tmp_path):
    stem = tmp_path / "repro" / "mul2"
    made = cli("extract", "residual", "mul.2", "-o", stem, "--json", "--store", bisect_store)
    assert made.exit_code == 0, made.stderr
    bundled = cli("bundle", f"{stem}.snapshot.pb", "-o", tmp_path / "bug.zip", "--json")
    assert bundled.exit_code == 0, bundled.stderr
    data = json.loads(bundled.stdout)
    assert data["zip_bytes"] < 40_000  # 4,096 floats in, 4,096 out, deflated
    paths = {e["path"] for e in data["entries"]}
    assert {
        "dump/module_0000.extract_mul_2.before_optimizations.txt",
        "dump/module_0000.extract_mul_2.snapshot.0.pb",
    } <= paths
    with zipfile.ZipFile(tmp_path / "bug.zip") as archive:
        readme = archive.read("README.md").decode()
    assert "A standalone module of one instruction, `mul.2`, made from `mul2.hlo.txt`, `mul2.snapshot.pb`" in readme
    # the receiver: no store of theirs holds it, the bundle replays against the instruction's value
    replayed = json.loads(cli("replay", tmp_path / "bug.zip", "--json", "--store", tmp_path / "theirs").stdout)
    assert (replayed["verdict"], replayed["compared_with"], replayed["max_abs_error"]) == ("match", ["snapshot result"], 0)
    assert replayed["arguments"] == "snapshot"
    # the text names the same extract: bundling it gives the same module
    again = json.loads(cli("bundle", f"{stem}.hlo.txt", "-o", tmp_path / "again.zip", "--json").stdout)
    assert paths == {e["path"] for e in again["entries"]}


@pytest.mark.slow
def test_an_extract_bundle_names_the_culprit_pass_the_versions_and_host_and_how_to_see_the_divergence(
    cli, bisect_store, tmp_path
):
    import shutil

    store = tmp_path / "store"
    shutil.copytree(bisect_store, store)  # the bisection is recorded with the run: not in the session's store
    bisected = cli("bisect", "residual", "--json", "--store", store)
    assert bisected.exit_code == 1 and json.loads(bisected.stdout)["culprit_pass"] == "algsimp"
    made = cli("extract", "residual", "mul.2", "--step", "6", "-k", "0", "-o", tmp_path / "s6", "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    origin = json.loads((tmp_path / "s6.extract.json").read_text())
    assert (origin["step"], origin["after_pass"], origin["culprit"]["pass"]) == (6, "algsimp", "algsimp")
    bundled = cli("bundle", tmp_path / "s6.snapshot.pb", "-o", tmp_path / "bug.zip", "--json")
    assert bundled.exit_code == 0, bundled.stderr
    with zipfile.ZipFile(tmp_path / "bug.zip") as archive:
        readme = archive.read("README.md").decode()
    manifest = json.loads((store / "runs" / origin["run_id"] / "manifest.json").read_text())
    assert f"- versions: xlarun {manifest['versions']['xlarun']}" in readme and f"jax {manifest['versions']['jax']}" in readme
    assert f"- host: {manifest['host']['platform']}" in readme and "not recorded" not in readme and "host: ?" not in readme
    assert f"cut from `{origin['module']}` of run `{origin['run_id']}`" in readme and "pass step 6 (after algsimp" in readme
    assert "Culprit: pass `algsimp` at step 6, named by bisection" in readme
    assert f"xlarun extract {origin['module']} mul.2 --step 5" in readme and "--xla_disable_hlo_passes=algsimp" in readme
    assert "a replay that does not match shows the divergence" not in readme  # the recorded value is the step's own


@pytest.mark.parametrize(
    ("step", "culprit", "says", "never"),
    [
        (5, {"pass": "algsimp", "step": 6}, "xlarun extract RUN/module_0006 sum --step 6`", "--step 4"),  # the other side
        (6, {"pass": "algsimp", "step": 6}, "xlarun extract RUN/module_0006 sum --step 5`", "--step 6`"),
        (
            None,
            {"pass": "float-normalization-bf16", "step": 5, "kept": True, "switch": "xla_allow_excess_precision=false"},
            "`run_hlo_module --platform=cpu --input_format=hlo --xla_allow_excess_precision=false f.hlo.txt` against",
            "--xla_disable_hlo_passes",  # the module does not compile without the pass: disabling it shows nothing
        ),
    ],
)
def test_the_readme_says_how_to_see_the_culprit_divergence_from_the_side_of_the_pass_the_extract_is_not(
    cli, tmp_path, step, culprit, says, never
):
    (tmp_path / "f.hlo.txt").write_text(TEXT)
    origin = {"run_id": "RUN", "module": "RUN/module_0006", "step": step, "culprit": culprit | {"bisect_id": "B"}}
    (tmp_path / "f.extract.json").write_text(json.dumps(origin))
    result = cli("bundle", tmp_path / "f.hlo.txt", "--json")
    assert result.exit_code == 0, result.stderr
    with zipfile.ZipFile(json.loads(result.stdout)["path"]) as archive:
        readme = " ".join(archive.read("README.md").decode().split())
    assert f"Culprit: pass `{culprit['pass']}` at step {culprit['step']}, named by bisection `B`" in readme
    assert says in readme and never not in readme
