"""The store's records: how a run ended and where its output lives, what the index says of a run, a module, a file
and a pass (read from its rows), and the opcodes that rank a run's modules. No pydantic: every command reads these."""

from __future__ import annotations

import enum
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from xlarun.bounded_read import MAX_LIST_BYTES, read_store_file
from xlarun.errors import StoreError
from xlarun.safe_names import checked_relative_path, store_damage
from xlarun.store.store_json import StoreJsonDamage, checked_file_entries, parse_store_json, unreadable_words

T = TypeVar("T")

#: Sub-folders of a run folder that hold what the job wrote (all archived, all indexed).
OUTPUT_DIRS = ("dump", "tf_graphs", "jax_ir", "torch_xla", "poplar")


class RunStatus(str, enum.Enum):
    """How a job ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # exited non-zero
    TIMED_OUT = "timed_out"  # killed at the spec's deadline
    INTERRUPTED = "interrupted"  # SIGINT (Ctrl-C), SIGTERM or SIGHUP to xlarun (the manifest names it)
    INCOMPLETE = "incomplete"  # xlarun was killed before the commit; recovered from staging by `xlarun recover`
    ERROR = "error"  # could not be started at all (missing interpreter, dead Docker daemon...)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class StoredFile:
    """One archived file of a run. ``path`` is relative to the run's output root: XLA dump files bare
    (``module_0000.jit_f.before_optimizations.txt``), other outputs under their folder (``tf_graphs/...``)."""

    path: str
    digest: str
    size: int


def read_file_list(path: Path) -> list[StoredFile]:
    """The files a run's (or a staging folder's) ``files.json`` lists, read within bounds (no link, no FIFO, at most
    :data:`~xlarun.bounded_read.MAX_LIST_BYTES`), parsed within a depth bound and checked (types, sizes, no path twice,
    none leaving the run); FileNotFoundError when there is none, else StoreError naming the damage."""
    hint = "restore it from a backup, or `xlarun rm RUN_ID` gives the run up"
    data = read_store_file(path, MAX_LIST_BYTES, hint=hint)
    try:
        items = parse_store_json(data)
    except ValueError as exc:  # not UTF-8, not JSON, nested past the bound
        raise store_damage(f"{path} is damaged: {exc}", hint) from None
    return listed_files(items, str(path))


def listed_files(items: object, source: str) -> list[StoredFile]:
    """The files a parsed ``files.json`` (or ``archived.json``'s ``files``) lists: each entry of the types xlarun
    writes, no path twice, each path below the run's folder; StoreError (exit 1, damage) naming ``source`` otherwise."""
    try:
        entries = checked_file_entries(items)
    except StoreJsonDamage as exc:
        raise store_damage(f"{source} is damaged: {exc}", "it was changed by hand; `xlarun rm RUN_ID` removes the run") from None
    return [StoredFile(checked_relative_path(path, source, store_damage), digest, size) for path, digest, size in entries]


@dataclass(frozen=True)
class FileNote:
    """Something about one path of a dump folder a user should know: not archived (``archived`` False) and
    why, or archived with a caveat (a name that is not UTF-8, a file still being written)."""

    path: str
    archived: bool
    why: str

    def to_json(self) -> dict:
        return {"path": self.path, "archived": self.archived, "why": self.why}


@dataclass
class CheckReport:
    """What ``Store.check`` found: counts, and each damaged file as {run, path, problem}."""

    runs: int
    files: int
    blobs: int
    packs: int
    damaged: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Leftover:
    """The staging folder of a capture whose xlarun is gone (killed). ``recoverable`` when it holds something
    of the job's (dump files, an archived list, logs); ``what`` says what, in words."""

    path: Path
    recoverable: bool
    what: str

    @property
    def run_id(self) -> str:
        return self.path.name


#: Opcodes that do a model's heavy work. Modules are ranked by how many they hold, then by size:
#: by size alone, a threefry RNG module (hundreds of bit operations) outranks a training step.
COMPUTE_OPCODES = frozenset(
    {
        "dot",
        "convolution",
        "custom-call",
        "fft",
        "triangular-solve",
        "cholesky",
        "ragged-dot",
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
    }
)


def count_compute_ops(histogram: dict[str, int]) -> int:
    """How many of a module's instructions are heavy compute or collectives."""
    return sum(n for op, n in histogram.items() if op in COMPUTE_OPCODES)


@dataclass
class RunInfo:
    """One run as the index lists it (a row of ``runs``)."""

    run_id: str
    name: str
    kind: str
    status: str
    exit_code: int | None
    error: str | None
    backend: str
    framework: str | None
    started: str
    ended: str
    duration_s: float
    n_files: int
    dump_bytes: int
    n_modules: int
    batch_id: str | None
    matrix: dict | None
    tags: dict

    @property
    def made_by_xlarun(self) -> str | None:
        """What xlarun made this run for, when it made it for its own purposes ("a bisect rerun"): such a run is
        never what a plain name, 'latest' or a module REF without a run resolves to; its id still names it."""
        return "a bisect rerun" if "bisect" in (self.tags or {}) else None


@dataclass
class FileInfo:
    """One file of a module as the index lists it: which stage or pass dump it is."""

    path: str
    digest: str
    size: int
    kind: str
    format: str | None
    stage: str | None
    step: int | None
    pipeline: str | None
    after_pass: str | None
    before_pass: str | None


@dataclass
class PassInfo:
    """One pass dump of a module: its step, pipeline and pass, and the instructions after it."""

    step: int
    pipeline: str | None
    after_pass: str | None
    before_pass: str | None
    path: str
    instr_count: int | None


@dataclass
class ModuleInfo:
    """One module of a run as the index holds it: its stages, counts, signature and fingerprint."""

    run_id: str
    module_id: int
    name: str | None
    backend: str | None
    stages: list[str]
    n_pass_dumps: int
    n_files: int
    instr_before: int | None
    instr_after: int | None
    compute_ops: int  # dot, convolution, custom-call, collectives... (the ranking key)
    opcodes_before: dict[str, int]
    opcodes_after: dict[str, int]
    entry_signature: str | None
    fingerprint: str | None
    hlo_bytes: int
    elided_constants: bool
    parse_error: str | None
    own_code: bool | None = None  # the user's code (True), only the framework's (False), untold (None)
    process: int | None = None  # the job's process that compiled it, in a run of many processes (else None)
    files: list[FileInfo] = field(default_factory=list)
    passes: list[PassInfo] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``module_0006.jit_f``: how XLA names it in files."""
        return f"module_{self.module_id:04d}" + (f".{self.name}" if self.name else "")

    @property
    def ref(self) -> str:
        """A REF that always names exactly this module: ``RUN/module_0006``."""
        return f"{self.run_id}/module_{self.module_id:04d}"


@dataclass
class FindHit:
    """A module ``find`` matched, with what matched and of which kind."""

    run_id: str
    module_id: int
    module_name: str | None
    kind: str
    matches: list[str]


def json_or_none(text: str | None) -> Any:
    return json.loads(text) if text else None


class DamagedRun(StoreError):
    """A committed run's manifest or file list cannot be read or is not what xlarun writes: named with its run and
    the fix. The index leaves such a run out (``reindex`` and every reconcile name it) until it is mended or removed."""

    def __init__(self, run_id: str, name: str, why: str):
        super().__init__(
            f"run {run_id} is damaged: its {name} is {why}",
            f"restore runs/{run_id}/{name} from a backup, or `xlarun rm {run_id}` removes the run",
        )
        self.run_id, self.why = run_id, f"its {name} is {why}"


def run_json(run_id: str, path: Path, limit: int, check: Callable[[Any], T]) -> T:
    """A committed run's JSON file (its manifest or file list), read within ``limit`` (no link, no FIFO: StoreError
    naming it), parsed within a depth bound and checked; :class:`DamagedRun` naming the run and the file when it is
    not what xlarun writes (a permission problem is the caller's to name)."""
    try:
        data = read_store_file(path, limit)
    except PermissionError:
        raise
    except (OSError, ValueError) as exc:
        raise DamagedRun(run_id, path.name, unreadable_words(exc)) from None
    try:
        return check(parse_store_json(data))
    except StoreJsonDamage as exc:
        raise DamagedRun(run_id, path.name, str(exc)) from None


class IndexDamage(StoreError):
    """A row of the index holds what xlarun never writes (a NULL, text where a number belongs, broken JSON): the
    index is derived data, rebuilt from the runs on disk by ``xlarun reindex``."""

    def __init__(self, table: str, column: str, value: object, row: sqlite3.Row):
        what = "NULL" if value is None else f"{type(value).__name__} {str(value)[:20]!r}"
        where = f"run {row['run_id']}"
        if table in ("modules", "passes"):
            where += f", module {row['module_id']}"
        elif table == "files":
            where += f", file {row['path']}"
        super().__init__(
            f"the store's index is damaged: {table}.{column} is {what} ({where})",
            "`xlarun reindex` rebuilds the index from the runs on disk",
        )


_TEXT: tuple[type, ...] = (str,)
_INT: tuple[type, ...] = (int,)
_NUMBER: tuple[type, ...] = (int, float)


def _checked(row: sqlite3.Row, table: str) -> None:
    """Raise :class:`IndexDamage` for a required column that is NULL or any column of the wrong type."""
    for column, allowed in _ALLOWED[table]:
        if type(row[column]) not in allowed:
            raise IndexDamage(table, column, row[column], row)


def _json_column(row: sqlite3.Row, table: str, column: str, kind: type, empty: str) -> Any:
    try:
        value = parse_store_json(row[column] or empty)
    except (ValueError, TypeError):
        raise IndexDamage(table, column, row[column], row) from None
    if not isinstance(value, kind):
        raise IndexDamage(table, column, row[column], row)
    return value


_RUN_REQUIRED = {c: _TEXT for c in ("run_id", "name", "kind", "status", "backend", "started", "ended")} | {
    "n_files": _INT, "dump_bytes": _INT, "n_modules": _INT, "duration_s": _NUMBER,
}  # fmt: skip
_RUN_OPTIONAL = {"exit_code": _INT, "error": _TEXT, "framework": _TEXT, "batch_id": _TEXT}
_MODULE_REQUIRED = {"run_id": _TEXT, "module_id": _INT, "n_pass_dumps": _INT, "n_files": _INT} | {
    c: _TEXT for c in ("stages", "opcodes_before", "opcodes_after")  # JSON, always written
}  # fmt: skip
_MODULE_OPTIONAL = {c: _TEXT for c in ("name", "backend", "entry_signature", "fingerprint", "parse_error")} | {
    c: _INT for c in ("instr_before", "instr_after", "compute_ops", "hlo_bytes", "elided_constants", "own_code", "process")
}  # fmt: skip
_FILE_REQUIRED = {"run_id": _TEXT, "path": _TEXT, "digest": _TEXT, "size": _INT, "kind": _TEXT}
_FILE_OPTIONAL = {c: _TEXT for c in ("format", "stage", "pipeline", "after_pass", "before_pass")} | {"step": _INT}
_PASS_REQUIRED = {"run_id": _TEXT, "module_id": _INT, "step": _INT, "path": _TEXT}
_PASS_OPTIONAL = {"pipeline": _TEXT, "after_pass": _TEXT, "before_pass": _TEXT, "instr_count": _INT}


_JSON_COLUMNS = {
    "runs": {"matrix": "object", "tags": "object"},
    "modules": {"stages": "array", "opcodes_before": "object", "opcodes_after": "object"},
}
_SQL_TYPES = {str: "'text'", int: "'integer'", float: "'real'"}
_Columns = dict[str, tuple[type, ...]]
_CHECKED: dict[str, tuple[_Columns, _Columns]] = {
    "runs": (_RUN_REQUIRED, _RUN_OPTIONAL),
    "modules": (_MODULE_REQUIRED, _MODULE_OPTIONAL),
    "files": (_FILE_REQUIRED, _FILE_OPTIONAL),
    "passes": (_PASS_REQUIRED, _PASS_OPTIONAL),
}


#: column -> the Python types a row may hold there (NoneType where NULL is allowed): checked by type() lookup, fast
_ALLOWED = {
    table: tuple(
        (column, frozenset(kinds) | ({type(None)} if may_be_null else set()))
        for columns, may_be_null in ((required, False), (optional, True))
        for column, kinds in columns.items()
    )
    for table, (required, optional) in _CHECKED.items()
}


def damage_condition(table: str) -> str:
    """A SQL condition true for the rows of ``table`` the *_from_row functions refuse for a NULL or a type (so a
    scan for damage runs in SQLite, not row by row in Python)."""
    required, optional = _CHECKED[table]
    clauses = []
    for columns, may_be_null in ((required, False), (optional, True)):
        for column, kinds in columns.items():
            types = ", ".join(_SQL_TYPES[k] for k in kinds)
            clauses.append(f"typeof({column}) NOT IN ({types}{', ' + repr('null') if may_be_null else ''})")
    for column, kind in _JSON_COLUMNS.get(table, {}).items():  # CASE: json_type() is never asked of broken JSON
        clauses.append(
            f"CASE WHEN typeof({column}) = 'text' AND {column} != '' THEN "
            f"(CASE WHEN json_valid({column}) THEN json_type({column}) != '{kind}' ELSE 1 END) ELSE 0 END"
        )
    return " OR ".join(clauses)


def run_from_row(row: sqlite3.Row) -> RunInfo:
    _checked(row, "runs")
    return RunInfo(
        row["run_id"],
        row["name"],
        row["kind"],
        row["status"],
        row["exit_code"],
        row["error"],
        row["backend"],
        row["framework"],
        row["started"],
        row["ended"],
        row["duration_s"],
        row["n_files"],
        row["dump_bytes"],
        row["n_modules"],
        row["batch_id"],
        _json_column(row, "runs", "matrix", dict, "null") if row["matrix"] else None,
        _json_column(row, "runs", "tags", dict, "{}") if row["tags"] else {},
    )


def module_from_row(row: sqlite3.Row) -> ModuleInfo:
    _checked(row, "modules")
    return ModuleInfo(
        row["run_id"],
        row["module_id"],
        row["name"],
        row["backend"],
        _json_column(row, "modules", "stages", list, "[]"),
        row["n_pass_dumps"],
        row["n_files"],
        row["instr_before"],
        row["instr_after"],
        row["compute_ops"] or 0,
        _json_column(row, "modules", "opcodes_before", dict, "{}"),
        _json_column(row, "modules", "opcodes_after", dict, "{}"),
        row["entry_signature"],
        row["fingerprint"],
        row["hlo_bytes"] or 0,
        bool(row["elided_constants"]),
        row["parse_error"],
        None if row["own_code"] is None else bool(row["own_code"]),
        row["process"],
    )


def file_from_row(r: sqlite3.Row) -> FileInfo:
    _checked(r, "files")
    return FileInfo(
        r["path"],
        r["digest"],
        r["size"],
        r["kind"],
        r["format"],
        r["stage"],
        r["step"],
        r["pipeline"],
        r["after_pass"],
        r["before_pass"],
    )


def pass_from_row(r: sqlite3.Row) -> PassInfo:
    _checked(r, "passes")
    return PassInfo(r["step"], r["pipeline"], r["after_pass"], r["before_pass"], r["path"], r["instr_count"])
