"""``bundle FILE``: a bug-report bundle of a module that is a file, not a module of the store.

What ``xlarun extract`` writes (``STEM.hlo.txt`` and, with the run's values, ``STEM.snapshot.pb``), or any HLO
text file with an optional snapshot beside it. The files are laid out under XLA's dump names in a temporary
folder, imported into a temporary store (so they are read, checked and indexed as any dump is) and bundled from
there by :func:`~xlarun.share.bundle.make_bundle`: the receiver replays the zip as any bundle, against the snapshot's
result, and the README says the module is an extract.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from xlarun.errors import InputError
from xlarun.share.bundle import BundleOptions, BundleResult, make_bundle
from xlarun.share.import_dump import import_dump
from xlarun.store.facade import LocalStore

#: What a file given to ``bundle`` must end in to be read as a module file rather than a module REF.
FILE_SUFFIXES = (".hlo.txt", ".snapshot.pb")
_MODULE_LINE = re.compile(r"^HloModule\s+([^\s,]+)", re.MULTILINE)
_ROOT = re.compile(r"^\s*ROOT\s+%?([\w.\-]+)\s*=", re.MULTILINE)
_TEXT_LIMIT = 256 << 20


@dataclass
class ModuleFiles:
    """The text and snapshot of one module given as files, and what the text says about it."""

    text: Path | None
    snapshot: Path | None
    module_name: str
    root: str | None  # the entry's ROOT instruction: for an extract, the instruction extracted
    origin: dict | None = None  # STEM.extract.json: where `xlarun extract` cut it from

    @property
    def stem(self) -> Path:
        path = self.text or self.snapshot
        assert path is not None
        return _stem(path)


def _stem(path: str | Path) -> Path:
    return Path(str(path).removesuffix(".hlo.txt").removesuffix(".snapshot.pb"))


def is_module_file(ref: str) -> bool:
    """Whether a ``bundle`` argument is a module file (what ``extract`` writes) rather than a module REF."""
    return ref.lower().endswith(FILE_SUFFIXES) and Path(ref).is_file()


def module_files(path: str | Path) -> ModuleFiles:
    """The extract (or HLO text and snapshot) that ``path`` is one of: ``STEM.hlo.txt`` and ``STEM.snapshot.pb``."""
    path = Path(path)
    stem = _stem(path)
    text = Path(f"{stem}.hlo.txt") if Path(f"{stem}.hlo.txt").is_file() else None
    snapshot = Path(f"{stem}.snapshot.pb") if Path(f"{stem}.snapshot.pb").is_file() else None
    if text is None and snapshot is None:
        raise InputError(f"{path} is not a file", "give the .hlo.txt or .snapshot.pb that `xlarun extract` wrote")
    name, root = stem.name, None
    if text is not None:
        try:
            if text.stat().st_size > _TEXT_LIMIT:
                raise InputError(
                    f"{text} is over {_TEXT_LIMIT >> 20} MiB", "bundle a module of the store instead: xlarun bundle REF"
                )
            head = text.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read {text}: {exc.strerror or exc}", "check the file's permissions") from None
        found = _MODULE_LINE.search(head)
        if found is None:
            raise InputError(f"{text} is not HLO text (no 'HloModule' line)", "give the .hlo.txt that `xlarun extract` wrote")
        name = found[1]
        entry = head[head.find("\nENTRY ") :] if "\nENTRY " in head else ""
        roots = _ROOT.findall(entry)
        root = roots[0] if roots else None
    return ModuleFiles(text, snapshot, re.sub(r"[^\w.-]", "_", name) or "module", root, _origin(stem))


def _origin(stem: Path) -> dict | None:
    """What ``STEM.extract.json`` says (``None``: no such file, or not one `xlarun extract` wrote)."""
    try:
        found = json.loads(Path(f"{stem}.extract.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def bundle_module_files(path: str | Path, output: str | Path | None = None, options: BundleOptions | None = None) -> BundleResult:
    """Write the bundle of the module file ``path`` (default ``STEM.bundle.zip`` beside it)."""
    files = module_files(path)
    output = Path(output) if output is not None else Path(f"{files.stem}.bundle.zip")
    folder = Path(tempfile.mkdtemp(prefix="xlarun-extract-bundle-"))
    try:
        dump = folder / "dump"
        dump.mkdir()
        prefix = f"module_0000.{files.module_name}"
        if files.text is not None:
            shutil.copyfile(files.text, dump / f"{prefix}.before_optimizations.txt")
        if files.snapshot is not None:
            shutil.copyfile(files.snapshot, dump / f"{prefix}.snapshot.0.pb")
        store = LocalStore.open(folder / "store", create=True)
        try:
            imported = import_dump(dump, store, name=files.stem.name)
            if not imported.modules:
                raise InputError(
                    f"{path} holds no module xlarun can read", "give the .hlo.txt or .snapshot.pb that `xlarun extract` wrote"
                )
            module = store.index.module(imported.run_id, imported.modules[0].module_id)
            origin = files.origin or {}
            recorded = {k: origin[k] for k in ("versions", "host", "xla_flags", "framework") if origin.get(k)}
            return make_bundle(store, module, output, options, about=_about(files), recorded=recorded)
        finally:
            store.close()
            store.wait_for_discards()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _about(files: ModuleFiles) -> str:
    given = ", ".join(f"`{p.name}`" for p in (files.text, files.snapshot) if p is not None)
    what = f"of one instruction, `{files.root}`, " if files.module_name.startswith("extract_") and files.root else ""
    origin = files.origin or {}
    source = ""
    if origin.get("module"):
        where = (
            f"pass step {origin['step']} (after {origin.get('after_pass') or '?'}, pipeline {origin.get('pipeline') or '?'})"
            if origin.get("step") is not None
            else "its before_optimizations module"
        )
        source = f" It was cut from `{origin['module']}` of run `{origin.get('run_id')}` ({origin.get('name') or '?'}), {where}."
        if origin.get("device") is not None:
            source += f" It is per-device code of a partitioned module: its values are device {origin['device']}'s."
        if origin.get("called_by"):
            source += (
                f" The instruction is in the body that `{origin['called_by']}` runs: its values are the body's first run's "
                "(a loop's first iteration)."
            )
    if files.snapshot is None:
        values = "No snapshot was given: replays run on generated arguments."
    else:
        values = (
            "Its snapshot's arguments are the values the original run computed for the extract's parameters, and its result "
            "is the value the run computed for the instruction at that dump: a replay matches when this XLA computes what "
            "that step computed, so a match says the extract is faithful, not that the bug is gone."
        )
    return f"A standalone module {what}made from {given} (what `xlarun extract` writes).{source} {values}" + (
        f" {_divergence(files, origin)}" if origin else ""
    )


def _divergence(files: ModuleFiles, origin: dict) -> str:
    """How to see the divergence the extract was made for: the culprit pass, and the runs that show its effect."""
    text = files.text.name if files.text is not None else "the .hlo.txt"
    culprit = origin.get("culprit") or {}
    instruction = files.root or "INSTRUCTION"
    if not culprit.get("pass"):
        hint = (
            f"`xlarun bisect {origin['module']}` on the source run names it"
            if origin.get("module")
            else "`xlarun bisect` names it"
        )
        return f"No culprit pass was recorded for the source module ({hint})."
    name, step = culprit["pass"], culprit.get("step")
    said = f"Culprit: pass `{name}`" + (f" at step {step}" if step is not None else "")
    said += f", named by bisection `{culprit.get('bisect_id')}`"
    said += f" (first value to move: `{culprit['first_move']}`)." if culprit.get("first_move") else "."
    lines = [said]
    if culprit.get("switch"):
        switch = culprit["switch"]
        lines.append(
            f"The pass stays on in every compile (XLA does not compile the module without it), so its effect "
            f"({culprit.get('effect') or 'what it allows'}) is seen by turning that off:"
        )
        if files.snapshot is not None:
            lines.append(
                f"`XLA_FLAGS=--{switch} xlarun replay {files.snapshot.name}` differs from the snapshot's result where the "
                "pass moved the value; or, with XLA's runner,"
            )
        lines.append(
            f"`run_hlo_module --platform=cpu --input_format=hlo --{switch} {text}` against the same line without the flag."
        )
        return " ".join(lines)
    if step is not None and origin.get("module"):
        other = step if origin.get("step") == step - 1 else step - 1  # the other side of the pass than this extract's
        lines.append(
            f"To see the divergence, extract the same instruction from the step {'of' if other == step else 'before'} the "
            f"pass, `xlarun extract {origin['module']} {instruction} --step {other}`: the two snapshots' results are its "
            "value before and after the pass (`xlarun replay STEM.snapshot.pb --save-outputs STEM.npz` writes each);"
        )
    lines.append(
        f"or, with XLA's runner, run `{text}` with the pass off and on: `run_hlo_module --platform=cpu --input_format=hlo "
        f"--xla_disable_hlo_passes={name} {text}` against the same line without the flag."
    )
    return " ".join(lines)
