"""Indexing overlapped with archiving: the stage dumps a run's index needs are parsed as the archiver reads them.

While the job runs, the archiver's thread parses each stage dump itself (:meth:`FactsCache.prepare`: the job leaves
cores idle between compiles). Once the job has ended, the archiver reads every remaining file on every core, and the
parses used to wait for it: ingest began only after the commit, so archiving and indexing ran one after the other
(issue 36: 5.4-6.9x ``cat`` in wall time for 1.0-1.1 s of CPU). A :class:`ParseAhead` takes each stage dump the
moment it is archived and parses it in a thread of its own, beside the archive's threads, whose work (reading,
hashing, compressing) runs outside the GIL; the facts land in the store's :class:`FactsCache`, where ingest finds
them.

Nothing is written to the index here: the run's rows are still written after its commit, in one transaction, so the
index never lists a run ``runs/`` lacks and a kill at any point leaves nothing half-visible. A file that fails to parse
is left to ingest, which parses it again and records the error.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import TYPE_CHECKING

from xlarun.killpoints import kill_point
from xlarun.store.memory_index import BUFFER_ASSIGNMENT, allocation_sums
from xlarun.store.summaries import _facts_from

if TYPE_CHECKING:
    from xlarun.hlo.names import DumpName
    from xlarun.store.summaries import FactsCache

_Job = tuple["DumpName", tuple[str, bool], bytes]

#: Bytes waiting to be parsed at most: past them a stage dump is kept for ingest as before (the archive reads far
#: faster than a parse, and a run of thousands of modules must not queue all its dumps' bytes).
QUEUED_BYTES_MAX = 64 << 20
#: The GIL's switch interval while the parse runs beside the archive.
SWITCH_INTERVAL_S = 0.0005


class _ShortSwitches:
    """The switch interval is the process's: several archivers finishing at once (batch cells run in threads) set it
    once, and the last to finish puts back what it was."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.before = sys.getswitchinterval()

    def begin(self) -> None:
        with self.lock:
            if self.users == 0:
                self.before = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            self.users += 1

    def end(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                sys.setswitchinterval(self.before)


_SHORT_SWITCHES = _ShortSwitches()  # process-wide, as the setting it guards


class ParseAhead:
    """A context (the archiver enters it around its last rounds) during which the stage dumps
    :meth:`FactsCache.prepare` sees are parsed in a background thread; leaving it waits for the last parse."""

    def __init__(self, facts: FactsCache):
        self.facts = facts
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._queued = 0  # bytes waiting
        self._cancelled = False
        self._lock = threading.Lock()
        self.parsed = 0  # files parsed here (for tests and the benchmark)

    def __enter__(self) -> ParseAhead:
        # the parse holds the GIL for long stretches: the archive's threads, back from reading, hashing or
        # compressing, would wait a whole switch interval (5 ms) each time to take it back
        _SHORT_SWITCHES.begin()
        self._thread = threading.Thread(target=self._parse_each, name="xlarun-parse-ahead", daemon=True)
        self._thread.start()
        self.facts.parse_later = self.take
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.facts.parse_later = None
        self._cancelled = exc_type is not None  # archiving failed or was interrupted: what waits is not parsed
        self._jobs.put(None)
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        _SHORT_SWITCHES.end()

    def take(self, name: DumpName, key: tuple[str, bool], data: bytes) -> bool:
        """Parse a stage dump or buffer assignment (``key``: its digest, and whether its fingerprint is wanted) in the
        background; False when too many bytes already wait (the caller keeps it for ingest)."""
        with self._lock:
            if self._queued + len(data) > QUEUED_BYTES_MAX:
                return False
            self._queued += len(data)
        self._jobs.put((name, key, data))
        return True

    def _parse_each(self) -> None:
        while (job := self._jobs.get()) is not None:
            name, key, data = job
            try:
                if not self._cancelled:
                    self._parse(name, key, data)
            except Exception:  # a parse error (or a reader's bug) must not stop the archive: ingest meets it again
                pass
            finally:
                with self._lock:
                    self._queued -= len(data)

    def _parse(self, name: DumpName, key: tuple[str, bool], data: bytes) -> None:
        if name.kind == BUFFER_ASSIGNMENT:  # the module's peak memory (store/memory_index.py)
            sums = allocation_sums(data, name.path)
            with self.facts.lock:
                if len(self.facts.memory) > self.facts.COUNTS_SIZE:
                    self.facts.memory.clear()
                self.facts.memory[key[0]] = sums
            return
        if self.facts.get(key) is not None:
            return
        found = _facts_from(name, data, key[1])
        self.facts.remember(key, found)
        self.parsed += 1
        kill_point("parsed-ahead")
