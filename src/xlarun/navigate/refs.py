"""Resolve what users type (REFs) to runs and modules.

The one home for that decision: every command and the Python API resolve through these functions.

A run REF is a run id, a unique prefix of one, a spec name (its latest run), or ``latest``.
A batch REF is a batch id (``b20261122-103015-a1b2``), a unique prefix of one, or ``latest``.
A module REF is ``module_0006``, ``6``, ``module_0006.jit_f``, a module name (``jit_f``) or a unique
prefix or substring of one, or a dump file name; ``RUN/MODULE`` picks the run. Without a run, the latest run
is searched first, then older runs, newest first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from xlarun import console
from xlarun.errors import ExitCode, RefError, StoreError, XlarunError
from xlarun.store.index import Index
from xlarun.store.rows import ModuleInfo, RunInfo

_MODULE_ID = re.compile(r"^(?:module_)?(\d+)(?:\.(.+))?$")
MAX_CANDIDATES = 10
#: How many of the newest runs 'latest' reads to find the user's newest (the rest are bisect reruns).
_NEWEST = 64


def resolve_run(index: Index, ref: str | None) -> RunInfo:
    """The run a run REF names (None or 'latest' = the newest run). The common REFs (latest, an id, a unique id
    prefix) are answered by indexed reads, so a store of 100,000 runs answers as fast as one of ten."""
    if ref in (None, "", "latest", "last", "@"):
        newest = index.newest_runs(_NEWEST)
        mine = next((r for r in newest if not r.made_by_xlarun), None)
        if mine is not None:
            return mine
        if len(newest) < _NEWEST:  # every run is xlarun's own (or there is none)
            if not newest:
                raise _nothing_indexed(index)
            return newest[0]
    else:
        by_prefix = index.runs_by_id_prefix(ref, 2)
        exact = [r for r in by_prefix if r.run_id == ref]
        if exact or len(by_prefix) == 1:
            return (exact or by_prefix)[0]
        if not by_prefix:
            named = user_runs(index.runs(name=ref))
            if named:
                return named[-1]  # the latest run of that spec
    if ref in index.left_out:  # on disk, but damaged or unreadable: say so, not "no run"
        raise StoreError(
            f"run {ref} is left out of the index: {index.left_out[ref]}",
            f"`xlarun check` names what is damaged; restore it from a backup, or `xlarun rm {ref}` removes the run",
            exit_code=ExitCode.FAILED,
        )
    runs = index.runs()
    if not runs:
        raise _nothing_indexed(index)
    yours = user_runs(runs)
    if ref in (None, "", "latest", "last", "@"):
        return (yours or runs)[-1]  # the newest run of the user's; xlarun's own only when there is nothing else
    by_prefix = [r for r in runs if r.run_id.startswith(ref)]
    by_name = [r for r in yours if r.name == ref]
    if by_name:
        return by_name[-1]  # the latest run of that spec
    if any(r.name == ref for r in runs):
        raise RefError(
            f"run name {ref!r} names only runs xlarun made for its own purposes ({_list(r.run_id for r in runs if r.name == ref)})",
            "give one by its id, or capture the spec itself",
        )
    if len(by_prefix) > 1:
        raise RefError(f"run REF {ref!r} is ambiguous: {_list(r.run_id for r in by_prefix)}", "type more of the run id")
    raise RefError(f"no run matches {ref!r}", "`xlarun runs` lists run ids and names")


def _nothing_indexed(index: Index) -> XlarunError:
    """No run is indexed: the store is new, or every run on disk is left out as damaged (then say which)."""
    if not index.left_out:
        return RefError("the store has no runs yet", "capture one with `xlarun capture SPEC`")
    damaged = _list(f"{run_id} ({why})" for run_id, why in index.left_out.items())
    return StoreError(
        f"no run can be read: every run on disk is left out of the index as damaged: {damaged}",
        "`xlarun check` names what is damaged; restore it from a backup, or `xlarun rm RUN` removes a run",
        exit_code=ExitCode.FAILED,
    )


def user_runs(runs: list[RunInfo]) -> list[RunInfo]:
    """The runs the user made, in order (not those xlarun made for its own purposes, :attr:`RunInfo.made_by_xlarun`)."""
    return [r for r in runs if not r.made_by_xlarun]


def _list(items: Any) -> str:
    items = list(items)
    shown = ", ".join(items[:MAX_CANDIDATES])
    return shown + (f" (and {len(items) - MAX_CANDIDATES} more)" if len(items) > MAX_CANDIDATES else "")


def _same_name(indexed: str | None, named: str | None) -> bool:
    """A file name's module name against the index's (XLA shortens long names in some file names only)."""
    if not named or not indexed:
        return True
    return indexed == named or indexed.startswith(named) or named.startswith(indexed)


def _match_in_run(modules: list[ModuleInfo], ref: str) -> list[ModuleInfo]:
    match = _MODULE_ID.match(ref)
    if match:
        module_id, name = int(match.group(1)), match.group(2)
        hits = [
            m for m in modules if m.module_id == module_id and (name is None or m.name == name or (m.name or "").startswith(name))
        ]
        if hits:
            return hits
    exact = [m for m in modules if m.name == ref]
    if exact:
        return exact
    from xlarun.hlo.names import decode_dump_name  # a file name as REF: a name or an id needs no dump-name decoder

    decoded = decode_dump_name(ref)
    if decoded.module_id is not None:
        # the id and the name the file name carries: ids differ between runs, so a name copied from another run
        # whose id is another module's here names no module of this run
        hits = [m for m in modules if m.module_id == decoded.module_id and _same_name(m.name, decoded.module_name)]
        if hits:
            return hits
    prefixed = [m for m in modules if m.name and m.name.startswith(ref)]
    if prefixed:
        return prefixed
    return [m for m in modules if m.name and ref in m.name]  # 'train_step' finds 'jit_train_step'


def resolve_module(
    index: Index, ref: str, run: str | None = None, prefer: Callable[[ModuleInfo], bool] | None = None
) -> ModuleInfo:
    """The one module a REF names; RefError listing candidates when none or several match.

    A REF without a run looks in the newest run that has such a module; with ``prefer``, in the newest run whose
    match passes it (``bisect`` wants one captured pass by pass), else as without."""
    ref = ref.strip()
    if not ref:
        raise RefError("empty module REF", "give a module id (6, module_0006), a name (jit_f) or RUN/module_0006")
    if "/" in ref and run is None:
        run, ref = ref.split("/", 1)
    searched: list[RunInfo] = []
    if run is not None:
        scopes = [resolve_run(index, run)]
    else:
        scopes = [resolve_run(index, None)]  # xlarun's own runs (bisect reruns) answer no plain REF
    hits = _match_in_run(index.modules(scopes[0].run_id), ref)
    if run is None and (not hits or (prefer is not None and not (len(hits) == 1 and prefer(hits[0])))):
        searched = user_runs(index.runs()) or index.runs()  # the older runs, read only when the newest will not do
    if prefer is not None and run is None and not (len(hits) == 1 and prefer(hits[0])):
        for candidate in reversed(searched):
            preferred = _match_in_run(index.modules(candidate.run_id), ref)
            if len(preferred) == 1 and prefer(preferred[0]):
                hits = preferred
                break
    if not hits and run is None:
        for older in reversed(searched[:-1]):  # the newest run that has such a module
            hits = _match_in_run(index.modules(older.run_id), ref)
            if hits:
                break
    if len(hits) == 1:
        if run is None:
            _say_which_run(index, ref, hits[0])
        return index.module(hits[0].run_id, hits[0].module_id)
    if not hits:
        if (damage := index.damage()) is not None:  # a NULL name in a damaged row matches nothing: say why
            raise damage
        where = f"run {scopes[0].run_id}" if run is not None else "any run"
        raise RefError(f"no module matches {ref!r} in {where}", "`xlarun modules [RUN]` lists modules")
    candidates = _list(f"{m.ref} ({m.name or 'unnamed'})" for m in hits)
    raise RefError(f"module REF {ref!r} is ambiguous: {candidates}", "use one of those RUN/module_NNNN forms")


def _say_which_run(index: Index, ref: str, chosen: ModuleInfo) -> None:
    """A bare name that other runs' modules also have: one line saying which run it was taken from."""
    if ref.isdigit() or ref.startswith("module_"):
        return  # an id names a module of the newest run only by design; ids differ between runs
    others = [r for r in index.user_runs_with_module_named(ref) if r != chosen.run_id]
    if others:
        console.note(
            f"{ref!r} taken from run {chosen.run_id} ({chosen.label}), the newest that has it; {len(others)} other "
            f"run(s) have a module named so (newest {others[-1]}): name one as RUN/{ref}"
        )


def resolve_batch(index: Index, ref: str) -> str:
    """The batch id a batch REF names: an id, a unique prefix of one, or ``latest`` (the newest batch)."""
    ids = index.batch_ids()
    if ref == "latest":
        if not ids:
            raise RefError("the store has no batch yet", "capture a spec with a matrix (`xlarun batch SPEC`) to make one")
        return ids[-1]
    if ref in ids:
        return ref
    hits = [b for b in ids if b.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise RefError(
            f"no batch matches {ref!r}", "`xlarun runs` shows batch ids in the batch column; 'latest' names the newest"
        )
    raise RefError(f"batch REF {ref!r} is ambiguous: {_list(hits)}", "type more of the batch id")


def counterpart_module(index: Index, module: ModuleInfo, other: str) -> ModuleInfo:
    """The module ``other`` names to compare ``module`` with: a module REF, or a run REF (that run's module of
    the same name, of the same process in a run of many). Refuses ``module`` itself."""
    from xlarun.errors import InputError

    try:
        second = resolve_module(index, other)
    except RefError:
        run_id = resolve_run(index, other).run_id
        same = sorted((m for m in index.modules(run_id) if m.name == module.name), key=lambda m: m.process != module.process)
        if not same:
            raise InputError(
                f"run {run_id} has no module named {module.name}", "give the second module as RUN/module_NNNN"
            ) from None
        second = index.module(run_id, same[0].module_id)
    if (second.run_id, second.module_id) == (module.run_id, module.module_id):
        raise InputError("both REFs name the same module", "name the runs: RUN_A/module_0012 RUN_B/module_0012")
    return second
