"""Summarize one module of a run from its dump files, for the index: instruction counts and opcodes
before and after optimization, entry signature, fingerprint, search terms, and the pass timeline."""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xlarun.errors import XlarunError
from xlarun.hlo.lex import as_xla_prints
from xlarun.hlo.names import DumpName
from xlarun.hlo.sharding import count_annotation_calls, is_annotation_target
from xlarun.store.code_origin import own_code
from xlarun.store.rows import PassInfo, count_compute_ops

if TYPE_CHECKING:
    from xlarun.store.rows import StoredFile
    from xlarun.store.runs import RunStore

# One HLO instruction per line: optional ROOT, a name, '=', then the shape. Used for cheap per-pass counts.
# Anchored on the newline itself, not ^ with re.M: the scanner then jumps from line to line (3x faster).
_INSTRUCTION_LINE = re.compile(rb"\n[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*\S")


def count_instructions_in_text(data: Any) -> int:
    """Instructions in an HLO text dump, counted by lines (fast; agrees with xlarun.hlo's count).

    Text as XLA prints it is counted by its two-space-indented lines (5x faster than the line pattern,
    which reads hand-written HLO too)."""
    if not isinstance(data, bytes):
        data = bytes(data)
    if as_xla_prints(data):
        return data.count(b"\n  ")
    return len(_INSTRUCTION_LINE.findall(b"\n" + data))


@dataclass
class ModuleSummary:
    module_id: int
    name: str | None
    backend: str | None
    stages: list[str]
    n_pass_dumps: int
    n_files: int
    instr_before: int | None = None
    instr_after: int | None = None
    opcodes_before: dict = field(default_factory=dict)
    opcodes_after: dict = field(default_factory=dict)
    entry_signature: str | None = None
    fingerprint: str | None = None
    hlo_bytes: int = 0
    elided_constants: bool = False
    parse_error: str | None = None
    passes: list[PassInfo] = field(default_factory=list)
    terms: set = field(default_factory=set)
    own_code: bool | None = None  # see :func:`own_code`
    process: int | None = None  # the job's process that compiled it (a run of many processes), else None
    annotations_before: int = 0  # sharding-annotation custom-calls (``Sharding``, ``xla.sdy.*``...): no compute
    annotations_after: int = 0

    @property
    def compute_ops(self) -> int:
        """Its heavy compute and collectives (the ranking key), before optimizations where dumped, sharding
        annotations left out: a 4-instruction reshard with two ``Sharding`` custom-calls computes nothing."""
        if self.opcodes_before:
            return max(0, count_compute_ops(self.opcodes_before) - self.annotations_before)
        return max(0, count_compute_ops(self.opcodes_after) - self.annotations_after)


_FORMAT_PREFERENCE = {"text": 0, "proto": 1, "proto.gz": 2}


def _best_hlo(members: list[tuple[StoredFile, DumpName]], stage: str) -> tuple[StoredFile, DumpName] | None:
    """The most parseable file of a module at a stage: text, then proto, then compressed proto."""
    candidates = [(s, n) for s, n in members if n.kind == "hlo" and n.stage == stage and (n.format or "") in _FORMAT_PREFERENCE]
    candidates.sort(key=lambda sn: _FORMAT_PREFERENCE[sn[1].format or ""])
    return candidates[0] if candidates else None


def stage_label(name: DumpName) -> str:
    """How a stage is shown: 'before_optimizations', 'cpu_after_optimizations', 'sm_8.0_gpu_after_optimizations'."""
    if name.stage == "after_optimizations":
        prefix = "_".join(p for p in (name.target, name.backend if name.backend not in (None, "tpu") else None) if p)
        return f"{prefix}_after_optimizations" if prefix else "after_optimizations"
    return name.stage or name.kind


def _parse(name: DumpName, data: bytes, summary: bool = False) -> Any:
    from xlarun.hlo import load_hlo

    return load_hlo(data, kind="text" if name.format == "text" else "proto", summary=summary)


@dataclass(frozen=True)
class _StageFacts:
    """What the index keeps from one parsed HLO file of a module."""

    instructions: int
    opcodes: dict[str, int]
    entry_signature: str | None
    fingerprint: str | None
    elided_constants: bool
    terms: frozenset[tuple[str, str]]
    own_code: bool | None = None
    annotations: int = 0  # custom-calls that only annotate sharding (not compute: see hlo.sharding)


class FactsCache:
    """What parsing a store's dumps found, kept in this process: the same module text is often in many runs
    (re-runs, batch cells, reindex), and a capture reads its files while the job runs (:meth:`prepare`), so
    the work is done once per content. The store owns one (``store.facts``) and hands it to its archiver and
    to ingest; nothing else holds parse results. Thread-safe."""

    FACTS_SIZE = 256  # parsed stage dumps (by digest and whether with the fingerprint)
    COUNTS_SIZE = 100_000  # pass dumps' instruction counts (by digest)
    STAGE_BYTES_MAX = 64 << 20  # stage dumps' bytes as the archiver read them, until ingest parses them

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.facts: OrderedDict[tuple[str, bool], _StageFacts] = OrderedDict()
        self.counts: dict[str, int] = {}
        self.stage_bytes: OrderedDict[str, bytes] = OrderedDict()
        self.memory: dict[str, tuple[int, int, int, int, int] | None] = {}  # buffer assignments' sums, by digest
        # set while a run's last files are archived (store.parse_ahead): parses a stage dump in the background
        self.parse_later: Callable[[DumpName, tuple[str, bool], bytes], bool] | None = None

    def get(self, key: tuple[str, bool]) -> _StageFacts | None:
        with self.lock:
            facts = self.facts.get(key)
            if facts is not None:
                self.facts.move_to_end(key)
            return facts

    def remember(self, key: tuple[str, bool], facts: _StageFacts) -> None:
        with self.lock:
            self.facts[key] = facts
            while len(self.facts) > self.FACTS_SIZE:
                self.facts.popitem(last=False)

    def count_of(self, digest: str) -> int | None:
        with self.lock:
            return self.counts.get(digest)

    def take_stage_bytes(self, digest: str) -> bytes | None:
        with self.lock:
            return self.stage_bytes.pop(digest, None)

    def prepare(self, path: str, digest: str, data: Any, job_running: bool = True) -> None:
        """Count or parse a dump file the index will want, now that its bytes are in hand (the archiver calls
        this for each file, so indexing the run afterwards finds the work done).

        Text pass dumps are always counted here (counting later would decode their packs again). Stage dumps
        are parsed here while the job runs (it leaves cores idle between compiles); after it, by
        :attr:`parse_later` when set (a thread beside the archive's: :mod:`xlarun.store.parse_ahead`), else kept
        for ingest, which parses them in parallel processes (:class:`gather_facts`).
        """
        from xlarun.hlo.names import decode_dump_name

        name, parse_later = decode_dump_name(path), self.parse_later
        if name.kind == "buffer-assignment" and parse_later is not None:  # read by index_memory
            parse_later(name, (digest, False), bytes(data))  # when too much waits, index_memory reads it
            return
        if name.format != "text":
            return
        if name.kind == "pass":
            with self.lock:
                if digest in self.counts:
                    return
            count = count_instructions_in_text(data)
            with self.lock:
                if len(self.counts) > self.COUNTS_SIZE:
                    self.counts.clear()
                self.counts[digest] = count
        elif name.kind == "hlo" and name.stage in ("before_optimizations", "after_optimizations"):
            with_fingerprint = name.stage == "before_optimizations"
            with self.lock:
                if (digest, with_fingerprint) in self.facts:
                    return
            if not job_running:  # archiving's last rounds: parsed beside them, else kept for ingest
                copy = bytes(data)
                if parse_later is None or not parse_later(name, (digest, with_fingerprint), copy):
                    with self.lock:
                        self._keep_stage_bytes(digest, copy)
                return
            try:
                self.remember((digest, with_fingerprint), _facts_from(name, bytes(data), with_fingerprint))
            except XlarunError:
                pass  # ingest reports the parse error

    def _keep_stage_bytes(self, digest: str, data: bytes) -> None:
        """Hold a stage dump's bytes for :class:`gather_facts` (the caller holds the lock)."""
        if len(data) > self.STAGE_BYTES_MAX // 4 or digest in self.stage_bytes:
            return
        self.stage_bytes[digest] = data
        held = sum(len(d) for d in self.stage_bytes.values())
        while held > self.STAGE_BYTES_MAX:
            held -= len(self.stage_bytes.popitem(last=False)[1])


def _facts_from(name: DumpName, data: bytes, with_fingerprint: bool) -> _StageFacts:
    if not with_fingerprint and name.format == "text":
        from xlarun.hlo import scan_hlo_text

        scanned = scan_hlo_text(data)
        if scanned is not None:  # text as XLA prints it: read with whole-text patterns, no per-line parse
            found = {("opcode", op) for op in scanned.opcodes} | {("name", n) for n in scanned.names}
            found |= {("op_name", n) for n in scanned.op_names} | {("source", s) for s in scanned.sources}
            return _StageFacts(
                scanned.instructions,
                dict(sorted(scanned.opcodes.items())),
                scanned.entry_signature,
                None,
                scanned.elided_constants,
                frozenset(found),
                own_code(data),
                count_annotation_calls(data),
            )
    module = _parse(name, data, summary=not with_fingerprint)  # the fingerprint needs the full parse
    terms: set[tuple[str, str]] = set()
    for instruction in module.instructions():
        terms.add(("opcode", instruction.opcode))
        terms.add(("name", instruction.name))
        if instruction.op_name:
            terms.add(("op_name", instruction.op_name))
        if instruction.source_file:
            where = f"{instruction.source_file}:{instruction.source_line}" if instruction.source_line else instruction.source_file
            terms.add(("source", where))
    return _StageFacts(
        module.instruction_count(),
        dict(sorted(module.opcode_histogram().items())),
        module.entry_signature,
        module.fingerprint() if with_fingerprint else None,
        module.has_elided_constants(),
        frozenset(terms),
        own_code(data) if name.format == "text" else None,
        sum(
            1
            for i in module.instructions()
            if i.opcode == "custom-call" and is_annotation_target(i.attributes.get("custom_call_target", ""))
        ),
    )


def _stage_facts(store: RunStore, facts: FactsCache, stored: StoredFile, name: DumpName, with_fingerprint: bool) -> _StageFacts:
    key = (stored.digest, with_fingerprint)
    found = facts.get(key)
    if found is None:
        found = _facts_from(name, _stage_bytes(store, facts, stored.digest), with_fingerprint)
        facts.remember(key, found)
    return found


def stage_files(members: list[tuple[StoredFile, DumpName]]) -> list[tuple[StoredFile, DumpName, bool]]:
    """The files :func:`summarize_module` parses: (file, name, with fingerprint) for each stage it has."""
    out = []
    for stage in ("before_optimizations", "after_optimizations"):
        best = _best_hlo(members, stage)
        if best is not None:
            out.append((best[0], best[1], stage == "before_optimizations"))
    return out


#: Below this many bytes to parse, worker processes cost more than they save.
PARALLEL_PARSE_BYTES = 1 << 20


#: Libraries that start native threads when imported (the CLI never imports them in-process to index).
_NATIVE_THREADED = ("jax", "jaxlib", "tensorflow", "torch")


class FactsPool:
    """Worker processes that parse stage dumps (pure Python, so processes, not threads) while the caller
    does other work (:class:`gather_facts`). Measured: starting them before archiving, to parse while the
    archiver works, made archiving slower by more than it saved (both want both cores).

    Forking beside running threads is unsafe, so :meth:`start` returns None unless this is the process's
    only thread (and there are two cores or more); callers then parse in their own thread.
    """

    def __init__(self, workers: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from xlarun.hlo import proto, text  # noqa: F401 (imported once here, not once in each worker)

        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        self.pool.submit(int).result()  # fork every worker now, while this is the only thread

    @classmethod
    def start(cls, workers: int | None = None) -> FactsPool | None:
        """A pool of ``workers`` processes (one per core by default), or None where forking is unsafe."""
        import multiprocessing  # here, not at import: a capture of a small dump never starts a pool (~5 ms)

        cores = os.cpu_count() or 1
        if cores < 2 or threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
            return None
        if any(name in sys.modules for name in _NATIVE_THREADED):
            return None  # their thread pools are invisible to threading, and as unsafe to fork beside
        return cls(max(1, min(cores, workers or cores)))

    def submit(self, name: DumpName, data: bytes, with_fingerprint: bool) -> Any:
        """A future of (True, facts) or (False, the parse error's message)."""
        return self.pool.submit(_facts_job, name, data, with_fingerprint)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class gather_facts:
    """Facts of the stage dumps an ingest needs: ``result()`` maps (digest, with fingerprint) to facts or a
    parse error. Use as a context manager and do other work meanwhile (:meth:`as_completed` hands each
    file's facts over as they come): when there is much to parse, the full parses (for fingerprints) go to
    a :class:`FactsPool` of one process per core but one, and the other files are read in this process as
    :meth:`as_completed` asks for them (measured on the benchmark: ingest 0.35-0.41 s against 0.45 s with
    every file in a worker, and less CPU). Otherwise :func:`summarize_module` parses what is not cached,
    in this thread.
    """

    def __init__(self, store: RunStore, facts: FactsCache, wanted: list[tuple[StoredFile, DumpName, bool]]):
        self.cache = facts
        self.out: dict[tuple[str, bool], _StageFacts | str] = {}
        self.pool: FactsPool | None = None
        self.futures: dict = {}
        self.here: dict[tuple[str, bool], tuple[DumpName, bytes]] = {}  # read in this process while the pool parses
        todo: dict[tuple[str, bool], tuple[DumpName, int]] = {}
        for stored, name, with_fingerprint in wanted:
            key = (stored.digest, with_fingerprint)
            found = facts.get(key)
            if found is not None:
                self.out[key] = found
            else:
                todo[key] = (name, stored.size)
        full = {key: job for key, job in todo.items() if key[1]}  # parsed in full, for the fingerprint
        if full and len(todo) >= 2 and sum(size for _name, size in todo.values()) >= PARALLEL_PARSE_BYTES:
            # the full parses go to the workers; the rest (a scan each, 5x cheaper per byte) is read here, so
            # on two cores one worker parses while this process reads and writes the index
            self.pool = FactsPool.start(workers=min(len(full), (os.cpu_count() or 2) - 1))
        if self.pool is None:
            return
        for key, (name, _size) in sorted(full.items(), key=lambda kv: -kv[1][1]):  # the biggest first: they bound the wall time
            self.futures[key] = self.pool.submit(name, _stage_bytes(store, facts, key[0]), True)
        self.here = {key: (name, _stage_bytes(store, facts, key[0])) for key, (name, _size) in todo.items() if key not in full}

    def as_completed(self) -> Iterator[tuple[tuple[str, bool], _StageFacts | str]]:
        """(key, facts or the parse error) of each file read here or in the pool, as each is done (nothing
        without a pool): the caller works with them while the pool parses the rest."""
        for key in list(self.here):
            yield key, self._read_here(key)
        from concurrent.futures import as_completed  # loaded on first use, like the pool

        keys = {future: key for key, future in self.futures.items()}
        for future in as_completed(keys):
            yield keys[future], self._collect(keys[future])

    def _read_here(self, key: tuple[str, bool]) -> _StageFacts | str:
        name, data = self.here.pop(key)
        return self._record(key, *_facts_job(name, data, key[1]))

    def result(self) -> dict[tuple[str, bool], _StageFacts | str]:
        """Every file's facts or parse error (cached ones included), by key."""
        for key in list(self.here):
            self._read_here(key)
        for key in list(self.futures):
            self._collect(key)
        return self.out

    def _collect(self, key: tuple[str, bool]) -> _StageFacts | str:
        return self._record(key, *self.futures.pop(key).result())

    def _record(self, key: tuple[str, bool], ok: bool, result: _StageFacts | str) -> _StageFacts | str:
        self.out[key] = result
        if ok:
            self.cache.remember(key, result)  # type: ignore[arg-type]
        return result

    def __enter__(self) -> gather_facts:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.close()


def count_pass_dumps(
    store: RunStore, facts: FactsCache, files: list[tuple[StoredFile, DumpName]], counts: dict[str, int]
) -> None:
    """Count the instructions of every text pass dump among ``files`` ((StoredFile, DumpName) pairs) not yet
    in ``counts`` (by digest), for the pass timelines."""
    for stored, name in files:
        if name.kind == "pass" and name.format == "text":
            _pass_count(store, facts, stored, counts)


def _pass_count(store: RunStore, facts: FactsCache, stored: StoredFile, counts: dict[str, int]) -> int:
    """A text pass dump's instruction count: from ``counts``, else counted while archiving, else counted now."""
    count = counts.get(stored.digest)
    if count is None:
        count = facts.count_of(stored.digest)
        if count is None:
            count = count_instructions_in_text(store.blobs.get(stored.digest))
        counts[stored.digest] = count
    return count


def _facts_job(name: DumpName, data: bytes, with_fingerprint: bool) -> tuple[bool, _StageFacts | str]:
    """In a worker process: (True, facts) or (False, the parse error's message)."""
    try:
        return True, _facts_from(name, data, with_fingerprint)
    except XlarunError as exc:
        return False, exc.message


def _stage_bytes(store: RunStore, facts: FactsCache, digest: str) -> bytes:
    """A stage dump's bytes: as the archiver kept them, else from the store."""
    data = facts.take_stage_bytes(digest)
    return data if data is not None else store.blobs.get(digest)


def summarize_module(
    store: RunStore,
    facts_cache: FactsCache,
    module_id: int,
    members: list[tuple[StoredFile, DumpName]],
    counts: dict[str, int],
    gathered: dict[tuple[str, bool], _StageFacts | str] | None = None,
) -> ModuleSummary:
    """A module's summary from its files (``members``: (StoredFile, DumpName) pairs); ``counts`` memoizes
    pass-dump instruction counts by digest and gains the new ones; ``gathered`` holds facts from
    :func:`gather_facts`."""
    names = [n.module_name for _s, n in members if n.module_name]
    stages = sorted({stage_label(n) for _s, n in members if n.kind == "hlo"}, key=lambda s: (s != "before_optimizations", s))
    backends = [n.backend for _s, n in members if n.backend]
    pass_members = [(s, n) for s, n in members if n.kind == "pass"]
    summary = ModuleSummary(
        module_id=module_id,
        name=max(names, key=len) if names else None,  # long names are dropped from some file names only
        backend=backends[0] if backends else None,
        stages=stages,
        n_pass_dumps=len({(n.step, n.pipeline) for _s, n in pass_members}),
        n_files=len(members),
        process=next((n.process for _s, n in members if n.process is not None), None),
    )
    errors = []
    for stage, attr in (("before_optimizations", "before"), ("after_optimizations", "after")):
        best = _best_hlo(members, stage)
        if best is None:
            continue
        stored, name = best
        facts = (gathered or {}).get((stored.digest, attr == "before"))
        if isinstance(facts, str):
            errors.append(f"{stored.path}: {facts}")
            continue
        try:
            facts = facts or _stage_facts(store, facts_cache, stored, name, with_fingerprint=attr == "before")
        except XlarunError as exc:
            errors.append(f"{stored.path}: {exc.message}")
            continue
        setattr(summary, f"instr_{attr}", facts.instructions)
        setattr(summary, f"opcodes_{attr}", facts.opcodes)
        setattr(summary, f"annotations_{attr}", facts.annotations)
        if attr == "before" or summary.hlo_bytes == 0:
            summary.hlo_bytes = stored.size
        if attr == "before" or summary.entry_signature is None:
            summary.entry_signature = facts.entry_signature
        if attr == "before":
            summary.fingerprint = facts.fingerprint
            summary.elided_constants = facts.elided_constants
        elif summary.fingerprint is None:
            summary.elided_constants = facts.elided_constants
        summary.terms |= facts.terms
        if attr == "before" or summary.own_code is None:
            summary.own_code = facts.own_code
    summary.parse_error = "; ".join(errors) or None
    summary.passes = _pass_timeline(store, facts_cache, pass_members, counts)
    return summary


def _pass_timeline(
    store: RunStore, facts: FactsCache, pass_members: list[tuple[StoredFile, DumpName]], counts: dict[str, int]
) -> list[PassInfo]:
    """One entry per pass dump step; text dumps are counted once per content (``counts`` memoizes by digest)."""
    by_step: dict[tuple, list] = defaultdict(list)
    for stored, name in pass_members:
        by_step[(name.step, name.pipeline)].append((stored, name))
    out = []
    for (step, pipeline), items in sorted(by_step.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or "")):
        items.sort(key=lambda sn: {"text": 0, "dot": 2}.get(sn[1].format or "", 1))
        stored, name = items[0]
        count = None
        if name.format == "text":
            count = _pass_count(store, facts, stored, counts)
        out.append(PassInfo(step or 0, pipeline, name.after_pass, name.before_pass, stored.path, count))
    return out
