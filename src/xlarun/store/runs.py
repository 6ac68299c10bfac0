"""The run store: every captured run, its logs and manifest, and its dump files, kept safely.

This is the storage layer: folders, manifests, files.json, blobs. It knows nothing of the index or of
parsing; :class:`xlarun.store.facade.LocalStore` builds on it with the index (kept up to date by :mod:`xlarun.store.ingest`)
and the archiver.

Layout of a store folder (default ``./.xlarun``)::

    VERSION                  store format version: 4, the only one (docs/store-format.md)
    index.sqlite             the index (derived: rebuilt from runs/ when missing or behind)
    blobs/                   dump files, content-addressed (BLAKE3) and zstd-compressed, kept once across
                             runs: most in packs (blobs/packs/, with blobs/packs.sqlite saying where each
                             file is), where a module's successive dumps are compressed together (blobs.py)
    runs/<run id>/           committed runs: manifest.json, spec.yaml, spec.resolved.json,
                             stdout.log, stderr.log, files.json
    staging/<run id>/        runs being captured; never listed

A run becomes visible only by an atomic ``rename`` of its finished staging folder into ``runs/``,
so a crash or kill while archiving never leaves half a run and never touches earlier runs. The staging
folder of a killed capture is a :class:`Leftover`: ``xlarun recover`` (:func:`xlarun.capture.recover.recover_runs`)
makes it a run marked ``incomplete``; ``gc`` (:mod:`xlarun.store.gc`) keeps it (and the blobs it names) unless told
to discard it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from xlarun import bounded_read
from xlarun.errors import InputError, RefError, StoreError, check_room, os_error_words, write_trouble
from xlarun.interrupts import process_alive
from xlarun.killpoints import kill_point
from xlarun.store.locks import open_lock, writers_turn
from xlarun.store.rows import OUTPUT_DIRS, CheckReport, DamagedRun, FileNote, Leftover, StoredFile, listed_files, run_json
from xlarun.store.store_json import checked_file_entries, checked_manifest, parse_store_json
from xlarun.store.store_version import check_format, make_store, read_version

if TYPE_CHECKING:
    from xlarun.store.packs import BlobStore

DEFAULT_STORE = ".xlarun"
_TRASH_PREFIX = ".trash-"
_DELETE_AT_ONCE = 64  # a trash of fewer entries is deleted at once: starting `rm` costs more (one small module)


def _fewer_entries_than(folder: Path, limit: int) -> bool:
    """Whether ``folder`` holds fewer than ``limit`` entries, however deep (False if a folder cannot be listed)."""
    pending, seen = [folder], 0
    try:
        while pending and seen < limit:
            with os.scandir(pending.pop()) as entries:
                found = list(entries)
            seen += len(found)
            pending += [Path(e.path) for e in found if e.is_dir(follow_symlinks=False)]
    except OSError:
        return False
    return seen < limit


_NEW_PREFIX = ".new-"  # a staging folder being made (begin_run): it gets its owner.pid before its name


#: Written into staging once every file is archived, before the raw files are deleted.
ARCHIVED_LIST = "archived.json"
#: A run folder's own files beside its file list (each a regular file, or absent), as export and shipping copy them.
RUN_METADATA = ("manifest.json", "spec.yaml", "spec.resolved.json", "stdout.log", "stderr.log")


def new_run_id(now: datetime | None = None) -> str:
    """A time-sortable run id: ``20261122-103015-a1b2`` (UTC; then the 256th of the second, so that runs started in
    the same second sort in order and ``latest`` is the latest, and 2 random hex digits)."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{now.microsecond * 256 // 1_000_000:02x}{os.urandom(1).hex()}"


def default_store_path() -> Path:
    """``$XLARUN_STORE`` if set, else ``./.xlarun`` in the working directory."""
    return Path(os.environ.get("XLARUN_STORE") or DEFAULT_STORE)


_Opened = TypeVar("_Opened", bound="RunStore")


class RunStore:
    """A run store folder: runs, their files and blobs (no index: see :class:`xlarun.store.facade.LocalStore`)."""

    def __init__(self, root: Path):
        self.root = root
        self._blobs: BlobStore | None = None
        self._blobs_lock = threading.Lock()  # an archiver's threads may be the first to ask for them
        self.runs_dir = root / "runs"
        self.staging_dir = root / "staging"
        self._file_digests: dict[str, dict[str, str]] = {}  # run id -> {path: digest}, for read_file
        self._discards: list[subprocess.Popen] = []  # background deletions of raw files

    @property
    def blobs(self) -> BlobStore:
        """The store's packs, opened when first asked for: commands that read only the index load no compressor."""
        if self._blobs is None:
            with self._blobs_lock:
                if self._blobs is None:
                    from xlarun.store.packs import BlobStore

                    self._blobs = BlobStore(self.root / "blobs")
        return self._blobs

    # --- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls: type[_Opened], path: str | Path | None = None, create: bool = True) -> _Opened:
        """Open the store at ``path`` (default: ``$XLARUN_STORE`` or ``./.xlarun``), creating it if asked."""
        root = Path(path).expanduser() if path else default_store_path()
        version_file = root / "VERSION"
        if not version_file.exists():
            if not create:
                raise StoreError(
                    f"no xlarun store at {root}",
                    "capture a run first (`xlarun capture SPEC`), or point --store / XLARUN_STORE at a store",
                )
            make_store(root)  # whole or not at all; finishes one a Ctrl-C cut short, or finds one made meanwhile
        check_format(root, read_version(version_file))
        return cls(root.resolve())

    def close(self) -> None:
        """Close the pack-table connections this store opened (none when no blob was read or written)."""
        if self._blobs is not None:
            self._blobs.close()

    # --- locking -----------------------------------------------------------------------------

    @contextmanager
    def lock(self, exclusive: bool = False) -> Iterator[None]:
        """Shared while writing a run, exclusive while deleting (gc, rm): blobs in use are never removed."""
        fd = open_lock(self.root / "lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    # --- writing a run -----------------------------------------------------------------------

    def begin_run(self, run_id: str | None = None) -> tuple[str, Path]:
        """Create a staging folder for a new run; the job writes its outputs there. A run id drawn here is claimed
        atomically: two captures drawing the same id at once (same 4 ms, same random byte, even in one process) never
        share a folder; the second draws again. A ``run_id`` given (a shipped run) that is taken: FileExistsError."""
        given = run_id is not None
        run_id = run_id or new_run_id()
        for _attempt in range(16):
            if not given and ((self.staging_dir / run_id).exists() or (self.runs_dir / run_id).exists()):
                run_id = new_run_id()
                continue
            staging = self.staging_dir / run_id
            if given and staging.exists():
                raise FileExistsError(17, "a staging folder of that name exists", str(staging))
            # made under a temporary name and renamed: gc never sees a staging folder without its owner (the
            # draft's name ends with the pid, which gc reads; the token keeps two threads' drafts apart)
            draft = self.staging_dir / f"{_NEW_PREFIX}{run_id}-{os.urandom(3).hex()}-{os.getpid()}"
            try:
                for folder in (draft, *(draft / sub for sub in OUTPUT_DIRS)):
                    folder.mkdir(parents=folder == draft)
                (draft / "owner.pid").write_text(str(os.getpid()))
            except OSError as exc:
                shutil.rmtree(draft, ignore_errors=True)
                raise write_trouble(exc, f"cannot start a run in {self.root}") or exc from None
            try:
                os.rename(draft, staging)  # fails when another capture has just claimed the name (never empty)
            except OSError as exc:
                shutil.rmtree(draft, ignore_errors=True)
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                if given:
                    raise FileExistsError(17, "a staging folder of that name exists", str(staging)) from None
                run_id = new_run_id()
                continue
            return run_id, staging
        raise StoreError(f"could not claim a new run id in {self.staging_dir}", "too many captures start at once: try again")

    def commit_run(self, run_id: str, staging: Path, files: list[StoredFile], metadata: dict[str, str | bytes]) -> Path:
        """Write the run's metadata files and make the run visible with one atomic rename."""
        for name, content in metadata.items():
            target = staging / name
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        (staging / "files.json").write_text(
            json.dumps([{"path": f.path, "digest": f.digest, "size": f.size} for f in files], separators=(",", ":"))
        )
        kill_point("metadata-written")
        (staging / ARCHIVED_LIST).unlink(missing_ok=True)  # files.json says the same from here on
        final = self.runs_dir / run_id
        os.rename(staging, final)
        kill_point("committed")
        (final / "owner.pid").unlink(missing_ok=True)  # after the rename: until then it tells gc the folder is in use
        return final

    # --- reading -----------------------------------------------------------------------------

    def run_ids(self) -> list[str]:
        """Ids of committed runs, oldest first."""
        if not self.runs_dir.is_dir():
            return []
        # every folder is a run, its file list readable or not (a damaged one is check's to report, never "gone")
        with os.scandir(self.runs_dir) as entries:
            return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir())

    def run_path(self, run_id: str) -> Path:
        path = self.runs_dir / run_id
        if not (path / "files.json").exists():
            if path.is_dir():
                raise DamagedRun(run_id, "files.json", "missing")
            raise RefError(f"no run {run_id} in {self.root}", "`xlarun runs` lists the runs")
        return path

    def stored_files(self, run_id: str) -> list[StoredFile]:
        """What a run's ``files.json`` lists, read within bounds (no link, no FIFO) and checked (types, sizes, no path
        twice, none leaving the run); :class:`DamagedRun` or StoreError naming the damage."""
        listing = self.run_path(run_id) / "files.json"
        entries = run_json(run_id, listing, bounded_read.MAX_LIST_BYTES, checked_file_entries)
        return listed_files([{"path": p, "digest": d, "size": n} for p, d, n in entries], str(listing))

    def manifest(self, run_id: str) -> dict:
        """A run's ``manifest.json`` ({} where it has none); :class:`DamagedRun` when it cannot be read or a key the
        index reads has a type xlarun never writes."""
        path = self.run_path(run_id) / "manifest.json"
        return run_json(run_id, path, bounded_read.MAX_MANIFEST_BYTES, checked_manifest) if path.exists() else {}

    def read_file(self, run_id: str, path: str) -> bytes:
        """The exact bytes of one archived file of a run."""
        files = self._file_digests.get(run_id)
        if files is None:  # a committed run's file list never changes: read files.json once
            files = self._file_digests[run_id] = {entry.path: entry.digest for entry in self.stored_files(run_id)}
        if path not in files:
            raise InputError(f"run {run_id} has no file {path}", "`xlarun show` lists a module's files")
        return self.blobs.get(files[path])

    def read_log(self, run_id: str, stream: str) -> str:
        return bounded_read.read_store_log(self.run_path(run_id) / f"{stream}.log")

    def export(self, run_id: str, dest: str | Path, with_logs: bool = True) -> int:
        """Write the run's files back with their original names below ``dest``; returns the file count."""
        dest, entries = Path(dest), self.stored_files(run_id)  # every path checked to stay below dest
        if dest.exists() and any(dest.iterdir()):
            raise InputError(f"{dest} is not empty", "export into a new or empty folder")
        # read first: a FIFO or link in place of one of them is refused before anything is written
        metadata = bounded_read.read_store_files(self.run_path(run_id), RUN_METADATA) if with_logs else {}
        check_room(dest, sum(entry.size for entry in entries), f"exporting run {run_id}")
        for entry in entries:
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.blobs.get(entry.digest))
        if with_logs:
            (dest / "_xlarun").mkdir(parents=True, exist_ok=True)
            for name, data in metadata.items():
                (dest / "_xlarun" / name).write_bytes(data)
        return len(entries)

    # --- housekeeping ------------------------------------------------------------------------

    def discard_later(self, paths: list[Path]) -> None:
        """Move folders into the staging area's trash and delete them in the background (an ``rm -rf``
        process: thousands of raw dump files take a while to unlink, and nobody needs to wait for it).
        :meth:`wait_for_discards` waits; a trash left by a killed ``rm`` goes at the next ``gc``."""
        self._discards = [proc for proc in self._discards if proc.poll() is None]  # reap the finished ones
        trash = self.staging_dir / f"{_TRASH_PREFIX}{os.getpid()}-{os.urandom(3).hex()}"
        trash.mkdir(parents=True)
        for n, path in enumerate(paths):
            try:
                os.rename(path, trash / f"{n}-{path.name}")
            except FileNotFoundError:
                pass
        rm = shutil.which("rm")
        if rm is None or _fewer_entries_than(trash, _DELETE_AT_ONCE):  # a process costs more than a few unlinks
            shutil.rmtree(trash, ignore_errors=True)
            return
        null = subprocess.DEVNULL
        self._discards.append(
            subprocess.Popen([rm, "-rf", "--", str(trash)], stdin=null, stdout=null, stderr=null, start_new_session=True)
        )

    def wait_for_discards(self) -> None:
        """Wait until the background deletions this store started are done."""
        for proc in self._discards:
            proc.wait()
        self._discards.clear()

    def stale_staging(self) -> list[Path]:
        """Staging folders whose capturing process is gone (a killed xlarun), recoverable or not."""
        out: list[Path] = []
        if not self.staging_dir.is_dir():
            return out
        for folder in self.staging_dir.iterdir():
            if folder.name.startswith(_TRASH_PREFIX):
                continue  # raw files being deleted (gc removes what a killed deletion left)
            if folder.name.startswith(_NEW_PREFIX):
                if not process_alive(int(folder.name.rsplit("-", 1)[1]) if folder.name.rsplit("-", 1)[1].isdigit() else None):
                    out.append(folder)
                continue
            if not process_alive(_read_pid(folder / "owner.pid")):
                out.append(folder)
        return out

    def leftovers(self) -> list[Leftover]:
        """What killed captures left in staging, oldest first, each saying whether it can be recovered."""
        return [describe_leftover(folder) for folder in sorted(self.stale_staging(), key=lambda p: p.name)]

    def delete_run(self, run_id: str) -> None:
        """Remove a run, a damaged one too (its blobs go at the next gc, if no other run uses them)."""
        path = self.runs_dir / run_id
        if not path.is_dir():
            path = self.run_path(run_id)  # says there is no such run
        with self.lock(exclusive=True), writers_turn(self.root):
            trash = self.staging_dir / f".deleting-{run_id}"
            try:
                os.rename(path, trash)
            except OSError as exc:
                raise StoreError(f"cannot remove run {run_id}: {exc.strerror}", "removing needs a writable store") from None
            try:
                self._forget(run_id)  # if this fails (a full disk), the index forgets it at its next reconcile
            finally:
                shutil.rmtree(trash, ignore_errors=True)

    def _forget(self, run_id: str) -> None:
        """Called while a deleted run is being removed (the index layer forgets it there)."""

    def trash_folders(self) -> list[Path]:
        """Folders of raw files a deletion left in staging (a killed ``rm``, or one still running in the background)."""
        return sorted(self.staging_dir.glob(f"{_TRASH_PREFIX}*"))

    def check(self, progress: Callable[[int, int], None] | None = None) -> CheckReport:
        """Read back every file of every run and every pack, and say what is missing or damaged."""
        by_digest: dict[str, list[tuple[str, str]]] = {}
        runs = self.run_ids()
        for run_id in runs:
            try:
                listed = self.stored_files(run_id)
            except (StoreError, PermissionError):  # a damaged or unreadable list: LocalStore.check names it
                continue
            for entry in listed:
                by_digest.setdefault(entry.digest, []).append((run_id, entry.path))
        report = CheckReport(runs=len(runs), files=sum(map(len, by_digest.values())), blobs=len(by_digest), packs=0)
        packs = self.blobs.pack_names()
        report.packs = len(packs)
        total, done = len(by_digest) + len(packs), 0
        for name in packs:
            problem = self.blobs.verify_pack(name)
            if problem:
                report.damaged.append({"run": None, "path": f"blobs/packs/{name}.zst", "problem": problem})
            done += 1
            if progress:
                progress(done, total)
        self.blobs.forget_decoded()  # read from the disk, each pack once (not once per file it holds)
        for digest, uses in sorted(by_digest.items(), key=lambda kv: kv[1]):
            problem = self.blobs.verify(digest, use_cache=True)
            if problem:
                report.damaged += [{"run": run_id, "path": path, "problem": problem} for run_id, path in uses]
            done += 1
            if progress:
                progress(done, total)
        return report

    def disk_usage(self) -> int:
        """Bytes the store's blobs and packs take on disk."""
        return self.blobs.disk_usage()


def _read_pid(path: Path) -> int | None:
    try:
        return int(bounded_read.read_regular(path, 64))  # a FIFO or link there is no owner: never waited on
    except (OSError, ValueError):
        return None


def describe_leftover(folder: Path) -> Leftover:
    """Whether a killed capture's staging folder holds anything of the job's, and what. One that cannot be read is
    recoverable: what it holds is unknown, so gc keeps it unless told to discard it."""
    try:
        return _describe_leftover(folder)
    except OSError as exc:
        return Leftover(folder, True, f"cannot be read: {os_error_words(exc)}")


def _describe_leftover(folder: Path) -> Leftover:
    if folder.name.startswith("."):
        return Leftover(folder, False, "a folder being made or deleted")
    if (folder / "files.json").exists() and (folder / "manifest.json").exists():
        return Leftover(folder, True, "a finished capture killed just before its commit")
    listed = read_archived_list(folder)
    raw = 0
    for sub in OUTPUT_DIRS:
        for _root, _dirs, names in os.walk(folder / sub):
            raw += len(names)
    logs = sum(_size(folder / f"{name}.log") for name in ("stdout", "stderr"))
    parts = []
    if listed is not None:
        parts.append(f"{len(listed[0])} archived file(s)")
    if raw:
        parts.append(f"{raw} raw file(s)")
    if logs:
        parts.append(f"{logs} bytes of logs")
    if not parts:
        return Leftover(folder, False, "nothing the job wrote")
    return Leftover(folder, True, ", ".join(parts))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def logical_path(rel: str) -> str:
    """Map a path below a run folder to its archive name: ``dump/x`` -> ``x``; ``tf_graphs/x`` stays."""
    return rel[len("dump/") :] if rel.startswith("dump/") else rel


def write_archived_list(staging: Path, files: list[StoredFile], notes: list[FileNote]) -> None:
    """Write ``archived.json`` into staging, atomically: every file is in the store, so a capture killed from
    here on is recovered from this list (the raw files are about to go)."""
    tmp = staging / f".{ARCHIVED_LIST}.tmp"
    tmp.write_text(
        json.dumps(
            {
                "files": [{"path": f.path, "digest": f.digest, "size": f.size} for f in files],
                "notes": [n.to_json() for n in notes],
            },
            separators=(",", ":"),
        )
    )
    os.replace(tmp, staging / ARCHIVED_LIST)


def read_archived_list(staging: Path) -> tuple[list[StoredFile], list[FileNote]] | None:
    """What ``archived.json`` in a staging folder lists, or None when there is none (or it is not such a list). A
    FIFO, link or folder in its place, or one past :data:`MAX_LIST_BYTES`: StoreError naming it (never waited on)."""
    path = staging / ARCHIVED_LIST
    try:
        data = parse_store_json(bounded_read.read_store_file(path, bounded_read.MAX_LIST_BYTES))
        files, notes = data["files"], [FileNote(n["path"], n["archived"], n["why"]) for n in data["notes"]]
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError, KeyError, TypeError):  # written atomically: this is no list to recover from
        return None
    return listed_files(files, str(path)), notes  # a path that leaves the run: StoreError
