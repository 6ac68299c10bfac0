"""The SQLite index of a store: runs, files, modules, passes, and the terms ``find`` searches.

Terms are kept as distinct values (``term_values``, each once across all runs) and the modules that hold
them (``module_terms``); the ``terms`` view joins the two. Values no module holds any more (after ``rm``)
stay in ``term_values``: they cost a little space and are never reported.

Schema and queries only: the rows are written by :mod:`xlarun.store.ingest`, which reads the runs from the store.
The index is derived data: ``runs/`` in the store is the truth, and :func:`xlarun.store.ingest.reconcile` adds any
committed run the index lacks (after a crash between commit and indexing) and drops rows of runs that are gone.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from xlarun.errors import StoreError, XlarunError
from xlarun.store import index_health
from xlarun.store.index_health import (
    DamagedIndex,
    IndexConnection,
    check_columns_and_id,
    checked_stamp,
    make_tables_unless_checked,
    refuse_foreign_wal,
)
from xlarun.store.pack_table import cannot_write, open_wal
from xlarun.store.rows import (
    FileInfo,
    FindHit,
    IndexDamage,
    ModuleInfo,
    RunInfo,
    damage_condition,
    file_from_row,
    module_from_row,
    pass_from_row,
    run_from_row,
)
from xlarun.store.term_search import find_terms

if TYPE_CHECKING:
    from xlarun.store.summaries import ModuleSummary

SCHEMA_VERSION = 6  # 4: "digest" columns (were "sha256"); 5: modules.own_code; 6: modules.process


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, name TEXT, kind TEXT, status TEXT, exit_code INTEGER, error TEXT,
    backend TEXT, framework TEXT, started TEXT, ended TEXT, duration_s REAL,
    n_files INTEGER, dump_bytes INTEGER, n_modules INTEGER, batch_id TEXT, matrix TEXT, tags TEXT, spec_path TEXT
);
CREATE INDEX IF NOT EXISTS runs_name ON runs(name);
CREATE INDEX IF NOT EXISTS runs_batch ON runs(batch_id);
CREATE TABLE IF NOT EXISTS files (
    run_id TEXT, path TEXT, digest TEXT, size INTEGER, kind TEXT, format TEXT,
    module_id INTEGER, module_name TEXT, stage TEXT, backend TEXT, step INTEGER, pipeline TEXT,
    after_pass TEXT, before_pass TEXT,
    PRIMARY KEY (run_id, path)
);
CREATE INDEX IF NOT EXISTS files_module ON files(run_id, module_id);
CREATE TABLE IF NOT EXISTS modules (
    run_id TEXT, module_id INTEGER, name TEXT, backend TEXT, stages TEXT, n_pass_dumps INTEGER, n_files INTEGER,
    instr_before INTEGER, instr_after INTEGER, compute_ops INTEGER, opcodes_before TEXT, opcodes_after TEXT,
    entry_signature TEXT, fingerprint TEXT, hlo_bytes INTEGER, elided_constants INTEGER, parse_error TEXT,
    own_code INTEGER, process INTEGER,
    PRIMARY KEY (run_id, module_id)
);
CREATE INDEX IF NOT EXISTS modules_name ON modules(name);
CREATE INDEX IF NOT EXISTS modules_fingerprint ON modules(fingerprint);
CREATE TABLE IF NOT EXISTS passes (
    run_id TEXT, module_id INTEGER, step INTEGER, pipeline TEXT, after_pass TEXT, before_pass TEXT,
    path TEXT, instr_count INTEGER,
    PRIMARY KEY (run_id, module_id, step, pipeline)
);
CREATE TABLE IF NOT EXISTS text_counts (digest TEXT PRIMARY KEY, instructions INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS term_values (term_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, value TEXT NOT NULL, UNIQUE (kind, value));
CREATE TABLE IF NOT EXISTS module_terms (
    term_id INTEGER, run_id TEXT, module_id INTEGER,
    PRIMARY KEY (term_id, run_id, module_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS module_terms_module ON module_terms(run_id, module_id);
CREATE VIEW IF NOT EXISTS terms AS
    SELECT mt.run_id, mt.module_id, tv.kind, tv.value FROM module_terms mt JOIN term_values tv USING (term_id);
"""

TERM_KINDS = ("opcode", "name", "op_name", "source")


class Index:
    """The index database of one store."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn = conn
        self.path = path
        self.read_only = False  # opened read-only (the disk is full): reading works, writing says why not
        self.left_out: dict[str, str] = {}  # runs on disk the last reconcile could not index, and why

    @classmethod
    def open(cls, path: Path) -> Index:
        try:
            refuse_foreign_wal(path)  # before any connection that could checkpoint its pages into the index
            # a new file's WAL switch waits out a lock; a table dropped by hand is not made again empty; the tables
            # checked whole before and changed by nothing since are not checked again
            checked: list[bool] = []
            conn = open_wal(path, lambda c: checked.append(make_tables_unless_checked(c, path, SCHEMA)), IndexConnection)
            conn.index_path = path  # type: ignore[attr-defined]
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                conn.close()
                path.unlink()  # derived data: rebuild from runs/
                return cls.open(path)
            if not checked[-1]:
                check_columns_and_id(conn, path, SCHEMA)
        except (sqlite3.DatabaseError, DamagedIndex) as exc:
            if isinstance(exc, DamagedIndex) and not cannot_write(path):
                raise
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise StoreError(f"cannot open the index {path}: {exc}", "another xlarun may hold it; try again") from None
            if why := cannot_write(path):  # not damage: SQLite cannot make its side files; reading needs none
                try:
                    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
                    conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                except sqlite3.DatabaseError:
                    raise StoreError(
                        f"cannot open the index {path}: {why}", "free space on that disk, or copy the store somewhere writable"
                    ) from None
                conn.row_factory = sqlite3.Row
                index = cls(conn, path)
                index.read_only = True
                return index
            raise DamagedIndex(f"cannot open the index {path}: {exc}") from None
        conn.row_factory = sqlite3.Row
        index = cls(conn, path)
        if not checked[-1]:
            index.try_set_meta("checked_schema", checked_stamp(conn, SCHEMA))
        return index

    def close(self) -> None:
        self.conn.close()

    # --- writing -----------------------------------------------------------------------------

    def run_ids(self) -> set[str]:
        """The ids of the runs the index holds."""
        return {row[0] for row in self.conn.execute("SELECT run_id FROM runs")}

    def run_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM runs").fetchone()[0]

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def try_set_meta(self, key: str, value: str) -> None:
        """Note ``value`` if the index can be written at once; a note nothing depends on never waits for a writer."""
        try:
            self.conn.execute("PRAGMA busy_timeout = 0")
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
        except sqlite3.OperationalError:  # locked by a writer, or a read-only disk: the next reader notes it
            pass
        finally:
            self.conn.execute("PRAGMA busy_timeout = 60000")  # Index.open's timeout=60

    def forget_run(self, run_id: str | None) -> None:
        with self.transaction():
            self.delete_run_rows(run_id)

    def delete_run_rows(self, run_id: str | None) -> None:
        """(In a transaction.) Every row of a run, in every table that has a run_id column."""
        for table in ("runs", "files", "modules", "passes", "module_terms", *self._extra_run_tables()):
            self.conn.execute(f"DELETE FROM {table} WHERE run_id IS ?", (run_id,))  # IS: a damaged NULL too

    def _extra_run_tables(self) -> list[str]:
        # tables other stages add (replays...) that carry a run_id column
        names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        core = {"meta", "runs", "files", "modules", "passes", "text_counts", "term_values", "module_terms"}
        out = []
        for name in names:
            if name in core:
                continue
            cols = {c[1] for c in self.conn.execute(f"PRAGMA table_info({name})")}
            if "run_id" in cols:
                out.append(name)
        return out

    def transaction(self) -> _Transaction:
        return _Transaction(self.conn)

    def write_run(self, run_id: str, manifest: dict, decoded: list, n_modules: int) -> None:
        """(In a transaction.) The run's row and its files' rows, replacing any the run had."""
        self.conn.execute("DELETE FROM runs WHERE run_id=?", (run_id,))
        for table in ("files", "modules", "passes", "module_terms"):
            self.conn.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
        files = [f for f, _n in decoded]
        self.conn.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                manifest.get("name", "?"),
                manifest.get("kind", "capture"),
                manifest.get("status", "unknown"),
                manifest.get("exit_code"),
                manifest.get("error"),
                manifest.get("backend", "local"),
                manifest.get("framework"),
                manifest.get("started", ""),
                manifest.get("ended", ""),
                manifest.get("duration_s", 0.0),
                len(files),
                sum(f.size for f in files),
                n_modules,
                manifest.get("batch_id"),
                json.dumps(manifest.get("matrix")) if manifest.get("matrix") else None,
                json.dumps(manifest.get("tags") or {}),
                manifest.get("spec_path"),
            ),
        )
        self.conn.executemany(
            "INSERT INTO files VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    run_id,
                    f.path,
                    f.digest,
                    f.size,
                    n.kind,
                    n.format,
                    n.module_id,
                    n.module_name,
                    n.stage,
                    n.backend,
                    n.step,
                    n.pipeline,
                    n.after_pass,
                    n.before_pass,
                )
                for f, n in decoded
            ],
        )

    def write_module(self, run_id: str, summary: ModuleSummary) -> None:
        """(In a transaction.) One module's row and its pass timeline (a :class:`ModuleSummary`)."""
        self.conn.execute(
            "INSERT INTO modules VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                summary.module_id,
                summary.name,
                summary.backend,
                json.dumps(summary.stages),
                summary.n_pass_dumps,
                summary.n_files,
                summary.instr_before,
                summary.instr_after,
                summary.compute_ops,
                json.dumps(summary.opcodes_before),
                json.dumps(summary.opcodes_after),
                summary.entry_signature,
                summary.fingerprint,
                summary.hlo_bytes,
                int(summary.elided_constants),
                summary.parse_error,
                None if summary.own_code is None else int(summary.own_code),
                summary.process,
            ),
        )
        self.conn.executemany(
            "INSERT INTO passes VALUES (?,?,?,?,?,?,?,?)",
            [
                (run_id, summary.module_id, p.step, p.pipeline, p.after_pass, p.before_pass, p.path, p.instr_count)
                for p in summary.passes
            ],
        )

    def term_writer(self, run_id: str) -> _TermWriter:
        """Writes modules' search terms in batches (``add(module_id, terms)``, then ``flush()``)."""
        return _TermWriter(self.conn, run_id)

    def known_text_counts(self, digests: set[str]) -> dict[str, int]:
        """Instruction counts of pass dumps already counted (by content: re-runs repeat most passes)."""
        wanted = sorted(digests)
        known: dict[str, int] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self.conn.execute(
                f"SELECT digest, instructions FROM text_counts WHERE digest IN ({','.join('?' * len(chunk))})", chunk
            )
            known.update((digest, n) for digest, n in rows)
        return known

    def remember_text_counts(self, counts: dict[str, int]) -> None:
        self.conn.executemany("INSERT OR IGNORE INTO text_counts VALUES (?,?)", list(counts.items()))

    # --- reading -----------------------------------------------------------------------------

    def runs(
        self, batch_id: str | None = None, name: str | None = None, kind: str | None = None, last: int | None = None
    ) -> list[RunInfo]:
        """Runs, oldest first; ``last``: only the newest ``last`` of them (read alone, however many runs there are)."""
        where, params = _run_filter(batch_id=batch_id, name=name, kind=kind)
        if last is not None:
            rows = self.conn.execute(f"SELECT * FROM runs{where} ORDER BY run_id DESC LIMIT ?", [*params, max(last, 0)])
            return [run_from_row(row) for row in reversed(rows.fetchall())]
        return [run_from_row(row) for row in self.conn.execute(f"SELECT * FROM runs{where} ORDER BY run_id", params)]

    def newest_runs(self, limit: int) -> list[RunInfo]:
        """The newest ``limit`` runs, newest first (one indexed read, however many runs there are)."""
        return [run_from_row(r) for r in self.conn.execute("SELECT * FROM runs ORDER BY run_id DESC LIMIT ?", (limit,))]

    def user_runs_with_module_named(self, fragment: str) -> list[str]:
        """Ids of the runs the user made (not bisect reruns) with a module whose name contains ``fragment``."""
        rows = self.conn.execute(
            "SELECT DISTINCT m.run_id FROM modules m JOIN runs r ON r.run_id = m.run_id"
            " WHERE instr(m.name, ?) > 0 AND instr(COALESCE(r.tags, ''), '\"bisect\"') = 0 ORDER BY m.run_id",
            (fragment,),
        )
        return [row[0] for row in rows]

    def runs_by_id_prefix(self, prefix: str, limit: int) -> list[RunInfo]:
        """Runs whose id starts with ``prefix`` (at most ``limit``), oldest first, by the primary key's order."""
        # bounded above too: with fewer than ``limit`` matches the scan stops at the last id the prefix can begin,
        # not at the end of the table (a whole id in the middle of 100,000 runs read half of them)
        rows = self.conn.execute(
            "SELECT * FROM runs WHERE run_id >= ? AND run_id < ? AND substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT ?",
            (prefix, prefix + "\U0010ffff", len(prefix), prefix, limit),
        )
        return [run_from_row(r) for r in rows]

    def count_runs(self, batch_id: str | None = None, name: str | None = None) -> int:
        """How many runs (of a batch, of a spec name)."""
        where, params = _run_filter(batch_id=batch_id, name=name)
        return int(self.conn.execute(f"SELECT COUNT(*) FROM runs{where}", params).fetchone()[0])

    def batch_ids(self) -> list[str]:
        """Every batch id, oldest batch (by its first run) first."""
        sql = "SELECT batch_id FROM runs WHERE batch_id IS NOT NULL AND batch_id != '' GROUP BY batch_id ORDER BY MIN(run_id), batch_id"
        return [row[0] for row in self.conn.execute(sql)]

    def files_outside_modules(self, run_id: str) -> list[tuple[str, int]]:
        """(kind, count) of a run's files that belong to no module (logs, TF graphs, reports...), by kind."""
        sql = "SELECT kind, COUNT(*) FROM files WHERE run_id=? AND module_id IS NULL GROUP BY kind ORDER BY kind"
        return [(kind, count) for kind, count in self.conn.execute(sql, (run_id,))]

    def run(self, run_id: str) -> RunInfo:
        row = self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise XlarunError(f"run {run_id} is not indexed", "run `xlarun reindex`")
        return run_from_row(row)

    def modules(self, run_id: str) -> list[ModuleInfo]:
        """A run's modules, the main program first: modules with the user's code before those untold and
        those of only the framework's code (``own_code``), then most compute ops (dot, convolution...), then
        most instructions."""
        rows = self.conn.execute(
            "SELECT * FROM modules WHERE run_id=? ORDER BY COALESCE(own_code * 2, 1) DESC, compute_ops DESC, COALESCE(instr_before, instr_after, -1) DESC, hlo_bytes DESC, module_id",
            (run_id,),
        )
        return [module_from_row(row) for row in rows]

    def module(self, run_id: str, module_id: int, with_files: bool = True) -> ModuleInfo:
        row = self.conn.execute("SELECT * FROM modules WHERE run_id=? AND module_id=?", (run_id, module_id)).fetchone()
        if row is None:
            raise XlarunError(f"run {run_id} has no module {module_id}", "`xlarun modules` lists them")
        info = module_from_row(row)
        if with_files:
            info.files = [
                file_from_row(r)
                for r in self.conn.execute(
                    "SELECT * FROM files WHERE run_id=? AND module_id=? ORDER BY step IS NOT NULL, step, path",
                    (run_id, module_id),
                )
            ]
            info.passes = [
                pass_from_row(r)
                for r in self.conn.execute(
                    "SELECT * FROM passes WHERE run_id=? AND module_id=? ORDER BY step, pipeline", (run_id, module_id)
                )
            ]
        return info

    def damage(self, tables: tuple[str, ...] = ("runs", "modules")) -> IndexDamage | None:
        """The first row of ``tables`` (runs, modules, passes, files) holding what xlarun never writes, or None."""
        convert = {"runs": run_from_row, "modules": module_from_row, "passes": pass_from_row, "files": file_from_row}
        try:
            for table in tables:
                for row in self.conn.execute(f"SELECT * FROM {table} WHERE {damage_condition(table)} LIMIT 1"):
                    convert[table](row)  # raises, saying what is wrong
        except IndexDamage as exc:
            return exc
        return None

    def run_files(self, run_id: str) -> list[FileInfo]:
        return [file_from_row(r) for r in self.conn.execute("SELECT * FROM files WHERE run_id=? ORDER BY path", (run_id,))]

    def find(
        self,
        text: str,
        kinds: tuple[str, ...] = TERM_KINDS,
        run_id: str | None = None,
        exact: bool = False,
        limit_matches: int = 5,
    ) -> list[FindHit]:
        """Modules containing a term: an opcode, an instruction name, an op_name or a source location.

        Opcodes match exactly; the other kinds match as case-sensitive substrings unless ``exact``.
        """
        hits = find_terms(self.conn, text, kinds, run_id, exact, limit_matches)
        if not hits:  # a module row whose keys are damaged joins no term: say so, not "no module holds it"
            sql = "SELECT * FROM modules WHERE typeof(run_id) != 'text' OR typeof(module_id) != 'integer' LIMIT 1"
            [module_from_row(row) for row in self.conn.execute(sql)]  # raises IndexDamage
        return hits


class _TermWriter:
    """Writes a run's search terms in batches: each batch goes into a temporary table, then two set
    statements add the new values and the module links (not two statements per term). A module's terms
    are written once however many batches hold them."""

    BATCH = 2000

    def __init__(self, conn: sqlite3.Connection, run_id: str):
        self.conn, self.run_id = conn, run_id
        self.written: dict[int, set[tuple[str, str]]] = defaultdict(set)
        self.rows: list[tuple[int, str, str]] = []
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS new_terms (module_id INTEGER, kind TEXT, value TEXT)")
        conn.execute("DELETE FROM new_terms")

    def add(self, module_id: int, terms: set[tuple[str, str]] | frozenset[tuple[str, str]]) -> None:
        written = self.written[module_id]
        new = terms - written
        written |= new
        self.rows.extend((module_id, kind, value) for kind, value in new)
        if len(self.rows) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        self.conn.executemany("INSERT INTO new_terms VALUES (?,?,?)", self.rows)
        self.rows = []
        self.conn.execute(
            "INSERT OR IGNORE INTO term_values (kind, value) SELECT kind, value FROM new_terms"
        )  # no DISTINCT: a repeat is ignored, cheaper than sorting
        self.conn.execute(
            "INSERT OR IGNORE INTO module_terms SELECT t.term_id, ?, n.module_id FROM new_terms n JOIN term_values t ON t.kind = n.kind AND t.value = n.value",
            (self.run_id,),
        )
        self.conn.execute("DELETE FROM new_terms")


class _Transaction:
    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> Literal[False]:
        if not exc_type:
            index_health.rewrite_index_id_page(self.conn)
            self.conn.execute("COMMIT")
            return False
        if self.conn.in_transaction:  # SQLite may have rolled back itself (a full disk): no second error to mask it
            self.conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and any(
            words in str(exc) for words in ("readonly", "disk is full", "disk I/O error")
        ):
            where = self.conn.execute("PRAGMA database_list").fetchone()[2]
            why = cannot_write(Path(where)) if where else None
            raise StoreError(
                f"cannot write the index {where}: {why or exc}",
                "free space on that disk (`xlarun rm` and `xlarun gc` free the store's)"
                if why == "the disk is full"
                else "writing needs a writable store: copy it somewhere writable",
            ) from None
        return False


def _run_filter(**columns: str | None) -> tuple[str, list[str]]:
    """`` WHERE a=? AND b=?`` and its parameters, for the columns given a value."""
    given = {k: v for k, v in columns.items() if v}
    return (" WHERE " + " AND ".join(f"{k}=?" for k in given) if given else ""), list(given.values())
