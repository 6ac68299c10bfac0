"""``bundle``: one module of a run as a single .zip for a bug report, and reading such a zip back.

Layout of a bundle (the ``xlarun export`` layout, so ``xlarun import`` reads it as it reads an export)::

    README.md              what each file is, versions, flags, the commands that reproduce it
    dump/                  the module's dump files, with XLA's names
    _xlarun/bundle.json    which module, which files (the marker ``import`` looks for)
    _xlarun/manifest.json  the run's manifest, secrets redacted
    _xlarun/spec.yaml      the spec, secrets redacted (and spec.resolved.json)
    sources/               with --with-sources: the Python files the module's metadata names
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from xlarun import __version__
from xlarun.bounded_read import MAX_MANIFEST_BYTES, FileRefused, read_regular, read_store_json
from xlarun.capture.flags import redact_env
from xlarun.errors import InputError
from xlarun.replay.options import ReplayOptions
from xlarun.replay.runner_argv import PLATFORMS, runner_command
from xlarun.safe_names import checked_relative_path, relative_path_problem
from xlarun.share.import_dump import BUNDLE_MARKER, META_DIR, import_dump
from xlarun.store.facade import LocalStore
from xlarun.store.rows import FileInfo, ModuleInfo

#: Past this size a bundle is hard to attach (GitHub takes 25 MB): the warning says what to drop.
WARN_BYTES = 25 * 1000 * 1000
BUNDLE_FORMAT = 1
_SOURCE_LIMIT = 1 << 20

#: One line per kind (and stage) of file, for the README.
_WHAT = {
    ("hlo", "before_optimizations"): "the module as the framework handed it to XLA (before any HLO pass)",
    ("hlo", "after_optimizations"): "the module after XLA's HLO passes: what was compiled to machine code",
    ("buffer-assignment", None): "where every buffer of the optimized module lives (XLA's buffer assignment)",
    ("memory-usage-report", None): "peak memory and the buffers that make it up",
    ("debug-options", None): "the non-default DebugOptions (XLA flags) of this compile, as a text proto",
    ("snapshot", None): "HloSnapshot: the module, one execution's real arguments and its result",
    ("pass", None): "the module right after one HLO pass",
}
_FORMAT_WORDS = {"text": "HLO text", "proto": "HloProto (binary)"}


@dataclass
class BundleOptions:
    """What goes into a bundle beyond the module's stage dumps and reports."""

    snapshot: bool = True
    snapshot_limit_bytes: int = 20 << 20
    passes: bool = False
    with_sources: bool = False
    redact_paths: bool = False


@dataclass
class BundleEntry:
    """One file in the zip: its path there, what it is, and its size."""

    path: str
    what: str
    size: int


@dataclass
class BundleResult:
    """The written zip, what it holds, and what a user should know (size warnings, left-out files)."""

    path: Path
    zip_bytes: int
    entries: list[BundleEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def pick_bundle_files(module: ModuleInfo, options: BundleOptions) -> tuple[list[FileInfo], list[str]]:
    """The module's files that go into its bundle, and notes on what was left out."""
    notes: list[str] = []
    picked = []
    for f in module.files:
        stage = "after_optimizations" if (f.stage or "").endswith("after_optimizations") else f.stage
        if f.kind == "hlo" and stage in ("before_optimizations", "after_optimizations") and f.format in ("text", "proto"):
            picked.append(f)
        elif f.kind in ("buffer-assignment", "memory-usage-report", "debug-options"):
            picked.append(f)
        elif f.kind == "pass" and options.passes:
            picked.append(f)
    snapshots = sorted((f for f in module.files if f.kind == "snapshot"), key=lambda f: (f.size, f.path))
    if snapshots and options.snapshot:
        small = [f for f in snapshots if f.size <= options.snapshot_limit_bytes]
        if small:
            picked.append(small[0])
        else:
            notes.append(
                f"the snapshot ({snapshots[0].size / 1e6:.1f} MB) is over the snapshot limit and was left out: replays run on generated arguments"
            )
    elif snapshots:
        notes.append("the snapshot was left out (--no-snapshot): replays run on generated arguments")
    else:
        notes.append("the run captured no snapshot of this module: replays run on generated arguments")
    return sorted(picked, key=lambda f: f.path), notes


def make_bundle(
    store: LocalStore,
    module: ModuleInfo,
    output: str | Path | None = None,
    options: BundleOptions | None = None,
    *,
    about: str | None = None,
    recorded: dict | None = None,
) -> BundleResult:
    """Write ``module``'s bundle to ``output`` (default ``<module name>.bundle.zip`` here); ``about``: what the module
    is, said in the README instead of its run (a module that was a file); ``recorded``: its run's versions, host, flags."""
    options = options or BundleOptions()
    t0 = time.monotonic()
    output = Path(output or f"{module.name or f'module_{module.module_id:04d}'}.bundle.zip")
    if output.suffix.lower() != ".zip":
        raise InputError(f"{output} does not end in .zip", "bundles are zip files (GitHub takes them as attachments)")
    manifest = store.manifest(module.run_id) | (recorded or {})
    run_dir = store.run_path(module.run_id)
    files, notes = pick_bundle_files(module, options)
    redact = _path_redactor(manifest, run_dir) if options.redact_paths else (lambda data: data)

    contents: list[tuple[BundleEntry, bytes]] = []
    for f in files:
        data = redact(store.blobs.get(f.digest))
        contents.append((BundleEntry(f"dump/{f.path}", _describe(f), len(data)), data))
    if options.with_sources:
        sources, source_notes = _module_sources(store, module)
        notes += source_notes
        contents += [
            (BundleEntry(f"sources/{name}", "a Python source the module's metadata names", len(data)), redact(data))
            for name, data in sources
        ]
    meta = {
        "manifest.json": (
            json.dumps(redact_manifest(manifest), indent=2).encode(),
            "the run's manifest (versions, flags, host), secrets redacted",
        ),
        "spec.yaml": (_read_spec(run_dir), "the run spec, secrets redacted"),
        "spec.resolved.json": (_read_resolved(run_dir), "the spec as xlarun resolved it, secrets redacted"),
    }
    for name, (data, what) in meta.items():
        if data:
            data = redact(data)
            contents.append((BundleEntry(f"{META_DIR}/{name}", what, len(data)), data))
    if options.passes:  # the pass dumps' reading: what xlarun bisect found in them
        from xlarun.bisect.history import bisections_for, record_json

        for record in bisections_for(store, module.run_id, module.module_id):
            data = redact(json.dumps(record_json(record), indent=1).encode())
            what = f"a bisection of this module ({record.result.mode} mode, {record.result.verdict}" + (
                f", culprit {record.result.culprit_pass})" if record.result.culprit_pass else ")"
            )
            contents.append((BundleEntry(f"{META_DIR}/bisections/{record.bisect_id}.json", what, len(data)), data))
    description = {
        "format": BUNDLE_FORMAT,
        "xlarun": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "module": {
            "run_id": module.run_id,
            "module_id": module.module_id,
            "name": module.name,
            "backend": module.backend,
            "entry_signature": module.entry_signature,
            "fingerprint": module.fingerprint,
        },
        "options": {
            "snapshot": options.snapshot,
            "passes": options.passes,
            "with_sources": options.with_sources,
            "redact_paths": options.redact_paths,
        },
        "files": [{"path": e.path, "what": e.what, "size": e.size} for e, _ in contents],
    }
    marker = json.dumps(description, indent=2).encode()
    contents.append(
        (BundleEntry(BUNDLE_MARKER, "which module this bundle holds (read by `xlarun import` / `replay`)", len(marker)), marker)
    )
    readme = redact(render_readme(module, manifest, [e for e, _ in contents], notes, options, output.name, about).encode())
    contents.insert(0, (BundleEntry("README.md", "this file", len(readme)), readme))

    _write_zip(output, contents)
    size = output.stat().st_size
    warnings = [n for n in notes if "left out" in n and "--no-snapshot" not in n]
    if size > WARN_BYTES:
        warnings.append(_size_advice(size, [e for e, _ in contents], options))
    return BundleResult(output, size, [e for e, _ in contents], warnings, round(time.monotonic() - t0, 3))


def _write_zip(output: Path, contents: list[tuple[BundleEntry, bytes]]) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
            for entry, data in contents:
                info = zipfile.ZipInfo(checked_relative_path(entry.path, "a bundle entry"), date_time=time.gmtime()[:6])
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                archive.writestr(info, data)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)


def _describe(f: FileInfo) -> str:
    stage = "after_optimizations" if (f.stage or "").endswith("after_optimizations") else f.stage
    what = _WHAT.get((f.kind, stage)) or _WHAT.get((f.kind, None)) or f.kind
    if f.kind == "pass" and f.after_pass:
        what = f"the module right after pass {f.after_pass} (step {f.step})"
    fmt = _FORMAT_WORDS.get(f.format or "")
    return f"{what}; {fmt}" if fmt and f.kind in ("hlo", "pass") else what


def _size_advice(size: int, entries: list[BundleEntry], options: BundleOptions) -> str:
    parts: dict[str, int] = {}
    for e in entries:
        key = (
            "pass dumps (leave out --passes)"
            if "after pass" in e.what
            else "the snapshot (--no-snapshot, or a lower --snapshot-limit-mb)"
            if e.what.startswith("HloSnapshot")
            else "Python sources (leave out --with-sources)"
            if e.path.startswith("sources/")
            else "protos (the text dumps say the same)"
            if e.path.endswith(".pb")
            else None
        )
        if key:
            parts[key] = parts.get(key, 0) + e.size
    biggest = sorted(parts.items(), key=lambda kv: -kv[1])
    advice = ", ".join(f"{k}: {v / 1e6:.1f} MB unpacked" for k, v in biggest) or "nothing optional is in it"
    return f"the bundle is {size / 1e6:.1f} MB, over the 25 MB GitHub takes; to shrink it drop {advice}"


# --- redaction ---------------------------------------------------------------------------------------


def redact_manifest(manifest: dict) -> dict:
    """The manifest with secret-looking variables hidden (flags.py's rules) in its environment and spec."""
    out = dict(manifest)
    out["env_delta"] = redact_env(manifest.get("env_delta") or {})
    return out


def _redact_spec_env(spec: dict) -> dict:
    if isinstance(spec.get("env"), dict):
        spec = {**spec, "env": redact_env({str(k): (None if v is None else str(v)) for k, v in spec["env"].items()})}
    return spec


def _read_spec(run_dir: Path) -> bytes:
    import yaml

    from xlarun.capture.spec_reader import read_spec_file, read_yaml
    from xlarun.errors import SpecError

    path = run_dir / "spec.yaml"
    if not path.is_file():
        return b""
    try:  # the reader's bounds: a run folder's spec may have been replaced since the capture read it
        spec, _node = read_yaml(read_spec_file(path), str(path))
    except SpecError:
        return b"# the spec could not be read back to redact it, so it is left out\n"
    if not isinstance(spec, dict):
        return b""
    return ("# secrets redacted by xlarun bundle\n" + yaml.safe_dump(_redact_spec_env(spec), sort_keys=False)).encode()


def _read_resolved(run_dir: Path) -> bytes:
    resolved = _resolved_spec(run_dir)
    if isinstance(resolved.get("spec"), dict):
        resolved["spec"] = _redact_spec_env(resolved["spec"])
    return json.dumps(resolved, indent=2).encode() if resolved else b""


def _resolved_spec(run_dir: Path) -> dict:
    """The run's ``spec.resolved.json``, read within bounds ({} when there is none, or it holds no object)."""
    path = run_dir / "spec.resolved.json"
    resolved = read_store_json(path, MAX_MANIFEST_BYTES) if path.exists() else {}
    return resolved if isinstance(resolved, dict) else {}


def _path_redactor(manifest: dict, run_dir: Path) -> Callable[[bytes], bytes]:
    """A function that replaces the home and work folders in bytes by same-length placeholders (protos stay well-formed)."""
    resolved = _resolved_spec(run_dir)
    folders = {str(Path.home()): "HOME"}
    for value in (manifest.get("cwd"), resolved.get("workdir"), (manifest.get("git") or {}).get("root"), os.getcwd()):
        if value:
            folders.setdefault(str(value), "WORK")
    pairs = []
    for folder, label in sorted(folders.items(), key=lambda kv: -len(kv[0])):
        raw = folder.rstrip("/").encode()
        if raw.count(b"/") < 1 or len(raw) < 4:  # '/' or '/w': replacing it would mangle every path
            continue
        placeholder = (b"/REDACTED-" + label.encode())[: len(raw)].ljust(len(raw), b"_")
        pairs.append((re.compile(re.escape(raw) + rb"(?=[/\"'\s:)]|$)"), placeholder))

    def redact(data: bytes) -> bytes:
        for pattern, placeholder in pairs:
            data = pattern.sub(placeholder, data)
        return data

    return redact


# --- sources ---------------------------------------------------------------------------------------


def _module_sources(store: LocalStore, module: ModuleInfo) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The Python files named by the metadata of the module's unoptimized text, read from this machine."""
    from xlarun.hlo import scan_hlo_text

    texts = [f for f in module.files if f.kind == "hlo" and f.format == "text"]
    names: set[str] = set()
    for f in texts:
        facts = scan_hlo_text(store.blobs.get(f.digest))
        for where in getattr(facts, "sources", ()) or ():
            names.add(where.rsplit(":", 1)[0] if where.rsplit(":", 1)[-1].isdigit() else where)
    out, notes = [], []
    for name in sorted(names):
        path = Path(name)
        if relative_path_problem(str(path).lstrip("/")):  # '..' in it would leave the bundle's sources/ folder
            notes.append(f"source {name!r} named by the metadata is no path a bundle can hold: left out")
            continue
        try:
            out.append((str(path).lstrip("/"), read_regular(path, _SOURCE_LIMIT, follow_links=True)))  # no FIFO, no /dev/zero
        except FileRefused as exc:
            notes.append(f"source {name} {exc.reason if exc.kind else 'is over 1 MiB'}: left out")
        except OSError:
            notes.append(f"source {name} named by the metadata is not on this machine: left out")
    if not names:
        notes.append("the module's metadata names no source files")
    return out, notes


# --- README ------------------------------------------------------------------------------------------


def render_readme(
    module: ModuleInfo,
    manifest: dict,
    entries: list[BundleEntry],
    notes: list[str],
    options: BundleOptions,
    zip_name: str,
    about: str | None = None,
) -> str:
    """The README.md inside a bundle: what each file is, versions and flags, and how to reproduce."""
    versions = manifest.get("versions") or {}
    shown_versions = (
        ", ".join(f"{k} {v}" for k, v in versions.items() if k not in ("python_executable", "probe_error")) or "not recorded"
    )
    flags = manifest.get("xla_flags") or []
    replay_flags = [f for f in flags if not f.startswith("--xla_dump")]
    dumps = [e.path for e in entries if e.path.startswith("dump/")]

    def first(*patterns: str) -> str | None:
        for pattern in patterns:
            for path in dumps:
                if re.search(pattern, path):
                    return path
        return None

    before_txt = first(r"before_optimizations\.txt$")
    after_txt = first(r"after_optimizations\.txt$")
    snapshot = first(r"snapshot.*\.pb$")
    lines = [
        f"# XLA bug-report bundle: {module.label}",
        "",
        (
            f"Made by xlarun {__version__}. {about} "
            if about
            else f"Made by xlarun {__version__} from run `{module.run_id}` ({manifest.get('name', '?')}, "
            f"framework {manifest.get('framework') or '?'}, backend {module.backend or '?'}). "
        )
        + f"Entry signature: `{module.entry_signature or '?'}`; "
        + f"{module.instr_before if module.instr_before is not None else '?'} instructions before optimizations, "
        + (f"{module.instr_after} after." if module.instr_after is not None else "no optimized dump."),
        "",
        "## Files",
        "",
        "| file | what it is | bytes |",
        "|---|---|---:|",
        *[f"| `{e.path}` | {e.what} | {e.size} |" for e in entries if e.path != "README.md"],
        "",
        "## Versions and flags",
        "",
        f"- versions: {shown_versions}",
        f"- host: {(manifest.get('host') or {}).get('platform', '?')}",
        f"- XLA_FLAGS: `{' '.join(flags) or '(none recorded)'}`",
    ]
    if manifest.get("tf_xla_flags"):
        lines.append(f"- TF_XLA_FLAGS: `{' '.join(manifest['tf_xla_flags'])}`")
    if manifest.get("command"):
        lines.append(f"- the job: `{' '.join(manifest['command'])}`")
    lines += [
        "",
        "## Reproduce",
        "",
        "With xlarun (and its `jax` extra for replay), no import needed:",
        "",
        "```",
        f"xlarun replay {zip_name}          # compile and run it again, compare with the snapshot's result",
        f"xlarun show {zip_name}            # stages, instruction counts, opcodes",
        f"xlarun import {zip_name}          # keep it in your store: modules, find, diff, report",
        "```",
        "",
        "With XLA's own tools (built from source: `bazel build //xla/tools:run_hlo_module //xla/tools/multihost_hlo_runner:hlo_runner_main`), after unzipping:",
        "",
        "```",
    ]
    commands, left_out = runner_lines(module.backend, snapshot, before_txt, after_txt, replay_flags)
    lines += [
        *commands,
        "```",
        "",
        "`run_hlo_module` exits 0 when the outputs match the reference, 255 when they differ.",
        "",
        "## Left out",
        "",
        *[f"- {n}" for n in notes],
        *[f"- {n}" for n in left_out],
    ]
    if not options.with_sources:
        lines.append(
            "- the Python sources the module's metadata names (they may be private; `xlarun bundle --with-sources` adds them)"
        )
    if not options.passes:
        lines.append("- the per-pass dumps (`xlarun bundle --passes` adds them when the run captured them)")
    lines.append(
        "- paths: home and work folders replaced by same-length placeholders"
        if options.redact_paths
        else "- nothing is redacted but secret-looking environment variables: paths in the dumps and manifest are as captured (`--redact-paths`)"
    )
    return "\n".join(lines) + "\n"


def runner_lines(
    backend: str | None, snapshot: str | None, before_txt: str | None, after_txt: str | None, xla_flags: list[str]
) -> tuple[list[str], list[str]]:
    """The README's runner command lines, each as replay builds it (:func:`.runner_argv.runner_command`) for a
    binary whose flags are unknown, and one sentence per flag left out because only some XLA versions define it."""
    platform = backend if backend and backend.lower() in PLATFORMS else "cpu"
    runs = [
        ("run_hlo_module", snapshot, ReplayOptions(platform=platform), "the snapshot's real arguments"),
        ("run_hlo_module", before_txt, ReplayOptions(platform=platform, reference_platform="interpreter"), ""),
        ("hlo_runner_main", snapshot, ReplayOptions(platform=platform, iterations=3), ""),
        ("hlo_runner_main", before_txt, ReplayOptions(platform=platform, iterations=3), ""),
        ("hlo_runner_main", after_txt, ReplayOptions(platform=platform), "the optimized module, no HLO passes"),
    ]
    lines: list[str] = []
    left_out: list[str] = []
    for runner, path, options, comment in runs:
        if path is None:
            continue
        command = runner_command(runner, path, options, xla_flags=xla_flags)
        lines.append(command.shell_line() + (f"   # {comment}" if comment else ""))
        for arg, since in command.omitted.items():
            note = f"`{arg}` on the `{runner}` lines: {since} define it (older builds take it for a file name); add it when `{runner} --help` lists it"
            if note not in left_out:
                left_out.append(note)
    return lines, left_out


# --- reading a bundle without importing it ---------------------------------------------------------


@contextmanager
def opened_bundle(path: str | Path) -> Iterator[tuple[LocalStore, ModuleInfo]]:
    """The bundle's module, imported into a temporary store that is deleted afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="xlarun-bundle-"))
    store = LocalStore.open(folder / "store", create=True)
    try:
        result = import_dump(path, store)
        module_id = result.bundle_module_id
        if module_id is None:
            if not result.modules:
                raise InputError(f"{path} holds no module", "is it an xlarun bundle or a dump archive?")
            module_id = result.modules[0].module_id  # a plain dump zip: its main program
        yield store, store.index.module(result.run_id, module_id)
    finally:
        store.close()
        store.wait_for_discards()
        shutil.rmtree(folder, ignore_errors=True)
