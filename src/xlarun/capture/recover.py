"""``xlarun recover``: the staging folders killed captures left behind become runs marked ``incomplete``.

A capture killed at any point (``kill -9``, an out-of-memory kill, a power cut) never shows half a run: a
run is committed by one atomic rename. What it had done stays in ``staging/<run id>/``: the spec, the
logs so far, raw dump files not yet archived, and ``archived.json`` once every file was in the blob store.
Recovery archives the raw files that are left (whatever they are, as a capture does), keeps what
``archived.json`` lists, writes a manifest saying what is known and that the run is incomplete, and
commits it as a capture would. A folder holding nothing of the job's is left to ``gc``.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from xlarun.bounded_read import MAX_MANIFEST_BYTES, read_store_file
from xlarun.capture.launch import file_note_warnings
from xlarun.errors import StoreError
from xlarun.interrupts import job_processes
from xlarun.killpoints import kill_point
from xlarun.store.archive import ARCHIVED_LIST, FileNote, read_archived_list
from xlarun.store.facade import LocalStore
from xlarun.store.manifest import Manifest, host_facts
from xlarun.store.rows import Leftover, RunStatus, StoredFile, read_file_list
from xlarun.store.runs import describe_leftover
from xlarun.store.store_json import checked_manifest, parse_store_json


@dataclass
class RecoveredRun:
    """One staging folder made a run (``run_id``), or left as it was (``error`` says why)."""

    run_id: str
    status: str | None = None
    files: int = 0
    what: str = ""
    error: str | None = None
    notes: list[FileNote] = field(default_factory=list)


def recover_runs(store: LocalStore, run_ids: list[str] | None = None) -> list[RecoveredRun]:
    """Make every recoverable staging folder (or only those of ``run_ids``) a visible run; returns what was done.

    Safe against a concurrent capture (its folder has a live owner), gc (held off by the store's shared
    lock) and another recovery (each folder is claimed with a lock on its ``owner.pid``)."""
    out = []
    for leftover in store.leftovers():
        if run_ids is not None and leftover.run_id not in run_ids:
            continue
        if leftover.recoverable:
            out.append(recover_folder(store, leftover))
    return out


def recover_folder(store: LocalStore, leftover: Leftover) -> RecoveredRun:
    """Commit one killed capture's staging folder as a run (see the module docstring)."""
    folder = leftover.path
    pid_file = folder / "owner.pid"
    try:
        fd = os.open(pid_file, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        return RecoveredRun(leftover.run_id, error="gone meanwhile (recovered or deleted by another xlarun)")
    with os.fdopen(fd, "r+") as claim, store.lock():
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return RecoveredRun(leftover.run_id, error="another xlarun is recovering it")
        if not folder.is_dir() or folder not in store.stale_staging():
            return RecoveredRun(leftover.run_id, error="no longer left over (recovered, deleted, or its capture still runs)")
        running = job_processes(folder)
        if running:  # its capture died, but what the job started still writes into the folder
            return RecoveredRun(
                leftover.run_id,
                error=f"its job still runs: stop it (kill {' '.join(map(str, running[:8]))}) or let it end, then recover",
            )
        claim.seek(0)
        claim.truncate()
        claim.write(str(os.getpid()))  # ours now: gc and other recoveries leave it alone
        claim.flush()
        leftover = describe_leftover(folder)
        if (folder / "files.json").exists() and (folder / "manifest.json").exists():
            return _commit_finished(store, folder, leftover)
        return _commit_incomplete(store, folder, leftover)


_LOST = "listed as archived by the killed capture, but its blob is missing"


def _commit_finished(store: LocalStore, folder: Path, leftover: Leftover) -> RecoveredRun:
    """A capture killed between writing its metadata and its rename: it is whole; commit it as it was."""
    try:  # read within bounds (a FIFO or link: StoreError), parsed within a depth bound, checked
        manifest = checked_manifest(parse_store_json(read_store_file(folder / "manifest.json", MAX_MANIFEST_BYTES)))
        files = store_files_of(folder / "files.json")
    except (ValueError, StoreError) as exc:  # not UTF-8, not JSON, too deep, not what xlarun writes
        why = exc.message if isinstance(exc, StoreError) else str(exc)
        raise StoreError(
            f"a killed capture's staging folder {folder} is damaged: {why}",
            "`xlarun gc --discard-recoverable` gives it up; nothing was changed",
        ) from None
    manifest["recovered"] = {"at": _now(), "found": leftover.what, "by": list(sys.argv)}
    lost = _check_blobs(store, files)
    if lost:  # as for an incomplete capture: the run keeps what the store holds, and says what it lost
        notes = [
            *(manifest.get("file_notes") or []),
            *(FileNote(f.path, False, _LOST).to_json() for f in files if f.digest in lost),
        ]
        files = [f for f in files if f.digest not in lost]
        manifest.update(
            file_notes=sorted(notes, key=lambda n: n["path"]), files=len(files), dump_bytes=sum(f.size for f in files)
        )
    store.commit_indexed(folder.name, folder, files, {"manifest.json": json.dumps(manifest, indent=2)})
    return RecoveredRun(folder.name, manifest.get("status"), len(files), leftover.what)


def _commit_incomplete(store: LocalStore, folder: Path, leftover: Leftover) -> RecoveredRun:
    previous = read_archived_list(folder)
    archiver = store.archiver(folder)
    files = archiver.finish(previous)
    kill_point("recover-archived")
    notes = archiver.notes
    lost = _check_blobs(store, files)
    if lost:  # each lost file gets its note before it leaves the list
        notes = sorted(notes + [FileNote(f.path, False, _LOST) for f in files if f.digest in lost], key=lambda n: n.path)
        files = [f for f in files if f.digest not in lost]
    resolved = _read_json(folder / "spec.resolved.json")
    spec = resolved.get("spec") or {}
    started = _started(folder)
    ended = _latest_mtime(folder)
    warnings = [
        f"xlarun was killed before this run was committed; `xlarun recover` made it from what staging held ({leftover.what})"
    ]
    warnings += file_note_warnings(notes, folder.name)
    manifest = Manifest(
        run_id=folder.name,
        name=spec.get("name") or "recovered",
        status=RunStatus.INCOMPLETE.value,
        error="xlarun was killed before the commit: the job's end, exit code and versions are not known",
        started=started,
        ended=ended,
        duration_s=max(0.0, round((datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds(), 3)),
        spec_path=resolved.get("spec_path"),
        command=[
            *([spec["python"]] if spec.get("python") else []),
            *([resolved["script"]] if resolved.get("script") else []),
            *(spec.get("args") or []),
        ],
        xlarun_command=list(sys.argv),
        cwd=resolved.get("workdir"),
        backend=(spec.get("backend") or {}).get("kind", "local"),
        framework=resolved.get("framework"),
        host=host_facts(),
        warnings=warnings,
        tags=spec.get("tags") or {},
        files=len(files),
        dump_bytes=sum(f.size for f in files),
        file_notes=[n.to_json() for n in notes],
        recovered={"at": _now(), "found": leftover.what, "by": list(sys.argv)},
    )
    written = _read_json(folder / "manifest.json")  # killed while committing: the capture's own manifest is the better one
    if written.get("run_id") == folder.name:  # commit_run writes it only once every file is archived
        try:
            manifest = Manifest.model_validate(
                {
                    **written,
                    "files": manifest.files,
                    "dump_bytes": manifest.dump_bytes,
                    "file_notes": manifest.file_notes,
                    "recovered": manifest.recovered,
                }
            )
        except ValueError:  # damaged: the manifest made from the spec stands
            pass
    store.commit_indexed(folder.name, folder, files, {"manifest.json": manifest.to_json()})
    return RecoveredRun(folder.name, manifest.status, len(files), leftover.what, notes=notes)


def store_files_of(path: Path) -> list[StoredFile]:
    """What a staging folder's ``files.json`` lists (read and checked as a run's is: StoreError when damaged)."""
    return read_file_list(path)


def _check_blobs(store: LocalStore, files: list[StoredFile]) -> set[str]:
    """Digests of ``files`` the store does not hold (none, unless the store was damaged by hand)."""
    digests = sorted({f.digest for f in files})
    held = store.blobs.stored_of(digests)
    return {d for d in digests if d not in held}


def _read_json(path: Path) -> dict:
    """The JSON object in a staging file, or {} when there is none or it is not one (a FIFO or link: StoreError)."""
    try:
        data = parse_store_json(read_store_file(path, MAX_MANIFEST_BYTES))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _started(folder: Path) -> str:
    """When the capture began: the time in its run id (second precision), else the folder's own."""
    try:
        when = datetime.strptime(folder.name[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        when = datetime.fromtimestamp(folder.stat().st_mtime, timezone.utc)
    return when.isoformat(timespec="milliseconds")


def _latest_mtime(folder: Path) -> str:
    """The last time the killed capture wrote anything in its folder (the logs, the spec, the list)."""
    times = [folder.stat().st_mtime]
    for name in ("stdout.log", "stderr.log", ARCHIVED_LIST, "spec.resolved.json"):
        try:
            times.append((folder / name).stat().st_mtime)
        except OSError:
            pass
    return datetime.fromtimestamp(max(times), timezone.utc).isoformat(timespec="milliseconds")
