"""The spec's project folder, sent with a Ray batch's cells to the nodes, so a node needs no copy of its own.

A cell's spec names a script, a working folder and the spec file itself, all paths on the driver. A node on
another machine may not have them, or may have an older checkout there. So the driver takes a **snapshot** of
the project folder once per batch (:func:`snapshot`): the deepest folder holding the spec file, the script and
the working folder, without version-control folders, virtual environments, caches and xlarun stores, up to
:data:`SHIP_LIMIT_BYTES` and :data:`SHIP_LIMIT_FILES`. Ray carries it to each node once (an object in its store).

On the node, :func:`place` decides where the cell runs from (the ``ship`` setting of the batch):

- ``auto`` (the default): in place when the node holds every file of the snapshot at the same path with the same
  bytes (one checkout on a shared file system, or the same checkout everywhere: nothing is copied); otherwise
  from the snapshot, unpacked into the cell's staging folder;
- ``always``: from the snapshot, even where the node has the same files (every cell runs the project as it was
  when the batch started, whatever is edited meanwhile);
- ``never``: nothing is sent; the node must have the files at the same path.

A snapshot over the limits is not taken: with ``auto`` the cells run in place and a node that lacks the script
fails the cell saying why; with ``always`` the batch stops before any cell runs.
"""

from __future__ import annotations

import dataclasses
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

import zstandard

from xlarun.capture.spec_yaml import LoadedSpec
from xlarun.errors import InputError
from xlarun.store.packs import content_digest

#: What a snapshot may hold at most: more is not sent (see the module docstring).
SHIP_LIMIT_BYTES = 64 << 20
SHIP_LIMIT_FILES = 5_000
#: The ``ship`` settings of a Ray batch.
SHIP_MODES = ("auto", "always", "never")
#: Folders a snapshot leaves out wherever they are: version control, environments, caches.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".xlarun",
    }
)


class ProjectTooBig(InputError):
    """The project folder holds more than a snapshot may."""


@dataclass(frozen=True)
class Project:
    """A snapshot of the project folder: what a node needs to run a cell whose files it lacks."""

    root: str  # the folder on the driver (absolute)
    files: dict[str, str]  # path relative to root -> digest
    size: int  # bytes of the files
    archive: bytes  # a tar of the files, zstd-compressed

    def describe(self) -> str:
        return f"{len(self.files)} file(s), {_kib(self.size)} from {self.root}"


def project_root(loaded: LoadedSpec) -> Path:
    """The deepest folder holding the spec file, the script and the working folder."""
    return Path(os.path.commonpath([str(loaded.path.parent), str(loaded.script.parent), str(loaded.workdir)]))


def _is_store(folder: Path) -> bool:
    return (folder / "VERSION").is_file() and (folder / "blobs").is_dir()


def snapshot(loaded: LoadedSpec, limit_bytes: int = SHIP_LIMIT_BYTES, limit_files: int = SHIP_LIMIT_FILES) -> Project:
    """The project folder of ``loaded`` as a :class:`Project`; ProjectTooBig past the limits (the walk stops there)."""
    root = project_root(loaded)
    files: dict[str, str] = {}
    size = 0
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder, dirs, names in os.walk(root):  # symbolic links to folders are not followed
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not _is_store(here / d))
            for name in sorted(names):
                path = here / name
                try:
                    info = path.stat()  # a link to a file is sent as the file it points to
                except OSError:  # a dangling link, or gone meanwhile
                    continue
                if not stat.S_ISREG(info.st_mode):  # a FIFO, a socket, a device: never read
                    continue
                rel = path.relative_to(root).as_posix()
                if len(files) + 1 > limit_files or size + info.st_size > limit_bytes:
                    raise ProjectTooBig(
                        f"the project folder {root} holds more than {limit_files:,} files or {_kib(limit_bytes)} "
                        f"(outside {', '.join(sorted(SKIPPED_DIRS)[:4])}... and xlarun stores), more than a Ray batch sends to its nodes",
                        "put it at the same path on every node (a shared file system, or the same checkout) and run with "
                        "--ship never, or keep the spec and script in a smaller folder",
                    )
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                member = tarfile.TarInfo(rel)
                member.size, member.mtime, member.mode = len(data), int(info.st_mtime), 0o755 if info.st_mode & 0o111 else 0o644
                tar.addfile(member, io.BytesIO(data))
                files[rel] = content_digest(data)
                size += len(data)
    archive = zstandard.ZstdCompressor(level=3).compress(buffer.getvalue())
    return Project(root=str(root), files=files, size=size, archive=archive)


def differences(project: Project, limit: int = 3) -> list[str]:
    """The snapshot's files that this machine lacks, or holds with other bytes, at the same path (at most ``limit``)."""
    found = []
    for rel, digest in project.files.items():
        path = Path(project.root) / rel
        try:
            same = content_digest(path.read_bytes()) == digest
        except OSError:
            same = False
        if not same:
            found.append(rel)
            if len(found) >= limit:
                break
    return found


def unpack(project: Project, into: Path) -> None:
    """Write the snapshot's files below ``into`` (only the regular files it lists, never outside ``into``)."""
    into.mkdir(parents=True, exist_ok=True)
    data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(project.archive)).read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar:
            target = (into / member.name).resolve()
            if not member.isfile() or member.name not in project.files or not target.is_relative_to(into.resolve()):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None, "a regular file has contents"
            target.write_bytes(source.read())
            target.chmod(member.mode & 0o755)


def place(project: Project | None, ship: str, loaded: LoadedSpec, scratch: Path) -> tuple[LoadedSpec, dict]:
    """Where this node runs the cell from: ``loaded`` itself (in place) or a copy whose paths point into the
    snapshot unpacked below ``scratch``; and what was decided, for the run's manifest (``backend_details.ray.project``)."""
    if project is None:
        why = "the project was not sent (--ship never)" if ship == "never" else "the project was too big to send"
        if not loaded.script.is_file():
            raise InputError(
                f"the script {loaded.script} is not on this node, and {why}",
                "put the project at the same path on every node (a shared file system, or the same checkout)"
                + ("" if ship == "never" else ", or keep the spec and script in a smaller folder"),
            )
        return loaded, {"ran_from": "in place", "why": why}
    if ship == "auto":
        differ = differences(project)
        if not differ:
            return loaded, {
                "ran_from": "in place",
                "why": f"this node has the same {len(project.files)} file(s) at {project.root}",
            }
        why = (
            f"{project.root} is not on this node"
            if not Path(project.root).is_dir()
            else f"this node's {', '.join(differ)}{' and more' if len(differ) >= 3 else ''} differ from the driver's"
        )
    else:
        why = "--ship always"
    copy = scratch / "project"
    unpack(project, copy)
    root = Path(project.root)

    def moved(path: Path) -> Path:
        return copy / path.relative_to(root)

    workdir = moved(loaded.workdir)
    workdir.mkdir(parents=True, exist_ok=True)  # an empty working folder is not in the snapshot
    # the spec's own path stays the driver's: it is only recorded, and that is the file the user knows
    relocated = dataclasses.replace(loaded, script=moved(loaded.script), workdir=workdir)
    return relocated, {
        "ran_from": "snapshot",
        "why": why,
        "files": len(project.files),
        "bytes": project.size,
        "root": project.root,
    }


def _kib(size: int) -> str:
    return f"{size / 1024:.1f} KiB" if size < 1 << 20 else f"{size / (1 << 20):.1f} MiB"
