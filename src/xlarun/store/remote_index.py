"""Finding in a remote without downloading it: per-run catalogs, and a local mirror store built from them.

A push writes, beside a run's record, its **catalog**: the run's rows of the index (runs, files, modules, passes,
search terms, and what later stages added: op times, peak memory), as ``catalogs/<digest>.zst`` (zstd JSON named
by the BLAKE3 of its bytes), named in the run's index object ``runs/<run id>.json`` (key ``catalog``).

Commands given ``--remote NAME`` work on that remote's **mirror**: a store folder under
``$XDG_CACHE_HOME/xlarun/remotes/`` (default ``~/.cache``) whose runs are the remote's, each with its file list,
its folder's small files and its index rows, but no blob. Opening it lists ``runs/`` on the remote and mirrors the
runs it lacks from their index object, record, catalog and folder files (small objects, never a pack), every one
checked against its hash; a run gone from the remote leaves the mirror. A blob read from the mirror fetches the one
pack that holds it, or the delta that holds it and its base's pack (:mod:`xlarun.store.remote_fetch`), kept for the
next read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from xlarun.console import note
from xlarun.errors import StoreError
from xlarun.safe_names import checked_relative_path, checked_run_id
from xlarun.store.facade import LocalStore
from xlarun.store.index import SCHEMA_VERSION, Index
from xlarun.store.remote import ObjectStore, RemoteSpec
from xlarun.store.remote_fetch import MIRROR_MARKER, RUN_DELTAS, RUN_PACKS
from xlarun.store.remote_records import (
    ReadOnce,
    checked_record,
    fetch_verified,
    in_order_ahead,
    read_record,
    read_remote_json,
    read_run_object,
    remote_damage,
)
from xlarun.store.rows import StoredFile, listed_files

CATALOG_FORMAT = 1
#: The catalog kept in a mirrored run's folder: an index rebuilt (a new schema) is filled again from it.
RUN_CATALOG = "remote-catalog.json"
#: Transfers at once (boto3's clients are safe to share between threads; its pool is sized for them in remote.py).
WORKERS = 8
#: Runs whose rows a mirror writes in one transaction.
WRITE_BATCH = 64
_CORE = ("runs", "files", "modules", "passes")
_NOT_COPIED = {"meta", "text_counts", "term_values", "module_terms"}


def run_catalog(index: Index, run_id: str) -> bytes:
    """A run's rows of the index, as the JSON a push sends (search terms as (module, kind, value))."""
    conn = index.conn
    tables: dict[str, dict] = {}
    for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table' ORDER BY name"):
        columns = [c[1] for c in conn.execute(f"PRAGMA table_info({name})")]
        if name in _NOT_COPIED or "run_id" not in columns:
            continue
        rows = [list(r) for r in conn.execute(f"SELECT * FROM {name} WHERE run_id = ?", (run_id,))]
        tables[name] = {"sql": sql, "columns": columns, "rows": rows}
    terms = [
        list(r)
        for r in conn.execute(
            "SELECT module_id, kind, value FROM terms WHERE run_id = ? ORDER BY module_id, kind, value", (run_id,)
        )
    ]
    catalog = {"format": CATALOG_FORMAT, "schema": SCHEMA_VERSION, "run": run_id, "tables": tables, "terms": terms}
    return json.dumps(catalog, separators=(",", ":"), sort_keys=True).encode()


def _write_catalogs(index: Index, catalogs: list[dict]) -> None:
    """Mirrored runs' rows written into the mirror's index (replacing any they had), all in one transaction (with
    one a run, a first sync of 600 runs spent 30 of its 33 s in the index's writes)."""
    with index.transaction():
        for catalog in catalogs:
            index.delete_run_rows(catalog["run"])
            _insert_catalog(index, catalog)


def _insert_catalog(index: Index, catalog: dict) -> None:
    run_id, conn = catalog["run"], index.conn
    for name, table in sorted(catalog["tables"].items()):
        if name not in _CORE:  # a table a later stage adds: made here as the pushing store had it
            sql = str(table["sql"])
            if (
                not re.fullmatch(rf"CREATE TABLE {name} ?\([^;]*\)(?: WITHOUT ROWID)?", sql, re.DOTALL | re.IGNORECASE)
                or " AS " in sql.upper()
            ):
                continue  # one plain table definition of that name, nothing else, from a remote object
            conn.execute("CREATE TABLE IF NOT EXISTS " + sql[len("CREATE TABLE ") :])
        have = {c[1] for c in conn.execute(f"PRAGMA table_info({name})")}
        picked = [i for i, c in enumerate(table["columns"]) if c in have]
        if not picked or not table["rows"]:
            continue
        columns = ", ".join(f'"{table["columns"][i]}"' for i in picked)
        marks = ", ".join("?" * len(picked))
        conn.executemany(
            f"INSERT OR REPLACE INTO {name} ({columns}) VALUES ({marks})",
            [[row[i] for i in picked] for row in table["rows"]],
        )
    terms = index.term_writer(run_id)
    by_module: dict[int, set[tuple[str, str]]] = {}
    for module_id, kind, value in catalog["terms"]:
        by_module.setdefault(module_id, set()).add((kind, value))
    for module_id, found in by_module.items():
        terms.add(module_id, found)
    terms.flush()


def mirror_root(spec: RemoteSpec) -> Path:
    """Where a remote's mirror lives: one folder per remote name and URL (a name pointed elsewhere starts afresh)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    where = hashlib.sha256(f"{spec.url}\n{spec.endpoint or ''}".encode()).hexdigest()[:12]
    return cache / "xlarun" / "remotes" / f"{spec.name if not spec.name.startswith('s3:') else 'url'}-{where}"


def open_mirror(spec: RemoteSpec, remote: ObjectStore | None = None) -> LocalStore:
    """The remote's mirror store, brought up to date with the runs on the remote (their small objects only)."""
    root = mirror_root(spec)
    marker = root / MIRROR_MARKER
    if not marker.exists():  # read by the blob store as it opens: a blob it lacks is fetched from the remote
        LocalStore.open(root, create=True).close()
        entry = {"name": spec.name, "bucket": spec.bucket, "prefix": spec.prefix, "endpoint": spec.endpoint}
        tmp = root / f".{MIRROR_MARKER}.{os.getpid()}"
        tmp.write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, marker)
    store = LocalStore.open(root, create=False)
    MirrorSync(store, remote or ObjectStore(spec)).sync()
    return store


class MirrorSync:
    """Brings a mirror store's runs in line with a remote's ``runs/``: many runs at a time, and each run's small
    objects at once (:data:`WORKERS` transfers in flight), every one checked against its name."""

    def __init__(self, store: LocalStore, remote: ObjectStore):
        self.store, self.remote = store, ReadOnce(remote)
        self.added: list[str] = []
        self.removed: list[str] = []
        self._transfers = ThreadPoolExecutor(WORKERS)

    def sync(self) -> None:
        on_remote = {n[:-5] for n in self.remote.names("runs/") if n.endswith(".json")}
        index = Index.open(self.store.root / "index.sqlite")  # not store.index: its reconcile would read blobs
        runs = ThreadPoolExecutor(WORKERS)  # a run's index object first, then its other objects at once
        try:
            here = set(self.store.run_ids())
            for run_id in sorted(here - on_remote):  # deleted on the remote (gc --remote): gone here too
                index.forget_run(run_id)
                shutil.rmtree(self.store.runs_dir / run_id, ignore_errors=True)
                self.removed.append(run_id)
            for run_id in sorted((here & on_remote) - index.run_ids()):  # an index made anew: fill it again
                try:
                    _write_catalogs(index, [json.loads((self.store.runs_dir / run_id / RUN_CATALOG).read_text("utf-8"))])
                except (OSError, ValueError, KeyError, TypeError):  # a cache: mirrored again below
                    shutil.rmtree(self.store.runs_dir / run_id, ignore_errors=True)
                    here.discard(run_id)
            # runs written here a batch at a time while the next ones are fetched, a bounded number ahead
            batch: list[tuple[str, Path, dict]] = []
            try:
                for staged in in_order_ahead(runs, self._stage, sorted(on_remote - here), 4 * WORKERS):
                    batch += [staged] if staged is not None else []
                    if len(batch) >= WRITE_BATCH:
                        self._add(index, batch)
                        batch = []
            finally:  # the runs staged before a damaged one are mirrored all the same
                self._add(index, batch)
        finally:
            runs.shutdown(cancel_futures=True)
            self._transfers.shutdown(cancel_futures=True)
            index.close()

    def _add(self, index: Index, staged: list[tuple[str, Path, dict]]) -> None:
        if not staged:
            return
        _write_catalogs(index, [catalog for _run, _folder, catalog in staged])  # rows first: never a folder without
        for run_id, folder, _catalog in staged:
            try:
                os.rename(folder, self.store.runs_dir / run_id)
                self.added.append(run_id)
            except OSError:  # another process mirrored it meanwhile
                shutil.rmtree(folder, ignore_errors=True)

    def _stage(self, run_id: str) -> tuple[str, Path, dict] | None:
        """A run's folder made in the mirror's staging area from its small objects, and its catalog."""
        checked_run_id(run_id, "a run on the remote")
        index = read_remote_json(self.remote, f"runs/{run_id}.json", None)
        if index is None:
            return None
        if not isinstance(index.get("catalog"), str):
            note(f"run {run_id} on the remote has no catalog (pushed by an older xlarun): `xlarun pull {run_id}` fetches it")
            return None
        record_read = self._transfers.submit(read_record, self.remote, index, run_id)  # whole, or a delta
        catalog_read = self._transfers.submit(read_run_object, self.remote, index, run_id, "catalog")  # whole, or a delta
        record, catalog = record_read.result(), catalog_read.result() or {}
        files, folder, packs = _checked(record, catalog, run_id)
        _files, _folder, _packs, deltas = checked_record(record, run_id)
        reads = {rel: self._transfers.submit(fetch_verified, self.remote, f"files/{d}.zst", d) for rel, d in folder.items()}
        staging = self.store.root / "staging" / f".mirror-{run_id}-{os.getpid()}-{threading.get_ident()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            for rel, read in reads.items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(read.result())
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / "files.json").write_text(json.dumps(record["files"], separators=(",", ":")), encoding="utf-8")
        holding = {name: [files[i].digest for i in members] for name, members in packs.items()}
        (staging / RUN_PACKS).write_text(json.dumps(holding, separators=(",", ":")), encoding="utf-8")
        as_deltas = {ref.digest: [ref.base, ref.base_pack] for ref in deltas.values()}
        (staging / RUN_DELTAS).write_text(json.dumps(as_deltas, separators=(",", ":")), encoding="utf-8")
        (staging / RUN_CATALOG).write_text(json.dumps(catalog, separators=(",", ":")), encoding="utf-8")
        return run_id, staging, catalog


def _checked(record: dict, catalog: dict, run_id: str) -> tuple[list[StoredFile], dict, dict]:
    """The record's files, folder and packs, and the catalog's shape, checked before anything of them is written."""
    key = f"the record of run {run_id}"
    if record.get("run") != run_id or catalog.get("run") != run_id or catalog.get("format") != CATALOG_FORMAT:
        raise remote_damage(key)
    if catalog.get("schema") != SCHEMA_VERSION:
        raise StoreError(
            f"run {run_id}'s catalog is of index schema {catalog.get('schema')}, this xlarun reads {SCHEMA_VERSION}",
            f"`xlarun pull {run_id}` fetches the run whole and indexes it here",
        )
    files = listed_files(record.get("files"), key)
    folder, packs = record.get("folder"), record.get("packs")
    if not isinstance(folder, dict) or not isinstance(packs, dict) or not isinstance(catalog.get("tables"), dict):
        raise remote_damage(key)
    for rel in folder:
        checked_relative_path(rel, key, error=lambda m, h: remote_damage(key))
        if rel in ("files.json", RUN_PACKS, RUN_CATALOG):
            raise remote_damage(key)
    for name, members in packs.items():
        if len(name) != 64 or not all(c in "0123456789abcdef" for c in name) or not isinstance(members, list):
            raise remote_damage(key)
        if not isinstance(members, list) or not all(isinstance(i, int) and 0 <= i < len(files) for i in members):
            raise remote_damage(key)
    for name in catalog["tables"]:
        if not (isinstance(name, str) and name.replace("_", "").isalnum()):
            raise remote_damage(f"the catalog of run {run_id}")
    return files, folder, packs
