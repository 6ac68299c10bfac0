"""``xlarun gc --remote``: delete a remote's runs a retention policy selects, and every object no remaining run names.

What is live is read, never assumed: every run's index object and record (checked against its digest) are read, and
every object they name (packs, deltas, folder files, the record and the catalog, and the bases of those sent as
deltas) must be listed; a run that cannot be read or that names a missing object (the remote looks
damaged) is a refusal with nothing deleted, as local ``gc`` refuses. A run's index object is deleted before its
objects (it stops being visible first), and an object any remaining run names is never deleted.

A gc that deletes holds a gc lock (:mod:`xlarun.store.remote_locks`) and reads the remote only once it holds it: no
push is under way meanwhile, so none can publish a run naming a pack this gc deletes. Objects no run names and that
are younger than the grace period (an hour by default) are kept all the same: they may be a push's of a version of
xlarun that takes no lock.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from xlarun.errors import InputError, StoreError
from xlarun.store.remote import ObjectStore, RemoteEntry
from xlarun.store.remote_delta import parse_delta_name
from xlarun.store.remote_locks import LEASE, remote_lock
from xlarun.store.remote_records import (
    checked_record,
    fetch_verified,
    object_keys,
    read_record,
    read_remote_json,
    record_keys,
)
from xlarun.store.remote_sync import WORKERS

#: Objects no run names that are younger than this are kept (a push in flight may name them soon).
GRACE = timedelta(hours=1)
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FOLDERS = ("runs/", "records/", "catalogs/", "packs/", "files/", "deltas/", "locks/")


def parse_age(text: str) -> timedelta:
    """'90m', '12h', '30d', '2w' as a timedelta (InputError, exit 2, for anything else)."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit():
        raise InputError(f"not an age: {text!r}", "give a whole number with m, h, d or w, e.g. 30d")
    return timedelta(seconds=int(number) * _UNITS[unit])


@dataclass(frozen=True)
class RetentionPolicy:
    """Which runs to delete: those older than ``older_than`` (by their start) and carrying every one of ``labels``
    (``KEY`` or ``KEY=VALUE`` of the spec's tags), but never the newest ``keep`` of each spec name. With ``keep``
    alone, every other run of a name; with nothing given, no run (only objects no run names go)."""

    older_than: timedelta | None = None
    labels: tuple[str, ...] = ()
    keep: int | None = None

    def __post_init__(self) -> None:
        if self.keep is not None and self.keep < 0:
            raise InputError(f"--keep {self.keep} is negative", "give how many runs of each spec to keep, e.g. --keep 5")

    @property
    def selects_runs(self) -> bool:
        return self.older_than is not None or bool(self.labels) or self.keep is not None


@dataclass
class RemoteGcResult:
    """What ``gc --remote`` deleted (or, in a dry run, would delete)."""

    remote: str
    applied: bool
    runs: list[str] = field(default_factory=list)
    kept_runs: int = 0
    objects: int = 0
    bytes: int = 0
    young_kept: int = 0

    def as_dict(self) -> dict:
        return {
            "remote": self.remote, "applied": self.applied, "runs": self.runs, "kept_runs": self.kept_runs,
            "objects": self.objects, "bytes": self.bytes, "young_kept": self.young_kept,
        }  # fmt: skip


@dataclass
class _RemoteRun:
    run_id: str
    index: dict
    names: set[str]  # every object the run needs, its index object included
    folder: dict[str, str]


def collect_remote_garbage(
    remote: ObjectStore, policy: RetentionPolicy, apply: bool = False, grace: timedelta = GRACE, now: datetime | None = None
) -> RemoteGcResult:
    """Delete (with ``apply``; else only say) the runs ``policy`` selects and the objects no remaining run names; see
    the module docstring for what makes it refuse (StoreError, exit 3, nothing deleted)."""
    if not apply:
        return _collect(remote, policy, False, grace, now)
    with remote_lock(remote, "gc"):
        return _collect(remote, policy, True, grace, now)


def _collect(remote: ObjectStore, policy: RetentionPolicy, apply: bool, grace: timedelta, now: datetime | None) -> RemoteGcResult:
    listing = {e.name: e for folder in _FOLDERS for e in remote.entries(folder)}
    run_ids = sorted(n[5:-5] for n in listing if n.startswith("runs/") and n.endswith(".json"))
    with ThreadPoolExecutor(WORKERS) as pool:
        runs = list(pool.map(lambda run_id: _read_run(remote, run_id), run_ids))
    for run in runs:
        missing = sorted(run.names - listing.keys())
        if missing:
            raise _refusal(f"run {run.run_id} names {missing[0]}, which is missing", run.run_id)
    now = now or datetime.now(timezone.utc)
    doomed = _selected(remote, runs, policy, now)
    live = set().union(*(run.names for run in runs if run.run_id not in doomed))
    result = RemoteGcResult(remote.spec.url, apply, runs=sorted(doomed), kept_runs=len(runs) - len(doomed))
    doomed_names = set().union(*(run.names for run in runs if run.run_id in doomed))
    garbage: list[RemoteEntry] = []
    for entry in listing.values():
        if entry.name in live or entry.name.startswith("runs/"):
            continue
        if entry.name.startswith("locks/"):
            if now - entry.modified >= LEASE:  # a killed process's
                garbage.append(entry)
        elif entry.name not in doomed_names and now - entry.modified < grace:
            result.young_kept += 1
        else:
            garbage.append(entry)
    garbage = _keeping_bases(garbage, listing)
    result.objects, result.bytes = len(garbage), sum(e.size for e in garbage)
    if apply:
        remote.delete([f"runs/{run_id}.json" for run_id in sorted(doomed)])  # unpublished first
        remote.delete(sorted(e.name for e in garbage))
    return result


def _keeping_bases(garbage: list[RemoteEntry], listing: dict[str, RemoteEntry]) -> list[RemoteEntry]:
    """The garbage less the base packs of the deltas that stay (a young delta no run names yet may be named soon)."""
    doomed = {e.name for e in garbage}
    staying = (parse_delta_name(n[len("deltas/") :]) for n in listing if n.startswith("deltas/") and n not in doomed)
    bases = {f"packs/{ref.base_pack}.zst" for ref in staying if ref is not None}
    return [e for e in garbage if e.name not in bases]


def _read_run(remote: ObjectStore, run_id: str) -> _RemoteRun:
    key = f"runs/{run_id}.json"
    try:
        index = read_remote_json(remote, key, None)
        if index is None:
            raise StoreError(f"{key} vanished while gc read it", "")
        _files, folder, packs, deltas = checked_record(read_record(remote, index, run_id), run_id)
    except StoreError as exc:
        raise _refusal(f"run {run_id} cannot be read: {exc.message}", run_id) from None
    names = {key, *record_keys(index)}
    if "catalog" in index:  # its index rows (a run pushed before catalogs has none), whole or a delta and its base
        names |= set(object_keys(index, "catalog"))
    names |= {f"files/{digest}.zst" for digest in folder.values()}
    names |= {f"packs/{name}.zst" for name in packs}
    for ref in deltas.values():
        names |= {ref.key, f"packs/{ref.base_pack}.zst"}
    return _RemoteRun(run_id, index, names, folder)


def _refusal(what: str, run_id: str) -> StoreError:
    return StoreError(
        f"gc --remote refuses to run: the remote looks damaged: {what}; nothing was deleted",
        f"push run {run_id} again from a store that has it (`xlarun pull` what is sound first), then run gc again",
    )


def _selected(remote: ObjectStore, runs: list[_RemoteRun], policy: RetentionPolicy, now: datetime) -> set[str]:
    """The runs the policy deletes."""
    if not policy.selects_runs:
        return set()
    chosen = set()
    for run in runs:
        started = _started(run)
        if policy.older_than is not None and (started is None or now - started < policy.older_than):
            continue
        if policy.labels and not all(_has_label(_tags(remote, run), label) for label in policy.labels):
            continue
        chosen.add(run.run_id)
    if policy.keep is not None:
        by_name: dict[str, list[_RemoteRun]] = {}
        for run in runs:
            by_name.setdefault(str(run.index.get("name")), []).append(run)
        for same in by_name.values():
            ordered = sorted(same, key=lambda r: (str(r.index.get("started") or ""), r.run_id))
            chosen -= {r.run_id for r in ordered[len(ordered) - policy.keep :]} if policy.keep else set()
    return chosen


def _started(run: _RemoteRun) -> datetime | None:
    for key in ("started", "pushed"):
        try:
            when = datetime.fromisoformat(str(run.index.get(key)).replace("Z", "+00:00"))
        except ValueError:
            continue
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return None


def _tags(remote: ObjectStore, run: _RemoteRun) -> dict:
    """The run's spec tags: from its index object, or (pushed before index objects held them) its manifest."""
    tags = run.index.get("tags")
    if isinstance(tags, dict):
        return tags
    digest = run.folder.get("manifest.json")
    if digest is None:
        return {}
    try:
        manifest = json.loads(fetch_verified(remote, f"files/{digest}.zst", digest))
    except (StoreError, ValueError):
        raise _refusal(f"the manifest of run {run.run_id} cannot be read", run.run_id) from None
    found = manifest.get("tags") if isinstance(manifest, dict) else None
    return found if isinstance(found, dict) else {}


def _has_label(tags: dict, label: str) -> bool:
    key, _, value = label.partition("=")
    return key in tags and (not value or str(tags[key]) == value)
