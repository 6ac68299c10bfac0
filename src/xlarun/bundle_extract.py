"""``bundle FILE``: a bug-report bundle of a module that is a file, not a module of the store.

What ``xlarun extract`` writes (``STEM.hlo.txt`` and, with the run's values, ``STEM.snapshot.pb``), or any HLO
text file with an optional snapshot beside it. The files are laid out under XLA's dump names in a temporary
folder, imported into a temporary store (so they are read, checked and indexed as any dump is) and bundled from
there by :func:`~xlarun.bundle.make_bundle`: the receiver replays the zip as any bundle, against the snapshot's
result, and the README says the module is an extract.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from xlarun.bundle import BundleOptions, BundleResult, make_bundle
from xlarun.dump_import import import_dump
from xlarun.errors import InputError
from xlarun.store.facade import Store

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
    return ModuleFiles(text, snapshot, re.sub(r"[^\w.-]", "_", name) or "module", root)


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
        store = Store.open(folder / "store", create=True)
        try:
            imported = import_dump(dump, store, name=files.stem.name)
            if not imported.modules:
                raise InputError(
                    f"{path} holds no module xlarun can read", "give the .hlo.txt or .snapshot.pb that `xlarun extract` wrote"
                )
            module = store.index.module(imported.run_id, imported.modules[0].module_id)
            return make_bundle(store, module, output, options, about=_about(files))
        finally:
            store.close()
            store.wait_for_discards()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _about(files: ModuleFiles) -> str:
    given = ", ".join(f"`{p.name}`" for p in (files.text, files.snapshot) if p is not None)
    what = f"of one instruction, `{files.root}`, " if files.module_name.startswith("extract_") and files.root else ""
    values = (
        "its snapshot's arguments are the values the original run computed for the extract's parameters, and its "
        "result is the value the run computed, so a replay that does not match shows the divergence in a few kilobytes."
        if files.snapshot is not None
        else "no snapshot was given: replays run on generated arguments."
    )
    return f"A standalone module {what}made from {given} (what `xlarun extract` writes): {values}"
