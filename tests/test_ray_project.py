"""The project folder a Ray batch sends to its nodes (xlarun.executors.project): what a snapshot holds, where a
node runs a cell from, and what it refuses. Real folders and archives; the cluster tests are in test_batch_ray.py."""

from __future__ import annotations

import io
import os
import shutil
import tarfile

import pytest
import zstandard

from xlarun.capture.spec_yaml import load_batch
from xlarun.errors import ExitCode, InputError
from xlarun.executors.project import Project, ProjectTooBig, differences, place, project_root, snapshot, unpack

from .conftest import write_spec


def _project(tmp_path, script="print('hi')\n", spec_extra=""):
    spec = write_spec(tmp_path / "proj", f"name: p\nscript: job.py\n{spec_extra}", script)
    (tmp_path / "proj" / "helpers.py").write_text("VALUE = 3\n")
    (tmp_path / "proj" / "data").mkdir()
    (tmp_path / "proj" / "data" / "table.csv").write_text("a,b\n1,2\n")
    (loaded,) = load_batch(spec)
    return loaded


def test_a_snapshot_holds_the_project_and_leaves_out_environments_caches_and_stores(tmp_path):
    loaded = _project(tmp_path)
    root = tmp_path / "proj"
    for skipped in (".git/objects", ".venv/lib", "__pycache__", "node_modules/x"):
        (root / skipped).mkdir(parents=True)
        (root / skipped / "big.bin").write_bytes(b"\0" * 1000)
    (root / "runs-store" / "blobs").mkdir(parents=True)  # an xlarun store kept beside the spec
    (root / "runs-store" / "VERSION").write_text("4\n")
    os.mkfifo(root / "a-fifo")  # never read (it would block)
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    project = snapshot(loaded)
    assert project.root == str(root)
    assert sorted(project.files) == ["data/table.csv", "helpers.py", "job.py", "run.sh", "spec.yaml"]
    assert project.size == sum((root / rel).stat().st_size for rel in project.files)
    into = tmp_path / "copy"
    unpack(project, into)
    assert (into / "data" / "table.csv").read_text() == "a,b\n1,2\n"
    assert os.access(into / "run.sh", os.X_OK) and not os.access(into / "helpers.py", os.X_OK)
    assert differences(project) == []


def test_the_project_folder_holds_the_spec_the_script_and_the_workdir(tmp_path):
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    (tmp_path / "repo" / "scripts" / "train.py").write_text("print(1)\n")
    (tmp_path / "repo" / "configs").mkdir()
    spec = tmp_path / "repo" / "configs" / "run.yaml"
    spec.write_text("name: t\nscript: ../scripts/train.py\n")
    (loaded,) = load_batch(spec)
    assert project_root(loaded) == tmp_path / "repo"
    assert sorted(snapshot(loaded).files) == ["configs/run.yaml", "scripts/train.py"]


def test_a_project_over_the_limits_is_refused_with_what_to_do(tmp_path):
    loaded = _project(tmp_path)
    with pytest.raises(ProjectTooBig) as too_big:
        snapshot(loaded, limit_files=3)
    assert too_big.value.exit_code == ExitCode.USAGE
    assert "--ship never" in too_big.value.one_line() and str(tmp_path / "proj") in too_big.value.message
    with pytest.raises(ProjectTooBig):
        snapshot(loaded, limit_bytes=20)


def test_a_node_with_the_same_files_runs_in_place_and_one_without_runs_the_copy(tmp_path):
    loaded = _project(tmp_path, spec_extra="workdir: data\n")
    project = snapshot(loaded)
    same, placed = place(project, "auto", loaded, tmp_path / "scratch-1")
    assert same is loaded and placed["ran_from"] == "in place" and "same 4 file(s)" in placed["why"]
    assert not (tmp_path / "scratch-1").exists()

    (tmp_path / "proj" / "helpers.py").write_text("VALUE = 4\n")  # this node's checkout is behind the driver's
    moved, placed = place(project, "auto", loaded, tmp_path / "scratch-2")
    copy = tmp_path / "scratch-2" / "project"
    assert placed == {
        "ran_from": "snapshot",
        "why": "this node's helpers.py differ from the driver's",
        "files": 4,
        "bytes": project.size,
        "root": str(tmp_path / "proj"),
    }
    assert moved.script == copy / "job.py" and moved.workdir == copy / "data" and moved.path == loaded.path
    assert (copy / "helpers.py").read_text() == "VALUE = 3\n"  # the driver's, as it was when the batch started

    shutil.rmtree(tmp_path / "proj")  # a machine that never had the project
    moved, placed = place(project, "auto", loaded, tmp_path / "scratch-3")
    assert placed["why"] == f"{tmp_path / 'proj'} is not on this node" and moved.script.read_text() == "print('hi')\n"


def test_always_runs_the_copy_and_never_needs_the_files_on_the_node(tmp_path):
    loaded = _project(tmp_path)
    project = snapshot(loaded)
    moved, placed = place(project, "always", loaded, tmp_path / "scratch")
    assert placed["why"] == "--ship always" and moved.script == tmp_path / "scratch" / "project" / "job.py"
    kept, placed = place(None, "never", loaded, tmp_path / "scratch-2")
    assert kept is loaded and placed == {"ran_from": "in place", "why": "the project was not sent (--ship never)"}
    shutil.rmtree(tmp_path / "proj")
    with pytest.raises(InputError) as missing:
        place(None, "never", loaded, tmp_path / "scratch-3")
    assert missing.value.message == f"the script {loaded.script} is not on this node, and the project was not sent (--ship never)"


def test_unpacking_writes_only_the_listed_files_inside_the_copy(tmp_path):
    """A snapshot is made by the driver, but a node still never writes outside the cell's folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("../escape.py", b"x"), ("/etc/xlarun-owned", b"x"), ("ok.py", b"print(1)\n"), ("extra.py", b"x")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        link = tarfile.TarInfo("link.py")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    hostile = Project(
        root=str(tmp_path / "p"),
        files={"../escape.py": "", "/etc/xlarun-owned": "", "ok.py": "", "link.py": ""},
        size=0,
        archive=zstandard.ZstdCompressor().compress(buffer.getvalue()),
    )
    unpack(hostile, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy").rglob("*")) == ["ok.py"]
    assert not (tmp_path / "escape.py").exists() and not os.path.exists("/etc/xlarun-owned")
