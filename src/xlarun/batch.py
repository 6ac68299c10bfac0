"""Batch runs: every cell of a matrix spec captured as an ordinary run, in parallel, side by side."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from xlarun.capture.answers import capture_failure
from xlarun.capture.launch import CaptureResult, capture
from xlarun.capture.spec_yaml import LoadedSpec
from xlarun.errors import ExitCode, XlarunError
from xlarun.interrupts import StopRequest, stop_on_signals
from xlarun.store.facade import LocalStore
from xlarun.store.rows import RunStatus


def new_batch_id() -> str:
    """``b20261122-103015-a1b2``: time-sortable like run ids, with a 'b' so the two are never confused."""
    return f"b{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


@dataclass
class CellOutcome:
    """One cell of a batch: its matrix values and how its capture went."""

    index: int
    values: dict[str, Any]
    state: str = "pending"  # pending, running, done, error, skipped
    started: float | None = None
    elapsed_s: float | None = None
    result: CaptureResult | None = None
    error: str | None = None
    node: str | None = None  # where the cell ran, for executors that spread cells over machines (ray)
    attempts: list[str] = field(default_factory=list)  # why earlier attempts failed (a node lost mid-cell)
    shipped_bytes: int | None = None  # bytes sent back from the node to this store (ray)
    error_exit: ExitCode = ExitCode.FAILED  # with ``error``: the exit code of the XlarunError that said it

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or f"cell {self.index}"

    @property
    def status(self) -> str:
        if self.result is not None:
            return self.result.status.value if self.result.ok or self.result.status != RunStatus.SUCCEEDED else "no dump"
        return self.state if self.error is None else "error"

    @property
    def ok(self) -> bool:  # captured, and pushed when the spec names a remote
        return self.result is not None and self.result.ok and (self.result.push is None or self.result.push.pushed)

    @property
    def exit_code(self) -> int:
        """What ``xlarun capture`` of this cell alone would have exited with (0: captured; one not run: 0)."""
        if self.result is not None:
            failure = capture_failure(self.result)
            return int(failure.exit_code) if failure is not None else 0
        return int(self.error_exit) if self.error is not None else 0


@dataclass
class BatchResult:
    batch_id: str
    cells: list[CellOutcome] = field(default_factory=list)
    interrupted: bool = False
    signal: str | None = None  # the signal that stopped the batch (SIGINT, SIGTERM, SIGHUP), if one did

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(c.ok for c in self.cells)

    @property
    def exit_code(self) -> int:
        """The batch's exit code, in ``capture``'s terms: the signal's when one stopped it (130, 143, 129); 0 when
        every cell captured; else the code its failed cells share (3 for a store that cannot be written, 124 for
        timeouts, 1 for jobs that failed), and where they differ, 3 when any cell failed for the store or a
        component (that needs fixing before any cell can work), else 1. Cells a ``fail_fast`` stopped do not count."""
        if self.interrupted:
            from xlarun.interrupts import exit_code_for

            return exit_code_for(self.signal)
        if self.ok:
            return 0
        codes = {
            cell.exit_code for cell in self.cells if not (cell.result is not None and cell.result.status == RunStatus.INTERRUPTED)
        } - {0}
        if ExitCode.ENVIRONMENT in codes:
            return int(ExitCode.ENVIRONMENT)
        return codes.pop() if len(codes) == 1 else int(ExitCode.FAILED)


class CellSkipped(Exception):
    """Raised by a :class:`CellCapture` for a cell the batch's stop caught before it started anywhere (still
    queued on a cluster): it is ``skipped``, as a cell not yet started here is, and nothing of it is kept."""


#: Called whenever a cell changes state (for a progress view).
BatchEvent = Callable[[CellOutcome], None]


class CellCapture(Protocol):
    """How one cell is captured: in this process (:func:`capture_here`), or elsewhere by an executor
    (``xlarun.executors``). May set ``outcome.node`` and call ``notify`` as the cell moves; returns the
    committed run, or raises :class:`XlarunError` with why the cell could not be run."""

    def __call__(
        self, loaded: LoadedSpec, outcome: CellOutcome, batch_id: str, stop: StopRequest, notify: BatchEvent
    ) -> CaptureResult: ...


def capture_here(store: LocalStore) -> CellCapture:
    """The local executor: each cell is an ordinary capture into ``store`` by this process."""

    def capture_cell(
        loaded: LoadedSpec, outcome: CellOutcome, batch_id: str, stop: StopRequest, notify: BatchEvent
    ) -> CaptureResult:
        return capture(loaded, store, batch_id=batch_id, matrix=outcome.values or None, stop=stop)

    return capture_cell


def run_batch(
    cells: list[LoadedSpec],
    store: LocalStore,
    *,
    jobs: int = 1,
    fail_fast: bool | None = None,
    on_event: BatchEvent | None = None,
    batch_id: str | None = None,
    capture_cell: CellCapture | None = None,
) -> BatchResult:
    """Capture every cell, at most ``jobs`` at a time; each cell becomes a run tagged with the batch and its values.
    ``capture_cell`` runs one cell (default: :func:`capture_here`, a capture by this process).

    SIGINT (Ctrl-C), SIGTERM or SIGHUP stops the running jobs (their runs are archived as interrupted, the
    signal named in their manifests) and skips the rest.
    With ``fail_fast`` (default: the spec's ``fail_fast``) the first failure does the same.
    """
    if fail_fast is None:
        fail_fast = any(c.spec.fail_fast for c in cells)
    batch = BatchResult(batch_id or new_batch_id())
    batch.cells = [CellOutcome(i, c.matrix_values or {}) for i, c in enumerate(cells)]
    stop = StopRequest()
    cancel = stop.cancel
    notify = on_event or (lambda _cell: None)
    capture_cell = capture_cell or capture_here(store)

    def run_cell(outcome: CellOutcome, loaded: LoadedSpec) -> None:
        if cancel.is_set():
            outcome.state = "skipped"
            notify(outcome)
            return
        outcome.state = "running"
        outcome.started = time.monotonic()
        notify(outcome)
        try:
            outcome.result = capture_cell(loaded, outcome, batch.batch_id, stop, notify)
            outcome.state = "done"
        except CellSkipped:
            outcome.state, outcome.started = "skipped", None
            notify(outcome)
            return
        except XlarunError as exc:
            outcome.error, outcome.error_exit = exc.one_line(), exc.exit_code
            outcome.state = "error"
        except Exception as exc:  # a bug or an SDK error: the other cells go on, the cell says why it failed
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.state = "error"
        outcome.elapsed_s = time.monotonic() - outcome.started
        notify(outcome)
        if fail_fast and not outcome.ok:
            cancel.set()

    with stop_on_signals(stop), ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="xlarun-cell") as pool:
        pending: set[Future] = {pool.submit(run_cell, o, c) for o, c in zip(batch.cells, cells, strict=True)}
        try:
            while pending:
                _done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:  # SIGINT with another handler than ours (a notebook)
            cancel.set()  # running jobs stop and are archived as interrupted; queued cells are skipped
            wait(pending)
            batch.interrupted = True
    if stop.received:
        batch.interrupted, batch.signal = True, stop.signal_name
    return batch


def main_module_counts(result: CaptureResult | None) -> tuple[int | None, int | None]:
    """Instruction counts of a run's main module before and after optimization."""
    if result is None or not result.modules:
        return None, None
    main = result.modules[0]
    return main.instr_before, main.instr_after


def cell_summary(cell: CellOutcome) -> dict:
    """What a batch reports of one cell (its --json entry and its row of the comparison table)."""
    before, after = main_module_counts(cell.result)
    result = cell.result
    return {
        "values": cell.values,
        "status": cell.status,
        "error": cell.error,
        "run_id": result.run_id if result else None,
        "seconds": round(cell.elapsed_s, 3) if cell.elapsed_s is not None else None,
        "modules": len(result.modules) if result else None,
        "main_module": result.modules[0].name if result and result.modules else None,
        "main_fingerprint": result.modules[0].fingerprint if result and result.modules else None,
        "main_instr_before": before,
        "main_instr_after": after,
        "files": result.manifest.files if result else None,
        "dump_bytes": result.manifest.dump_bytes if result else None,
        "node": cell.node,
        "attempts": cell.attempts,
        "shipped_bytes": cell.shipped_bytes,
        "push": result.push.to_json() if result and result.push else None,  # to the spec's `remote:`
        # ray: whether the node ran the spec's folder in place or the copy sent with the cell (executors/project.py)
        "project": ((result.manifest.backend_details or {}).get("ray") or {}).get("project") if result else None,
    }
