"""What a committed run's file list must agree with, and what gc may never delete.

A run's ``files.json`` is the truth of what it holds; its manifest records how many files it listed when it was
committed, and the index holds a row per file. A list that is missing, unreadable, or shorter than both say is
damage (a hand edit, a disk error), never "a run with no files": ``check`` names it, and ``gc`` refuses to collect
while any run is damaged and keeps every blob that a list or the index still names.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from xlarun.bounded_read import MAX_MANIFEST_BYTES, FileRefused, open_regular
from xlarun.errors import ExitCode, StoreError
from xlarun.store.rows import DamagedRun, read_file_list
from xlarun.store.runs import RUN_METADATA

if TYPE_CHECKING:
    from xlarun.store.index import Index
    from xlarun.store.runs import RunStore


#: How a file list this user may not read is named (a permission problem, not damage).
UNREADABLE_LIST = "files.json cannot be read"


def file_list_problems(store: RunStore, index: Index | None) -> list[dict]:
    """One ``{run, path, problem}`` per committed run whose file list is missing, unreadable or disagrees with the
    count its manifest or the index records."""
    indexed = dict(index.conn.execute("SELECT run_id, n_files FROM runs").fetchall()) if index is not None else {}
    problems = []
    for run_id in store.run_ids():
        folder = store.runs_dir / run_id
        listing = folder / "files.json"
        try:  # bounded, no links, no FIFOs; every entry checked, every path below the run
            listed = len(read_file_list(listing))
        except FileNotFoundError:
            problems.append({"run": run_id, "path": "files.json", "problem": "files.json is missing"})
            continue
        except StoreError as exc:
            if exc.exit_code == ExitCode.ENVIRONMENT:  # this user may not read it: a permission problem, not damage
                why = exc.message.rsplit(": ", 1)[-1]  # "permission denied to user NAME"
                problems.append({"run": run_id, "path": "files.json", "problem": f"{UNREADABLE_LIST}: {why}"})
            else:
                problems.append({"run": run_id, "path": "files.json", "problem": f"files.json is damaged ({exc.message})"})
            continue
        try:
            recorded = store.manifest(run_id).get("files")
        except DamagedRun as exc:
            problems.append({"run": run_id, "path": "manifest.json", "problem": exc.why})
            continue
        except (PermissionError, StoreError):  # what it records is unknown: the list is checked against the index alone
            recorded = None
        for source, count in (("its manifest", recorded), ("the index", indexed.get(run_id))):
            if isinstance(count, int) and count != listed:
                problems.append(
                    {"run": run_id, "path": "files.json", "problem": f"files.json lists {listed} file(s), {source} {count}"}
                )
                break
    return problems


def metadata_problems(store: RunStore) -> list[dict]:
    """One ``{run, path, problem}`` per metadata file of a committed run that is not a regular file (a FIFO, a
    link, a folder), cannot be opened, or (but for a log) is larger than xlarun reads: opened without waiting or
    following links, never read."""
    problems = []
    for run_id in store.run_ids():
        for name in RUN_METADATA:
            try:
                fd, st = open_regular(store.runs_dir / run_id / name)
                os.close(fd)
                if st.st_size > MAX_MANIFEST_BYTES and not name.endswith(".log"):
                    raise FileRefused(name, f"is larger than {MAX_MANIFEST_BYTES >> 20} MiB, the most xlarun reads of it")
            except FileNotFoundError:
                continue
            except OSError as exc:
                why = exc.reason if isinstance(exc, FileRefused) else f"cannot be read ({exc.strerror or exc})"
                problems.append({"run": run_id, "path": name, "problem": f"{name} {why}"})
    return problems


def indexed_digests(index: Index) -> set[str]:
    """Every digest the index's rows name: kept by gc even where a run's own list was damaged."""
    return {row[0] for row in index.conn.execute("SELECT DISTINCT digest FROM files")}
