"""Moving the files a job writes into the blob store: while the job runs, and once it has ended.

Successive dumps of a module in one format (before_optimizations, each pass, after_optimizations) form a
*series*, stored in packs of its own, so that each dump is compressed against the one before (the blob
format is in blobs.py). The other files go into packs too, in path order.

While the job runs, :meth:`OutputArchiver.start` archives files once they have settled (same size and
mtime over a poll, and older than ``SETTLE_S``) in one background thread, leaving the other cores to the
job; a series' pack stays open while the series grows, and is written once a scan brings it nothing new.
:meth:`OutputArchiver.finish` archives the rest in parallel once the job has ended, archives again any
file that changed after it was read, writes the open packs, and only then moves the raw files aside, to be
deleted in the background (``LocalStore.discard_later``). On a failure every raw file stays
in staging.

Whatever a dump folder holds, the run is archived: a file that cannot be archived (a symbolic link, whose
target is never read; a FIFO or a socket, never opened for reading; a file that cannot be read) is listed
in :attr:`OutputArchiver.notes` with why, as is a name that is not UTF-8 (archived under its bytes escaped)
and a file still being written when the job ended (archived as last read). Before the raw files go, the
list of what was archived is written to ``staging/archived.json``: a capture killed after that point is
recovered from it (``LocalStore.recover``).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xlarun.filetypes import file_type
from xlarun.killpoints import kill_point
from xlarun.store.packs import NotRegularFile, PackWriter
from xlarun.store.rows import OUTPUT_DIRS, FileNote, StoredFile
from xlarun.store.runs import ARCHIVED_LIST, logical_path, read_archived_list, write_archived_list  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from xlarun.store.runs import RunStore

#: A file unchanged for this long is taken to be complete (XLA writes each dump file in one go).
SETTLE_S = 1.0
#: How often the staging folder is scanned while the job runs.
POLL_S = 0.5

#: Where stage dumps sit in a module's series, around the per-pass dumps (ordered by step).
_SERIES_POSITION = {"before_optimizations": -1, "after_optimizations": 1 << 30}

Stamp = tuple[int, int]  # (size, mtime_ns)

#: What one more file costs to archive, counted in bytes of content that take as long (open, stat, its name, the
#: index's look at it): 1,191 small files (9 MB) took 0.09-0.16 s, as long as a 130 MB series.
_PER_FILE_BYTES = 128 << 10

#: How many times the last files are read again when they keep changing after the job ended.
_FINAL_ROUNDS = 5


def archive_name(rel: str) -> str:
    """The archive name of a path below a run folder: ``dump/x`` -> ``x``, ``tf_graphs/x`` stays; a name
    that is not UTF-8 (surrogate-escaped by ``os``) gets its bad bytes written ``\\xff``: archive names are
    text everywhere (index, JSON, reports)."""
    name = logical_path(rel)
    if not name.isascii():
        name = os.fsencode(name).decode("utf-8", errors="backslashreplace")
    return name


_WHY_NOT_ARCHIVED = {
    "FIFO": "a FIFO (named pipe): not opened, reading it could block forever",
    "socket": "a socket: not archived",
    "device file": "a device file: not archived",
}


def _kind_of(mode: int) -> str | None:
    """Why an entry that is not a regular file or a folder is not archived."""
    return _WHY_NOT_ARCHIVED.get(file_type(mode))


def series_of(path: str) -> tuple[tuple | None, int]:
    """(series key, position in the series) of an archive path; (None, 0) for a file stored alone.

    A series is one module's HLO dumps in one format: before_optimizations, each pass, after_optimizations.
    """
    from xlarun.hlo.names import decode_dump_name

    name = decode_dump_name(path)
    position = name.step if name.kind == "pass" else _SERIES_POSITION.get(name.stage or "") if name.kind == "hlo" else None
    if position is None or name.module_id is None:
        return None, 0
    return (path.rpartition("/")[0], name.module_id, name.module_name, name.compilation, name.format), position


@dataclass(frozen=True)
class _Archived:
    name: str
    digest: str
    size: int
    stamp: Stamp  # as stat said before the bytes were read


class _Series:
    """One series' state: its open pack, and whether the last scan added to it."""

    def __init__(self, packer: PackWriter) -> None:
        self.packer = packer
        self.touched = False


class OutputArchiver:
    """Archives what a job writes under ``staging/<output dir>/`` into ``store``; see the module docstring."""

    def __init__(
        self,
        store: RunStore,
        staging: Path,
        progress: Callable[[int, int], None] | None = None,
        workers: int | None = None,
        on_archived: Callable[[str, str, memoryview, bool], None] | None = None,
        index_ahead: Callable[[], AbstractContextManager[object]] | None = None,
    ):
        self.store = store
        self.staging = staging
        self.progress = progress
        # sees each archived file: (archive path, digest, its bytes (valid during the call), whether the job still runs)
        self.on_archived = on_archived
        # entered around the last rounds (the job has ended): indexing work done beside them, as files are read
        self.index_ahead = index_ahead
        # one thread per core: the files were just written, so reading them is copying from the page cache,
        # and more threads than cores only contend (measured on 2 CPUs: 0.73-0.84 s against 0.78-0.96 s with 4)
        self.workers = workers or min(8, os.cpu_count() or 2)
        self._prefix = str(staging) + os.sep  # paths are kept as strings: pathlib cost more than hashing here
        self._archived: dict[str, _Archived] = {}
        self._series: dict[tuple | None, _Series] = {}  # None: the files stored alone
        self._seen: dict[str, Stamp] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._problems: dict[str, tuple[Stamp | None, str]] = {}  # path -> (stamp when it failed, why): not archived
        self._others: dict[str, str] = {}  # path -> why: not a regular file (symbolic link, FIFO, socket)
        #: What the user should know about the dump folder's files (filled by :meth:`finish`).
        self.notes: list[FileNote] = []
        self._held = ExitStack()
        self._holding = False
        self._count_lock = threading.Lock()
        self._done = 0

    # --- while the job runs ------------------------------------------------------------------

    def start(self) -> None:
        """Archive settled files in a background thread until :meth:`finish` or :meth:`abandon`."""
        self._hold_store()
        self._thread = threading.Thread(target=self._archive_while_running, name="xlarun-archive", daemon=True)
        self._thread.start()

    def _archive_while_running(self) -> None:
        try:
            while not self._stop.wait(POLL_S):
                stamps = self._scan()
                now = time.time_ns()
                settled = [
                    p
                    for p, s in stamps.items()
                    if p not in self._archived
                    and self._seen.get(p) == s
                    and now - s[1] > SETTLE_S * 1e9
                    and self._problems.get(p, (None,))[0] != s
                ]
                self._seen = stamps
                self._archive_paths(settled, parallel=False, running=True)
                for series in self._series.values():  # a series the scan did not grow has likely ended: write its pack
                    if not series.touched:
                        series.packer.close()
                    series.touched = False
        except BaseException as exc:  # surfaced by finish(); the raw files stay
            self._error = exc

    def abandon(self) -> None:
        """Stop archiving and leave every raw file in staging (the capture failed before the job ended)."""
        self._stop_thread()
        for series in self._series.values():
            series.packer.discard()
        self._release_store()

    # --- once the job has ended -----------------------------------------------------------------

    def finish(self, previous: tuple[list[StoredFile], list[FileNote]] | None = None) -> list[StoredFile]:
        """Archive every remaining file, list what was archived in ``archived.json``, delete the raw files,
        and return the run's files sorted by path (:attr:`notes` says what was not archived, and why).
        ``previous``: what an earlier, killed archiving listed (recovery); kept unless archived again."""
        self._hold_store()
        try:
            self._stop_thread()
            if self._error is not None:
                raise self._error
            self._problems = {
                p: (None, why) for p, (_stamp, why) in self._problems.items()
            }  # the job has ended: try each once more
            with self.index_ahead() if self.index_ahead is not None else nullcontext():
                last_scan = self._final_rounds()
                for series in self._series.values():  # packs still open from while the job ran
                    series.packer.close()
            kill_point("packs-written")
            self._give_unique_names()
            by_path = {f.path: f for f in (previous[0] if previous else [])}
            by_path.update((a.name, StoredFile(a.name, a.digest, a.size)) for a in self._archived.values())
            files = sorted(by_path.values(), key=lambda f: f.path)
            self.notes = self._collect_notes(self._scan() if last_scan is None else last_scan)
            if previous:
                noted = {n.path for n in self.notes} | {a.name for a in self._archived.values()}
                self.notes = sorted(self.notes + [n for n in previous[1] if n.path not in noted], key=lambda n: n.path)
            write_archived_list(self.staging, files, self.notes)
            kill_point("archived-listed")
            self.store.discard_later([self.staging / sub for sub in OUTPUT_DIRS])  # all safe in the store: the raw files can go
            kill_point("raw-discarded")
            return files
        finally:
            self._release_store()

    def _final_rounds(self) -> dict[str, Stamp] | None:
        """Archive what is left, until a scan finds nothing new (a file renamed while it was read shows up again);
        returns that scan's stamps (taken after every read: the notes need no other), None when files still changed
        at the last round."""
        for _round in range(_FINAL_ROUNDS):
            stamps = self._scan()
            for path in [p for p, a in self._archived.items() if stamps.get(p) != a.stamp]:
                del self._archived[path]  # changed (or deleted) after it was read: read it again
            todo = [p for p in stamps if p not in self._archived and self._problems.get(p, (None,))[0] != stamps[p]]
            if not todo:
                return stamps
            self._done = len(self._archived)
            self._archive_paths(todo, parallel=True, total=len(stamps), stamps=stamps)
        return None

    def _give_unique_names(self) -> None:
        """Two paths may escape to one name (``a\\xff`` is also a valid name): the later gets ``~2``..."""
        taken: set[str] = set()
        for path in sorted(self._archived):
            done = self._archived[path]
            name, n = done.name, 1
            while name in taken:
                n += 1
                name = f"{done.name}~{n}"
            if name != done.name:
                self._archived[path] = _Archived(name, done.digest, done.size, done.stamp)
            taken.add(name)

    def _collect_notes(self, stamps: dict[str, Stamp]) -> list[FileNote]:
        notes = [FileNote(self._name(p), False, why) for p, why in self._others.items()]
        notes += [FileNote(self._name(p), False, why) for p, (_stamp, why) in self._problems.items() if p not in self._archived]
        for path, done in self._archived.items():
            raw = logical_path(path[len(self._prefix) :].replace(os.sep, "/"))
            if done.name != raw:
                escaped = archive_name(raw)
                why = "its name is not UTF-8: archived with the bad bytes written \\xNN"
                if done.name != escaped:
                    why = f"another file's name is also {escaped!r}: archived under this one"
                notes.append(FileNote(done.name, True, why))
            now = stamps.get(path)
            if now is not None and now != done.stamp:
                notes.append(
                    FileNote(
                        done.name,
                        True,
                        f"still being written when the job ended: archived as read ({done.size} bytes; {now[0]} now)",
                    )
                )
        return sorted(notes, key=lambda n: n.path)

    # --- the work ----------------------------------------------------------------------------

    def _hold_store(self) -> None:
        if not self._holding:  # a shared lock: gc cannot remove blobs meanwhile
            self._held.enter_context(self.store.lock())
            self._holding = True

    def _release_store(self) -> None:
        self._held.close()
        self._holding = False

    def _stop_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _scan(self) -> dict[str, Stamp]:
        """(size, mtime) of every regular file below the output folders; other entries go to ``_others``."""
        stamps: dict[str, Stamp] = {}
        for sub in OUTPUT_DIRS:
            stack = [str(self.staging / sub)]
            while stack:
                folder = stack.pop()
                try:
                    entries = list(os.scandir(folder))
                except FileNotFoundError:
                    continue
                except OSError as exc:  # an unreadable folder: say so, archive the rest
                    self._others[folder] = f"a folder that cannot be listed: {exc.strerror or exc}"
                    continue
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    elif stat.S_ISREG(st.st_mode):
                        stamps[entry.path] = (st.st_size, st.st_mtime_ns)
                    elif stat.S_ISLNK(st.st_mode):
                        self._others[entry.path] = (
                            f"a symbolic link (to {_link_text(entry.path)!r}): skipped, its target is never read"
                        )
                    else:
                        self._others[entry.path] = (
                            _kind_of(st.st_mode) or f"not a regular file (mode {st.st_mode:o}): not archived"
                        )
        return stamps

    def _archive_paths(
        self, paths: list[str], parallel: bool, total: int = 0, running: bool = False, stamps: dict[str, Stamp] | None = None
    ) -> None:
        series: dict[tuple, list[tuple[int, str]]] = defaultdict(list)
        alone: list[str] = []
        for path in paths:
            name = self._name(path)
            key, position = series_of(name)
            if key is None:
                alone.append(path)
            else:
                series[key].append((position, path))
        ordered = sorted(series.items(), key=lambda kv: -len(kv[1]))
        if not running and stamps is not None and len(ordered) + bool(alone) > 1 and _small(paths, stamps):
            # a small dump: every series in one pack (each series' members still side by side, so each dump is
            # encoded against the one before): 8 packs of ~350 bytes took 8 blocks of the disk, one pack takes one
            together = [p for _key, members in ordered for _pos, p in sorted(members)] + sorted(alone)
            self._store_series(_SMALL_DUMP, together, total, running)
            return
        sizes = stamps or {}
        groups: list[tuple[tuple | None, list[str]]] = [(key, [p for _pos, p in sorted(members)]) for key, members in ordered]
        if alone:
            groups.append((None, sorted(alone)))
        tasks: list[Callable[[], None]] = [
            partial(self._store_series, key, members, total, running, sum(sizes[p][0] for p in members if p in sizes))
            for key, members in largest_first(groups, sizes)
        ]
        if not parallel or len(tasks) < 2:  # one series (a small job's dump): no pool to start
            for task in tasks:
                task()
            return
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            for future in [pool.submit(task) for task in tasks]:
                future.result()

    def _name(self, path: str) -> str:
        """The archive name of a path below staging."""
        return archive_name(path[len(self._prefix) :].replace(os.sep, "/"))

    def _read_into(self, packer: PackWriter, path: str) -> Any:
        """Store a file into a pack: (digest, bytes or None, size, stamp), or None when it is gone (renamed
        or deleted) or cannot be read (then ``_problems`` says why)."""
        try:
            return packer.add_file(path)
        except NotRegularFile:
            self._others[path] = "replaced by something that is not a regular file while being archived: not archived"
        except OSError as exc:
            try:
                st = os.stat(path, follow_symlinks=False)
                stamp: Stamp | None = (st.st_size, st.st_mtime_ns)
            except OSError:
                stamp = None
            self._problems[path] = (stamp, f"cannot be read: {exc.strerror or exc}")
        return None

    def _store_series(self, key: tuple | None, paths: list[str], total: int, running: bool, expected: int = 0) -> None:
        """Store files in the series' packs (``key`` None: the files stored alone, packed together); ``expected``: their
        bytes as the scan saw them (the pack's buffer is sized to them at once, not grown by doubling)."""
        state = self._series.get(key)
        if state is None:
            state = self._series[key] = _Series(self.store.blobs.packer())
        state.packer.expected = expected
        state.touched = True
        for path in paths:
            stored = self._read_into(state.packer, path)
            if stored is not None:
                digest, data, size, stamp = stored
                self._problems.pop(path, None)
                self._finished(path, digest, data, size, stamp, total, running)
        if not running:
            state.packer.close()

    def _finished(
        self, path: str, digest: str, data: memoryview | None, size: int, stamp: Stamp, total: int, running: bool
    ) -> None:
        name = self._name(path)
        self._archived[path] = _Archived(name, digest, size, stamp)
        if self.on_archived is not None and data is not None:  # None: a large file, streamed
            self.on_archived(name, digest, data, running)
        if total and self.progress:
            with self._count_lock:
                self._done += 1
                self.progress(self._done, total)


#: The series key of a small dump's one pack, and what is small: the job's remaining files, together, under this.
_SMALL_DUMP = ("small dump",)
SMALL_DUMP_BYTES = 1 << 20


def largest_first(groups: list[tuple[Any, list[str]]], stamps: dict[str, Stamp]) -> list[tuple[Any, list[str]]]:
    """Groups of paths (series) in the order the pool should take them: the text series first (they hold the stage
    dumps the index parses beside the archive: parsed early, not after the archive's last pack), then the costliest
    first, so that the last to finish is a small one (the longest-processing-time rule). The cost is the bytes the
    scan saw plus ``_PER_FILE_BYTES`` a file (without a scan's sizes: as given). Ordered by file count, a 130 MB
    series of 45 dumps came after ten 17-22 MB ones of 47-57 and ran alone at the end: 0.27 s of a 0.76 s archive."""
    if not stamps:  # while the job runs: as given
        return groups
    return sorted(
        groups,
        key=lambda g: (not _holds_stage_dumps(g[0]), -sum(stamps[p][0] + _PER_FILE_BYTES for p in g[1] if p in stamps)),
    )


def _holds_stage_dumps(key: tuple | None) -> bool:
    """A module's series of HLO text: its before_optimizations and after_optimizations dumps are what ingest parses."""
    return key is not None and len(key) == 5 and key[4] == "text"


def _small(paths: list[str], stamps: dict[str, Stamp]) -> bool:
    return sum(stamps[p][0] for p in paths if p in stamps) < SMALL_DUMP_BYTES


def _link_text(path: str) -> str:
    """What a symbolic link says (the link itself; its target is never opened)."""
    try:
        return os.fsencode(os.readlink(path)).decode("utf-8", errors="backslashreplace")
    except OSError:
        return "?"
