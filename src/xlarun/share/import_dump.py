"""``import``: a dump made outside xlarun (a folder XLA_FLAGS=--xla_dump_to wrote, an archive of one, an
``xlarun export`` folder or an ``xlarun bundle``) becomes a run of kind ``import`` in the store.

A folder of per-host dump folders (``host0/``, ``host1/``, each what one process's ``--xla_dump_to`` wrote, and no
dump files beside them) becomes one run of many processes: the folders, in the order of the numbers in their
names, are processes 0, 1, ... (``dump/process-K/``, as a capture with ``processes: N`` lays them out).

The source is unpacked (refusing anything hostile: see safe_unpack.py) into the run's staging folder, laid
out as a capture's job would have written it, then archived and indexed by the same functions a capture uses
(:meth:`LocalStore.archiver`, :meth:`LocalStore.commit_run`, :meth:`LocalStore.ingest`).
Nothing is written outside the store, and a refused source leaves no trace in it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlarun.bounded_read import FileRefused, read_regular
from xlarun.errors import InputError, StoreError, write_trouble
from xlarun.hlo.process_dirs import MAX_PROCESSES, process_dir, process_of_dir
from xlarun.share.safe_unpack import UnpackLimits, archive_kind, unpack_dump_source
from xlarun.store.facade import LocalStore
from xlarun.store.manifest import Manifest, host_facts
from xlarun.store.rows import OUTPUT_DIRS, ModuleInfo, utc_now

#: The folder of xlarun's own files in an export or a bundle (manifest, spec, logs, bundle.json).
META_DIR = "_xlarun"
BUNDLE_MARKER = f"{META_DIR}/bundle.json"
_INCOMING = "incoming"  # below the staging folder, outside OUTPUT_DIRS: the archiver never sees it
_KEPT_METADATA = ("spec.yaml", "spec.resolved.json", "stdout.log", "stderr.log")
_FRAMEWORK_BY_NAME = (
    ("jit_", "jax"),
    ("pmap_", "jax"),
    ("a_inference_", "tensorflow"),
    ("cluster_", "tensorflow"),
    ("SyncTensorsGraph", "torch_xla"),
)


@dataclass
class ImportResult:
    """What an import made: the new run, its modules (main program first) and how long each step took."""

    run_id: str
    source: str
    source_kind: str  # folder, zip, tar, tar.gz, tar.zst, bundle
    files: int
    dump_bytes: int
    modules: list[ModuleInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bundle_module_id: int | None = None  # the module a bundle was made for
    timings_s: dict[str, float] = field(default_factory=dict)  # unpack, archive, index
    hosts: dict[str, int] = field(default_factory=dict)  # per-host folder -> the process it became


def import_dump(
    source: str | Path, store: LocalStore | None = None, *, name: str | None = None, limits: UnpackLimits | None = None
) -> ImportResult:
    """Import a dump folder, archive or bundle as a new run (kind ``import``) and index it.

    Raises :class:`HostileArchive` (an :class:`InputError`) for a refused source, with nothing kept.
    """
    source = Path(source).expanduser()
    store = store or LocalStore.open()
    run_id, staging = store.begin_run()
    try:
        t0 = time.monotonic()
        incoming = staging / _INCOMING
        report = unpack_dump_source(source, incoming, limits)
        if not report.files:
            raise InputError(
                f"{source} holds no files to import", "give the folder XLA_FLAGS=--xla_dump_to=DIR wrote, or an archive of it"
            )
        root = _dump_root(incoming)
        origin = _read_metadata(root / META_DIR, source)
        is_bundle = (root / BUNDLE_MARKER).is_file()
        hosts = {} if is_bundle else per_host_folders(root)
        warnings = origin.get("warnings", []) + _lay_out(root, staging, is_bundle, hosts)
        t1 = time.monotonic()
        with store.lock():  # shared, from archiving to the commit: gc cannot take this run's blobs meanwhile
            files = store.archiver(staging).finish()
            t2 = time.monotonic()
            if not files:
                raise InputError(
                    f"{source} holds no files to import",
                    "give the folder XLA_FLAGS=--xla_dump_to=DIR wrote, or an archive of it",
                )
            kind = "bundle" if is_bundle else report.kind
            metadata = {name_: text for name_, text in origin.get("files", {}).items()}
            manifest = _manifest(store, run_id, source, kind, name, origin, files, warnings, t2 - t0)
            if hosts:
                processes = {process_dir(k): folder for folder, k in hosts.items()}
                manifest.imported_from = {**(manifest.imported_from or {}), "processes": processes}
            metadata["manifest.json"] = manifest.to_json()
            if origin.get("manifest_text"):
                metadata["origin-manifest.json"] = origin["manifest_text"]
            shutil.rmtree(incoming, ignore_errors=True)
            _run_dir, unindexed = store.commit_indexed(run_id, staging, files, metadata)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        trouble = write_trouble(exc, f"importing {source.name} into {store.root} failed")
        if isinstance(exc, OSError | sqlite3.Error) and trouble is not None:
            raise trouble from None  # said as such, nothing kept
        raise
    if unindexed is not None:  # a full disk: the run is committed; the index catches up when next opened
        warnings.append(f"run {run_id} is imported but not yet indexed ({unindexed}); {store.NOT_YET_INDEXED_ADVICE}")
    t3 = time.monotonic()
    bundle = origin.get("bundle") or {}
    try:
        modules = store.index.modules(run_id)
    except (sqlite3.Error, StoreError):
        modules = []
    return ImportResult(
        run_id=run_id,
        source=str(source),
        source_kind=kind,
        files=len(files),
        dump_bytes=manifest.dump_bytes,
        modules=modules,
        warnings=warnings,
        bundle_module_id=(bundle.get("module") or {}).get("module_id"),
        timings_s={"unpack": round(t1 - t0, 3), "archive": round(t2 - t1, 3), "index": round(t3 - t2, 3)},
        hosts=hosts,
    )


def _dump_root(incoming: Path) -> Path:
    """The folder holding the dump: an archive of a folder has that one folder at its top."""
    root = incoming
    while True:
        if not root.is_dir():
            return incoming
        entries = list(root.iterdir())
        if len(entries) != 1 or not entries[0].is_dir() or entries[0].name in OUTPUT_DIRS or entries[0].name == META_DIR:
            return root
        if entries[0].name.startswith("module_"):  # a PJRT compile-input folder: part of the dump
            return root
        root = entries[0]


def per_host_folders(root: Path) -> dict[str, int]:
    """The per-host dump folders at the top of ``root`` with the process each becomes (``{"host0": 0, "host1": 1}``);
    empty unless every dump file at the top is in such a folder (folders already named ``process-K`` keep K)."""
    from xlarun.hlo.names import decode_dump_name

    def holds_dump(folder: Path) -> bool:
        return any(decode_dump_name(p.name).module_id is not None for p in folder.iterdir() if p.is_file())

    top = [p for p in root.iterdir() if p.name != META_DIR and p.name not in OUTPUT_DIRS and not p.is_symlink()]
    if any(p.is_file() and decode_dump_name(p.name).module_id is not None for p in top):
        return {}  # a dump at the top: one process's, as ever
    folders = [p.name for p in top if p.is_dir() and decode_dump_name(p.name).module_id is None and holds_dump(p)]
    if not folders or all(process_of_dir(f) is not None for f in folders):
        return {}  # none, or already laid out as processes (an export of a run of many processes)
    if len(folders) > MAX_PROCESSES:
        raise InputError(f"{len(folders)} per-host dump folders: a run holds at most {MAX_PROCESSES} processes")
    ordered = sorted(folders, key=lambda f: (_last_number(f), f))
    return {folder: k for k, folder in enumerate(ordered)}


def _last_number(name: str) -> int:
    numbers = re.findall(r"\d+", name)
    return int(numbers[-1]) if numbers else -1


def _lay_out(root: Path, staging: Path, is_bundle: bool, hosts: dict[str, int]) -> list[str]:
    """Move the dump's files where a capture's job writes them: XLA's files in dump/, tf_graphs/ ... beside;
    per-host folders (``hosts``) into dump/process-K/."""
    warnings: list[str] = []
    for entry in sorted(root.iterdir()):
        if entry.name == META_DIR:
            continue
        if is_bundle and entry.name != "dump":  # README.md, sources/: for people, not part of the dump
            continue
        if entry.name in hosts:
            os.rename(entry, staging / "dump" / process_dir(hosts[entry.name]))
        elif entry.is_dir() and entry.name in OUTPUT_DIRS:
            target = staging / entry.name
            target.rmdir()  # begin_run made it empty
            os.rename(entry, target)
        else:
            os.rename(entry, staging / "dump" / entry.name)
    if not any(_walk_files(staging / "dump")):
        warnings.append("no XLA dump files at the top of the source: only other outputs were imported")
    return warnings


def _walk_files(folder: Path) -> Iterator[str]:
    for _dirpath, _dirs, names in os.walk(folder):
        yield from names


def _read_metadata(meta: Path, source: Path) -> dict[str, Any]:
    """The original manifest, bundle description and spec/logs of an export or bundle (empty for a raw dump).
    A manifest or bundle description that is not what xlarun writes (nested deep, wrongly typed) is refused."""
    out: dict[str, Any] = {"files": {}}
    if not meta.is_dir():
        return out
    for name, key, check in (("manifest.json", "manifest", _check_manifest), ("bundle.json", "bundle", _check_bundle)):
        path = meta / name
        if path.is_file():
            text, value = _read_json(path, f"{META_DIR}/{name}", source)
            if isinstance(value, dict):
                problem = check(value)
                if problem:
                    raise _refused(source, f"{META_DIR}/{name}", problem)
                out[key] = value
                if key == "manifest":
                    out["manifest_text"] = text
            elif value is not None:
                raise _refused(source, f"{META_DIR}/{name}", f"is a JSON {type(value).__name__}, not an object")
    for name in _KEPT_METADATA:
        path = meta / name
        if path.is_file():
            out["files"][name] = _kept_text(path, out)
    return out


def _kept_text(path: Path, out: dict[str, Any]) -> str:
    """A spec or log of an export, read into memory: a log over :data:`_MAX_KEPT_BYTES` keeps its end, said in its
    first line and in the import's warnings."""
    size = path.stat().st_size
    text = read_regular(path, _MAX_KEPT_BYTES, tail=True).decode("utf-8", errors="replace")
    if size <= _MAX_KEPT_BYTES:
        return text
    out.setdefault("warnings", []).append(f"{META_DIR}/{path.name} is {size} bytes: only its last {_MAX_KEPT_BYTES} were kept")
    return f"[xlarun import: the first {size - _MAX_KEPT_BYTES} bytes of this file were left out]\n{text}"


#: What a manifest.json or bundle.json xlarun wrote may hold: no more, and no deeper.
_MAX_JSON_BYTES = 16 << 20
_MAX_JSON_DEPTH = 32
_MAX_KEPT_BYTES = 16 << 20  # of a spec or a log


def _refused(source: Path, name: str, problem: str) -> InputError:
    return InputError(
        f"refused {source.name}: {name} {problem}",
        f"is it an xlarun export or bundle? remove its {META_DIR}/ folder to import the dump alone",
    )


def _read_json(path: Path, name: str, source: Path) -> tuple[str, Any]:
    """The file's text and JSON value (None when it is not JSON: a raw dump may hold anything under that name)."""
    try:
        text = read_regular(path, _MAX_JSON_BYTES).decode("utf-8", errors="replace")
    except FileRefused as exc:
        raise _refused(source, name, f"is over {_MAX_JSON_BYTES >> 20} MiB" if exc.kind is None else exc.reason) from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise _refused(source, name, f"is nested more than {_MAX_JSON_DEPTH} deep") from None
    except ValueError:
        return text, None
    if _depth(value) > _MAX_JSON_DEPTH:
        raise _refused(source, name, f"is nested more than {_MAX_JSON_DEPTH} deep")
    return text, value


def _depth(value: Any) -> int:
    """How deep lists and objects nest in a JSON value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


_TEXT_KEYS = ("run_id", "kind", "name", "started", "ended", "spec_path", "cwd", "backend", "framework")
_TEXT_LIST_KEYS = ("command", "xla_flags", "tf_xla_flags")
_TEXT_MAP_KEYS = ("versions", "tags", "env_delta")
_OBJECT_KEYS = ("host", "git")


def _check_manifest(value: dict) -> str | None:
    """Why a manifest cannot be what xlarun wrote (a key of the wrong type), or None."""
    for key in _TEXT_KEYS:
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"has '{key}' of type {type(value[key]).__name__}, not a string"
    for key in _TEXT_LIST_KEYS:
        item = value.get(key)
        if item is not None and not (isinstance(item, list) and all(isinstance(v, str) for v in item)):
            return f"has '{key}' of type {type(item).__name__}, not a list of strings"
    for key in _TEXT_MAP_KEYS:
        item = value.get(key)
        nullable = key == "env_delta"
        if item is not None and not (
            isinstance(item, dict) and all(isinstance(v, str) or (nullable and v is None) for v in item.values())
        ):
            return f"has '{key}' of type {type(item).__name__}, not an object of strings"
    for key in _OBJECT_KEYS:
        if value.get(key) is not None and not isinstance(value[key], dict):
            return f"has '{key}' of type {type(value[key]).__name__}, not an object"
    return None


def _check_bundle(value: dict) -> str | None:
    """Why a bundle description cannot be what xlarun wrote, or None."""
    module = value.get("module")
    if module is None:
        return None
    if not isinstance(module, dict):
        return f"has 'module' of type {type(module).__name__}, not an object"
    module_id = module.get("module_id")
    if module_id is not None and (isinstance(module_id, bool) or not isinstance(module_id, int) or not 0 <= module_id < 1 << 31):
        return f"has 'module.module_id' {str(module_id)[:20]!r}, not a module number"
    return None


def _manifest(
    store: LocalStore,
    run_id: str,
    source: Path,
    kind: str,
    name: str | None,
    origin: dict,
    files: Any,
    warnings: list[str],
    took: float,
) -> Manifest:
    theirs = origin.get("manifest") or {}
    now = utc_now()
    xla_flags = [str(f) for f in theirs.get("xla_flags") or []]
    flags_from = "manifest" if theirs else None
    if not xla_flags:
        xla_flags = _flags_from_debug_options(store, files)
        flags_from = "debug_options" if xla_flags else None
    imported_from = {
        "path": str(source.resolve()),
        "kind": kind,
        "bytes": _size_of(source),
        "imported": now,
        "original_run_id": theirs.get("run_id"),
        "original_kind": theirs.get("kind"),
        "xla_flags_from": flags_from,
    }
    return Manifest(
        run_id=run_id,
        name=name or theirs.get("name") or _stem(source),
        status="succeeded",
        started=theirs.get("started") or now,
        ended=theirs.get("ended") or now,
        duration_s=round(took, 3),
        spec_path=theirs.get("spec_path"),
        command=[str(a) for a in theirs.get("command") or []],
        xlarun_command=list(sys.argv),
        cwd=theirs.get("cwd"),
        backend=theirs.get("backend") or "import",
        framework=theirs.get("framework") or _guess_framework(files),
        env_delta=theirs.get("env_delta") or {},
        xla_flags=xla_flags,
        tf_xla_flags=[str(f) for f in theirs.get("tf_xla_flags") or []],
        versions={str(k): str(v) for k, v in (theirs.get("versions") or {}).items()},
        host=theirs.get("host") or {},
        git=theirs.get("git"),
        warnings=warnings,
        tags={str(k): str(v) for k, v in (theirs.get("tags") or {}).items()},
        files=len(files),
        dump_bytes=sum(f.size for f in files),
        kind="import",
        imported_from={**imported_from, "by_host": host_facts().get("hostname")},
    )


def _stem(source: Path) -> str:
    name = source.resolve().name
    kind = archive_kind(source) if source.is_file() else None
    for suffix in (".tar.zst", ".tar.zstd", ".tar.gz", ".tgz", ".tar", ".zip"):
        if kind and name.lower().endswith(suffix):
            return name[: -len(suffix)] or name
    return name


def _size_of(source: Path) -> int:
    if source.is_file():
        return source.stat().st_size
    return sum(os.path.getsize(os.path.join(d, n)) for d, _s, names in os.walk(source) for n in names)


def _guess_framework(files: Any) -> str | None:
    from xlarun.hlo.names import decode_dump_name

    for stored in files:
        module = decode_dump_name(stored.path).module_name or ""
        for prefix, framework in _FRAMEWORK_BY_NAME:
            if module.startswith(prefix):
                return framework
    return None


def _flags_from_debug_options(store: LocalStore, files: Any) -> list[str]:
    """The non-default XLA flags of a raw dump, read back from a module's ``debug_options`` text proto."""
    for stored in files:
        if stored.path.endswith("debug_options"):
            return parse_debug_options(store.blobs.get(stored.digest).decode("utf-8", "replace"))
    return []


def parse_debug_options(text: str) -> list[str]:
    """``xla_dump_to: "/tmp/d"`` lines -> ``--xla_dump_to=/tmp/d`` (a DebugOptions text proto's scalar fields)."""
    flags = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key.startswith("xla_") or value.startswith("{"):
            continue
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        flags.append(f"--{key}={value}")
    return flags
