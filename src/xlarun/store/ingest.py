"""Ingest: a committed run's files become index rows (runs, files, modules, passes, search terms).

The layer above the store and the index: it reads a run from the store (:class:`~xlarun.store.runs.RunStore`),
parses its stage dumps (:mod:`xlarun.store.summaries`, using the store's :class:`~xlarun.store.summaries.FactsCache`), and
writes the rows through :class:`~xlarun.store.index.Index`. :func:`reconcile` brings an index up to date with
``runs/``: the index is derived data, and a run committed by a process killed before it indexed is indexed
by the next command that opens the store.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from xlarun.errors import ExitCode, StoreError, os_error_words
from xlarun.hlo.names import DumpName, decode_dump_name
from xlarun.store.code_origin import settle_own_code
from xlarun.store.index import Index
from xlarun.store.memory_index import index_memory
from xlarun.store.profile_index import index_profiles
from xlarun.store.rows import DamagedRun, StoredFile
from xlarun.store.runs import RunStore
from xlarun.store.summaries import FactsCache, count_pass_dumps, gather_facts, stage_files, summarize_module

# kinds that name a module but are kept apart from its files: the frameworks' own IR and reports, PJRT inputs
_NOT_MODULE_FILES = ("tf-graph", "jax-ir", "torch-xla", "poplar-report", "pjrt-compile-input")


#: Numbers a file name carries beyond what SQLite stores (module_99999999999999999999...): not a module's.
_MAX_ID = (1 << 63) - 1


def _storable(name: DumpName) -> DumpName:
    """A name whose module id or step SQLite cannot store is kept as a file of no module (kind unknown)."""
    if any(
        v is not None and not -_MAX_ID <= v <= _MAX_ID
        for v in (name.module_id, name.step, name.timestamp_us, name.execution, name.snapshot_id, name.pid)
    ):
        return DumpName(name.path)
    return name


def tie_to_named_modules(decoded: list[tuple[StoredFile, DumpName]]) -> list[tuple[StoredFile, DumpName]]:
    """Give a file whose name carries a module name but no id (TensorFlow's and PyTorch/XLA-on-Neuron's
    ``module_<name>.execution_<n>.hlo_snapshot.pb``) the id of the one module of the run with that name."""
    ids_by_name: dict[tuple[int | None, str], set[int]] = defaultdict(set)  # by (process, name): ids are per process
    for _stored, name in decoded:
        if name.module_id is not None and name.module_name and name.kind not in _NOT_MODULE_FILES:
            ids_by_name[(name.process, name.module_name)].add(name.module_id)
    tied = []
    for stored, name in decoded:
        ids = ids_by_name.get((name.process, name.module_name or ""), set()) if name.module_id is None else set()
        # Two modules of one name (a function compiled twice, or one jit over two ids as in xla#7193): the file
        # name cannot say which one ran, so the file stays with no module rather than with a guessed one.
        if len(ids) == 1 and name.kind not in _NOT_MODULE_FILES:
            name = replace(name, module_id=next(iter(ids)))
        tied.append((stored, name))
    return tied


def reconcile(index: Index, store: RunStore, facts: FactsCache) -> tuple[list[str], dict[str, str]]:
    """Index committed runs the index lacks, forget runs that are gone; returns the ids indexed, and the runs left
    out (:func:`ingest_unless_damaged`) with why."""
    on_disk = set(store.run_ids())
    indexed = index.run_ids()
    for gone in indexed - on_disk:
        index.forget_run(gone)
    added, left_out = [], {}
    for run_id in sorted(on_disk - indexed):
        try:
            why = ingest_unless_damaged(index, store, run_id, facts)
        except StoreError:  # the index cannot be written (a full disk): the next command tries again
            continue
        if why is None:
            added.append(run_id)
        else:
            left_out[run_id] = why
    return added, left_out


def ingest_unless_damaged(index: Index, store: RunStore, run_id: str, facts: FactsCache) -> str | None:
    """Index one run (:func:`ingest_run`), or leave out a run whose manifest or file list is damaged or that this user
    cannot read, saying why (None once indexed): one damaged run never stops the others being indexed."""
    try:
        ingest_run(index, store, run_id, facts)
    except DamagedRun as exc:
        return exc.why
    except PermissionError as exc:
        return f"it cannot be read ({os_error_words(exc)})"
    except StoreError as exc:  # what the bounded reader refused (a FIFO, a link, a folder, a path leaving the run)
        if exc.exit_code == ExitCode.FAILED:
            return exc.message
        if exc.message.startswith("cannot read "):  # this user may not read it
            return f"it cannot be read ({exc.message.rsplit(': ', 1)[-1]})"
        raise  # the index cannot be written (a full disk): not the run's damage
    return None


def decode_run_files(files: list[StoredFile]) -> list[tuple[StoredFile, DumpName]]:
    """Each file with what its name says, files named by module name tied to their module's id."""
    return tie_to_named_modules([(f, _storable(decode_dump_name(f.path))) for f in files])


def ingest_run(index: Index, store: RunStore, run_id: str, facts: FactsCache, files: list[StoredFile] | None = None) -> None:
    """Index one committed run: its manifest, files, modules, passes and search terms, in one transaction.
    ``files``: what its ``files.json`` lists, from the writer that just committed it (else read back)."""
    manifest = store.manifest(run_id)
    decoded = decode_run_files(store.stored_files(run_id) if files is None else files)
    by_module: dict[int, list[tuple[StoredFile, DumpName]]] = defaultdict(list)
    for stored, name in decoded:
        if name.module_id is not None and name.kind not in _NOT_MODULE_FILES:
            by_module[name.module_id].append((stored, name))
    counts = index.known_text_counts({f.digest for f, n in decoded if n.kind == "pass" and n.format == "text"})
    known = set(counts)
    wanted = {module_id: stage_files(members) for module_id, members in by_module.items()}
    holders: dict[tuple[str, bool], list[int]] = defaultdict(list)  # a stage dump's content may be in several modules
    for module_id, stages in wanted.items():
        for stored, _name, with_fingerprint in stages:
            holders[(stored.digest, with_fingerprint)].append(module_id)
    # one transaction, begun while the stage dumps are parsed: the rows that need no parse, and the
    # search terms of each dump as it is parsed, are written meanwhile
    with gather_facts(store, facts, [w for stages in wanted.values() for w in stages]) as gathering, index.transaction():
        count_pass_dumps(store, facts, [m for members in by_module.values() for m in members], counts)
        index.write_run(run_id, manifest, decoded, len(by_module))
        terms = index.term_writer(run_id)
        for key, found in gathering.as_completed():
            if not isinstance(found, str):
                for module_id in holders[key]:
                    terms.add(module_id, found.terms)
        gathered = gathering.result()
        summaries = [
            summarize_module(store, facts, module_id, members, counts, gathered)
            for module_id, members in sorted(by_module.items())
        ]
        for summary, settled in zip(summaries, settle_own_code([s.own_code for s in summaries]), strict=True):
            summary.own_code = settled
            index.write_module(run_id, summary)
            terms.add(summary.module_id, summary.terms)  # those not written above (cached, or parsed here)
        terms.flush()
        index_profiles(index.conn, store, run_id, decoded)  # op times, when the run was profiled
        index_memory(index.conn, store, run_id, decoded, facts.memory)  # peak memory, where the buffer assignment was dumped
        index.remember_text_counts({digest: n for digest, n in counts.items() if digest not in known})
