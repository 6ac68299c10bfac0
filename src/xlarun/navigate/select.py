"""Which file of a module the user meant: the one home for that decision.

Every command that takes ``--stage`` / ``--pass`` / ``--step`` / ``--format`` (``cat``, ``render``, ``view``,
``export``, ``diff``, the report) and the Python API's ``Module.text``/``render`` choose through
:func:`select_file`, so a spelling one accepts, all accept, including every spelling the tool itself
prints: ``before``, ``before_optimizations``, ``after``, ``after_optimizations``, ``cpu_after_optimizations``
(as ``show`` lists stages), ``optimized``, a report's kind (``buffer-assignment`` or ``buffer_assignment``,
``memory-usage-report``, ``live-range``...), or a file's name as ``show --files`` lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from xlarun.errors import InputError
from xlarun.hlo.patterns import LazyPattern
from xlarun.store.rows import FileInfo, ModuleInfo

BEFORE, AFTER = "before_optimizations", "after_optimizations"
STAGES = (BEFORE, AFTER)

#: What a file is wanted for: ``read`` (``cat``: any format, text first), ``graph`` (an HLO module to draw or
#: parse: text, else proto), ``dot`` (XLA's own .dot drawing of it).
Purpose = Literal["read", "graph", "dot"]
_PREFERENCE: dict[str, tuple[str, ...]] = {
    "read": ("text", "txt", "proto", "proto.gz", "pb", "dot", "html"),
    "graph": ("text", "proto", "proto.gz"),
    "dot": ("dot",),
}
_FORMAT_SPELLINGS = {"txt": "text", "hlo": "text", "pb": "proto", "hlo.pb": "proto", "hlo.pb.gz": "proto.gz"}

_AFTER = LazyPattern(r"^(?:[\w.]+_)?after(?:[_-]optimi[sz]ations)?$|^optimi[sz]ed$")
_BEFORE = LazyPattern(r"^before(?:[_-]optimi[sz]ations)?$|^unoptimi[sz]ed$")
# 'cpu_after_optimizations-buffer-assignment', as the stage part of a file name reads
_STAGE_AND_KIND = LazyPattern(r"^(?:[\w.]+_)?(?P<stage>after|before)_optimizations-(?P<kind>[\w-]+)$")


@dataclass(frozen=True)
class Wanted:
    """A ``--stage`` value read: the stage (None: any) and the kind of file (``hlo``: the module itself)."""

    stage: str | None
    kind: str = "hlo"
    path: str | None = None  # a file named outright

    def describe(self) -> str:
        if self.path:
            return self.path
        if self.kind == "hlo":
            return self.stage or "any"  # '--stage hlo': the module at any stage
        return f"{self.kind}{' ' + self.stage if self.stage else ''}"


def stage_of(text: str | None) -> str:
    """``before_optimizations`` or ``after_optimizations`` for any stage spelling (``after``,
    ``cpu_after_optimizations``, ``optimized``...); None is ``before_optimizations``. Raises InputError otherwise."""
    wanted = parse_stage(text)
    if wanted.kind != "hlo" or wanted.stage is None:
        raise InputError(f"unknown stage {text!r}", _stage_hint())
    return wanted.stage


def parse_stage(text: str | None, module: ModuleInfo | None = None) -> Wanted:
    """Read a ``--stage`` value. With ``module``, a report kind or a file name of that module is accepted too."""
    if text is None or not text.strip():
        return Wanted(BEFORE)
    raw = text.strip()
    low = raw.lower()
    if _BEFORE.match(low):
        return Wanted(BEFORE)
    if _AFTER.match(low):
        return Wanted(AFTER)
    both = _STAGE_AND_KIND.match(low)
    if both:
        return Wanted(f"{both['stage']}_optimizations", both["kind"].replace("_", "-"))
    if module is not None:
        if any(f.path == raw for f in module.files):
            return Wanted(None, "", raw)
        kind = low.replace("_", "-")
        if any(f.kind == kind for f in module.files):
            return Wanted(None, kind)
        ends = [f.path for f in module.files if f.path.endswith(raw)]
        if ends:
            return Wanted(None, "", min(ends, key=len))
        raise InputError(f"{module.label} has no {raw!r} file", f"--stage takes: {stage_choices(module)}")
    raise InputError(f"unknown stage {raw!r}", _stage_hint())


def _stage_hint() -> str:
    return "use before (before_optimizations) or after (after_optimizations, cpu_after_optimizations, ...)"


def stage_choices(module: ModuleInfo) -> str:
    """What ``--stage`` takes for this module, as one line for an error's hint."""
    have = [s for s in STAGES if any(f.kind == "hlo" and _stage_matches(f, s) for f in module.files)]
    words = {BEFORE: "before", AFTER: "after"}
    kinds = sorted({f.kind for f in module.files if f.kind not in ("hlo", "pass")})
    parts = [f"{words[s]} ({s})" for s in have] + kinds
    return ", ".join(parts) or "nothing (the module has no files)"


def _stage_matches(f: FileInfo, stage: str | None) -> bool:
    return stage is None or f.stage == stage or (stage == AFTER and (f.stage or "").endswith(AFTER))


def normalize_format(fmt: str | None) -> str | None:
    """``txt``/``hlo`` -> ``text``, ``pb`` -> ``proto``; others as given."""
    if fmt is None:
        return None
    low = fmt.strip().lower().lstrip(".")
    return _FORMAT_SPELLINGS.get(low, low)


def select_file(
    module: ModuleInfo,
    stage: str | None = None,
    pass_name: str | None = None,
    step: int | None = None,
    fmt: str | None = None,
    purpose: Purpose = "read",
) -> FileInfo:
    """The one file of ``module`` the user meant.

    ``pass_name`` / ``step``: the per-pass dump taken right after that pass (its first occurrence) or with
    that step number; else ``stage`` (any spelling :func:`parse_stage` reads; default before_optimizations).
    ``fmt`` narrows the format; else ``purpose`` orders them. Raises InputError naming what there is.
    """
    wanted_format = normalize_format(fmt)
    preference = _PREFERENCE[purpose]
    if pass_name and step is None:
        step, _others = pass_step(module, pass_name)
    if step is not None or pass_name:
        pool = [f for f in module.files if f.kind == "pass" and (step is None or f.step == step) and _pass_matches(f, pass_name)]
        what = " ".join(
            p for p in (f"after pass {pass_name}" if pass_name else "", f"at step {step}" if step is not None else "") if p
        )
        if not pool:
            passes = sorted({f.after_pass for f in module.files if f.kind == "pass" and f.after_pass})
            steps = sorted({f.step for f in module.files if f.kind == "pass" and f.step is not None})
            hint = (
                f"passes dumped: {', '.join(passes[:20])}{' ...' if len(passes) > 20 else ''}; steps {steps[0]} to {steps[-1]}"
                if passes
                else "this module has no per-pass dumps: capture with dump.pass_re (e.g. '.*')"
            )
            raise InputError(f"{module.label} has no dump {what}", hint)
    else:
        wanted = parse_stage(stage, module)
        if wanted.path:
            pool = [f for f in module.files if f.path == wanted.path]
        else:
            pool = [f for f in module.files if f.kind == wanted.kind and _stage_matches(f, wanted.stage)]
        what = f"at stage {wanted.describe()}" if wanted.kind == "hlo" else wanted.describe()
        if not pool:
            raise InputError(f"{module.label} has no {what} file", f"--stage takes: {stage_choices(module)}")
        if wanted.kind != "hlo":
            if purpose != "read" and pool[0].kind not in ("hlo", "pass"):
                raise InputError(
                    f"{pool[0].path} is a {pool[0].kind} file, not an HLO module to draw",
                    f"print it with: xlarun cat {module.ref} --stage {stage}",
                )
            preference = _PREFERENCE["read"] if purpose == "read" else preference
    if wanted_format:
        chosen = [f for f in pool if normalize_format(f.format) == wanted_format]
    else:
        chosen = [f for f in pool if normalize_format(f.format) in preference] if purpose != "read" else list(pool)
    if not chosen:
        have = ", ".join(sorted({f.format or "?" for f in pool}))
        asked = (
            f"format {wanted_format}" if wanted_format else ("XLA's .dot drawing" if purpose == "dot" else "HLO text or proto")
        )
        hint = "capture with dump.formats including dot" if purpose == "dot" else f"formats there: {have}"
        raise InputError(f"{module.label} has no {asked} dump {what} (only {have})", hint)
    rank = {f: i for i, f in enumerate(preference)}
    chosen.sort(
        key=lambda f: (f.step if f.step is not None else 0, rank.get(normalize_format(f.format) or "", len(rank)), f.path)
    )
    return chosen[0]


def pass_step(module: ModuleInfo, pass_name: str) -> tuple[int, list[int]]:
    """The step a ``--pass NAME`` means: the first run of that pass that changed the module (XLA dumps a pass
    that changed nothing too), else its first run; and the other steps it ran at. Raises InputError, with
    close names, when no dump follows such a pass."""
    timeline = sorted((f for f in module.files if f.kind == "pass" and f.step is not None), key=lambda f: (f.step, f.path))
    by_step: dict[int, FileInfo] = {}
    for f in timeline:  # one file per step, the text one when there is one (the same content as the rest)
        if f.step not in by_step or normalize_format(f.format) == "text":
            by_step[f.step] = f  # type: ignore[index]
    start = next(
        (f for f in module.files if f.kind == "hlo" and f.stage == BEFORE and normalize_format(f.format) == "text"), None
    )
    previous = start.digest if start else None
    runs, changed = [], []
    for number in sorted(by_step):
        f = by_step[number]
        if _pass_matches(f, pass_name):
            runs.append(number)
            if previous is not None and f.digest != previous:
                changed.append(number)
        previous = f.digest
    if not runs:
        import difflib

        names = sorted({f.after_pass for f in timeline if f.after_pass})
        close = difflib.get_close_matches(pass_name, names, n=3)
        hint = (
            (f"did you mean {', '.join(close)}?" if close else f"passes dumped: {', '.join(names[:30])}")
            if names
            else "this module has no per-pass dumps: capture with dump.pass_re (e.g. '.*')"
        )
        raise InputError(f"{module.label} has no dump after a pass named {pass_name!r}", hint)
    chosen = changed[0] if changed else runs[0]
    return chosen, [n for n in runs if n != chosen]


def _pass_matches(f: FileInfo, pass_name: str | None) -> bool:
    if not pass_name:
        return True
    if f.after_pass == pass_name:
        return True
    # 'pipeline/pass' or 'pipeline:pass', as a timeline row reads
    for sep in ("/", ":"):
        if sep in pass_name:
            pipeline, _, name = pass_name.rpartition(sep)
            return f.after_pass == name and f.pipeline == pipeline
    return False


def select_run_file(files: list[FileInfo], path: str, run_id: str) -> FileInfo:
    """The file of a run that ``--file PATH`` names: the exact path, else the one path ending with it."""
    hits = [f for f in files if f.path == path] or [f for f in files if f.path.endswith("/" + path) or f.path.endswith(path)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise InputError(
            f"--file {path} matches {len(hits)} files of run {run_id}: {', '.join(f.path for f in hits[:6])}",
            "give more of the path",
        )
    import difflib

    close = difflib.get_close_matches(path, [f.path for f in files], n=5, cutoff=0.4)
    raise InputError(
        f"run {run_id} has no file {path}",
        f"did you mean {', '.join(close)}?" if close else "`xlarun show REF --files` lists a module's files",
    )
