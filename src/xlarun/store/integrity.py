"""What a committed run's file list must agree with, and what gc may never delete.

A run's ``files.json`` is the truth of what it holds; its manifest records how many files it listed when it was
committed, and the index holds a row per file. A list that is missing, unreadable, or shorter than both say is
damage (a hand edit, a disk error), never "a run with no files": ``check`` names it, and ``gc`` refuses to collect
while any run is damaged and keeps every blob that a list or the index still names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlarun.errors import os_error_words
from xlarun.store.records import DamagedRun
from xlarun.store.store_json import checked_file_entries, parse_store_json

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
        try:
            text = listing.read_text()
            listed = len(checked_file_entries(parse_store_json(text)))
        except FileNotFoundError:
            problems.append({"run": run_id, "path": "files.json", "problem": "files.json is missing"})
            continue
        except PermissionError as exc:
            why = f"{UNREADABLE_LIST}: {os_error_words(exc)}"
            problems.append({"run": run_id, "path": "files.json", "problem": why})
            continue
        except (OSError, ValueError) as exc:
            problems.append({"run": run_id, "path": "files.json", "problem": f"files.json is damaged ({exc})"})
            continue
        try:
            recorded = store.manifest(run_id).get("files")
        except DamagedRun as exc:
            problems.append({"run": run_id, "path": "manifest.json", "problem": exc.why})
            continue
        except PermissionError:  # what it records is unknown: the list is checked against the index alone
            recorded = None
        for source, count in (("its manifest", recorded), ("the index", indexed.get(run_id))):
            if isinstance(count, int) and count != listed:
                problems.append(
                    {"run": run_id, "path": "files.json", "problem": f"files.json lists {listed} file(s), {source} {count}"}
                )
                break
    return problems


def indexed_digests(index: Index) -> set[str]:
    """Every digest the index's rows name: kept by gc even where a run's own list was damaged."""
    return {row[0] for row in index.conn.execute("SELECT DISTINCT digest FROM files")}
