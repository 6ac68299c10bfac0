"""The ``ray`` executor: each cell of a batch is a Ray task on a node that serves its backend.

The driver (``xlarun batch --executor ray``) runs the batch as :func:`xlarun.batch.run_batch` does, one thread
per cell in flight, each thread driving one cell through the cluster:

1. the cell's task (:func:`~xlarun.executors.node_side.capture_cell_on_node`) asks for one unit of its backend's
   resource (``xlarun_local``, ``xlarun_docker_cpu``...; see :mod:`placement`), says which node it landed on, runs
   the ordinary capture into a staging store of that node and reports the run's file list;
2. the driver works out which of those files its store lacks, and a second task, pinned to the same node,
   sends back the run with only those files (:mod:`shipping`);
3. the driver verifies every digest and commits the run under its own id, as a capture commits, and indexes it.

A cell whose backend no node offers fails at once, naming what the cluster offers. A node that dies mid-cell
(Ray marks it dead, or its raylet goes away under the task) fails the cell with that reason, or runs it again
elsewhere with ``retries``; Ray's own retries are off, so every attempt is one the driver knows of, and a run
is committed once per cell.

A stop (Ctrl-C, SIGTERM, SIGHUP, or ``fail_fast``) does what it does to a local batch: cells still queued are
``skipped`` and nothing of them runs; each running cell's node stops its job (process group or container) as the
driver was stopped, archives what it wrote as an ``interrupted`` run naming the signal, and the driver ships that
run back as any other before it exits. A node that does not confirm within the grace is named in one line, its
run left there; one more signal meanwhile stops the driver at once, saying what is left on which node.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from typing import Any

from xlarun.batch import BatchEvent, BatchResult, CellOutcome, CellSkipped, run_batch
from xlarun.capture.launch import CaptureResult
from xlarun.capture.spec_yaml import LoadedSpec
from xlarun.errors import EnvironmentProblem, JobFailed, XlarunError
from xlarun.executors.node_side import (
    STOP_GRACE_S,
    capture_cell_on_node,
    discard_scratch,
    fetch_run,
    interrupt_cell,
    new_scratch_name,
)
from xlarun.executors.placement import describe_offer, resource_for
from xlarun.executors.project import Project, ProjectTooBig, project_root, snapshot
from xlarun.executors.ray_connect import connect
from xlarun.executors.shipping import lacking, receive_run
from xlarun.interrupts import StopRequest
from xlarun.store.facade import LocalStore
from xlarun.store.manifest import Manifest
from xlarun.store.remote import RemoteSpec
from xlarun.store.rows import RunStatus

_POLL_S = 0.2
#: Cells in flight at once when ``jobs`` is not given (Ray queues the rest by resources anyway).
DEFAULT_IN_FLIGHT = 32


class CellLost(Exception):
    """The node running a cell was lost: the attempt failed, and may be retried elsewhere."""


class CellStopped(Exception):
    """The batch was stopped (Ctrl-C, fail_fast) while the cell ran: its task was cancelled."""


class _NodeWatch:
    """Which Ray nodes are alive, read from the cluster at most once per ``every_s`` for all cells together."""

    def __init__(self, ray: Any, every_s: float = 1.0) -> None:
        self.ray, self.every_s = ray, every_s
        self.lock = threading.Lock()
        self.read_at = 0.0
        self.alive_ids: set[str] = set()

    def alive(self, node_id: str) -> bool:
        with self.lock:
            if time.monotonic() - self.read_at > self.every_s:
                try:
                    self.alive_ids = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
                except Exception:  # the GCS is busy or restarting: keep what was known
                    return True
                self.read_at = time.monotonic()
            return node_id in self.alive_ids


class RayCellCapture:
    """Captures one cell on the cluster (an :class:`xlarun.batch.CellCapture`); see the module docstring."""

    def __init__(
        self,
        ray: Any,
        store: LocalStore,
        retries: int = 0,
        ship: str = "auto",
        projects: dict[str, Any] | None = None,
        remote: RemoteSpec | None = None,
    ) -> None:
        self.ray = ray
        self.remote = remote  # a team store: each node pushes its cells' runs there, nothing comes back here
        self.mirror_lock = threading.Lock()
        self.store = store
        self.retries = max(0, retries)
        self.ship = ship
        self.projects = projects or {}  # project folder -> its snapshot in Ray's object store (see project.py)
        self.offered: dict[str, float] = ray.cluster_resources()
        # max_retries=0: a lost attempt comes back to the driver, which alone decides to run it again
        self.capture_task = ray.remote(num_cpus=0, max_retries=0)(capture_cell_on_node)
        self.fetch_task = ray.remote(num_cpus=0, max_retries=0)(fetch_run)
        self.interrupt_task = ray.remote(num_cpus=0, max_retries=0)(interrupt_cell)
        self.discard_task = ray.remote(num_cpus=0, max_retries=0)(discard_scratch)
        self.nodes = _NodeWatch(ray)
        self.in_flight: set = set()
        self.lock = threading.Lock()
        self.left: dict[int, str] = {}  # cell index -> what of it is on a node, not yet in this store
        self.closed = threading.Event()
        self.watching = False

    def __call__(
        self, loaded: LoadedSpec, outcome: CellOutcome, batch_id: str, stop: StopRequest, notify: BatchEvent
    ) -> CaptureResult:
        self._watch_for_another_signal(stop)
        need = resource_for(loaded.spec.backend)
        if not self.offered.get(need):
            raise EnvironmentProblem(
                f"no node of the cluster offers {need}, which a {loaded.spec.backend.kind} cell needs; the cluster offers: {describe_offer(self.offered)}",
                "start `xlarun worker --address ADDR` on a machine that serves it; `xlarun doctor` there says what it lacks",
            )
        request = pickle.dumps((loaded, batch_id, outcome.values or None, list(sys.argv)))
        project = self.projects.get(str(project_root(loaded)))
        for attempt in range(1, self.retries + 2):
            try:
                return self._attempt(request, project, need, outcome, stop, notify, attempt)
            except CellLost as lost:
                outcome.attempts.append(f"attempt {attempt} on {outcome.node or 'a node'}: {lost}")
                if attempt > self.retries or stop.cancel.is_set():
                    tried = f" ({attempt} attempts)" if attempt > 1 else ""
                    raise JobFailed(
                        f"{lost}{tried}", None if self.retries else "--retries 1 runs a cell whose node was lost again elsewhere"
                    ) from None
                outcome.node = None
                notify(outcome)
            except CellStopped as stopped:
                raise JobFailed(f"stopped: {stopped}") from None
            finally:
                with self.lock:
                    self.left.pop(outcome.index, None)
        raise AssertionError("unreachable")

    def _attempt(
        self, request: bytes, project: Any, need: str, outcome: CellOutcome, stop: StopRequest, notify: BatchEvent, attempt: int
    ) -> CaptureResult:
        scratch_name = new_scratch_name()
        gen = self.capture_task.options(resources={need: 1}, name=f"xlarun-cell-{outcome.index}").remote(
            request, scratch_name, project, self.ship, _remote_entry(self.remote)
        )
        with self._tracked(gen):
            try:
                node = self._next(gen, stop, None)
            except CellStopped:  # still queued (or only just started): nothing ran yet, nothing is kept
                self._cancel(gen)
                raise CellSkipped() from None
            outcome.node = f"{node['node_ip']}/{node['node_id'][:8]}"
            notify(outcome)
            try:
                report = self._next(gen, stop, node)
            except CellStopped:
                report = self._interrupt(gen, node, scratch_name, stop, outcome)
        if report.get("error"):
            raise XlarunError(report["error"])
        if report.get("pushed"):
            return self._pushed(report, outcome)
        if report.get("push_error") and self.remote is not None:  # the run comes here instead: nothing is lost
            said = (
                f"run {report['run_id']} not pushed to {self.remote.url} ({report['push_error']}): shipped to this"
                f" store instead; `xlarun push {report['run_id']} --remote {self.remote.name}` sends it"
            )
            report["warnings"] = [*(report.get("warnings") or []), said]
            _say(said)
        # from here the run exists on the node: it is shipped whatever happens to the batch (a second signal aside)
        self._leave(outcome, f"run {report['run_id']} ({report.get('status')}) is in {report['scratch']}/store{_on(node)}")
        digests = [digest for _path, digest, _size in report["files"]]
        missing = sorted(lacking(self.store, digests))
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
        try:
            ref = self.fetch_task.options(scheduling_strategy=pinned).remote(report["scratch"], report["run_id"], missing)
            with self._tracked(ref):
                shipment = self._get(ref, None, node)
            where = ray_details(node["node_id"], node, shipment, report.get("project"), attempt=attempt)
            received = receive_run(self.store, shipment, where)
        finally:  # committed here, or it could not be (as before): the node drops its copy
            self._discard(pinned, node, report["scratch"])
        outcome.shipped_bytes = shipment.wire_bytes
        manifest = Manifest.model_validate(self.store.manifest(received.run_id))
        modules = self.store.index.modules(received.run_id)
        return CaptureResult(
            received.run_id,
            RunStatus(manifest.status),
            manifest.exit_code,
            received.run_dir,
            manifest,
            modules,
            list(report.get("warnings") or manifest.warnings),
            None,
            manifest.signal,
        )

    def _pushed(self, report: dict, outcome: CellOutcome) -> CaptureResult:
        """A run its node pushed to the team store: read back from the remote's mirror (its small objects only)."""
        from xlarun.store.remote_index import open_mirror

        assert self.remote is not None
        with self.mirror_lock:
            mirror = open_mirror(self.remote)
        run_id = report["run_id"]
        manifest = Manifest.model_validate(mirror.manifest(run_id))
        outcome.shipped_bytes = 0  # nothing of the run went through this driver
        return CaptureResult(
            run_id,
            RunStatus(manifest.status),
            manifest.exit_code,
            mirror.run_path(run_id),
            manifest,
            mirror.index.modules(run_id),
            list(report.get("warnings") or manifest.warnings),
            None,
            manifest.signal,
        )

    def _interrupt(self, gen: Any, node: dict, scratch_name: str, stop: StopRequest, outcome: CellOutcome) -> dict:
        """The batch was stopped while the cell ran: have its node stop the job as the driver was stopped (its
        signal) and archive what it wrote as an ``interrupted`` run; the report of that run, to be shipped as any.
        Waits up to the grace; past it, JobFailed saying which node did not confirm (its run stays there)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._leave(outcome, f"its job is being stopped and archived in {node['scratch']}/store{_on(node)}")
        pinned = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
        grace = STOP_GRACE_S + 15
        until = time.monotonic() + grace
        try:
            self.ray.get(
                self.interrupt_task.options(scheduling_strategy=pinned).remote(scratch_name, stop.signal_name), timeout=grace
            )
        except Exception:  # the node is gone or slow: the wait below tells which
            pass
        if not self._wait(gen, None, node, until=until):
            self._cancel(gen)  # the capture goes on archiving: an interrupted run stays on its node
            line = (
                f"{_on(node, 'node')} did not confirm within {grace:.0f}s that cell {outcome.label} stopped and was "
                f"archived; what it archives stays in {node['scratch']}/store there (`xlarun collect` fetches it)"
            )
            _say(f"xlarun: {line}")
            raise JobFailed(line)
        return self._read(gen, node)

    def _discard(self, pinned: Any, node: dict, scratch: str) -> None:
        """Have the node remove a cell's staging store, and wait for it (so that nothing is left when the driver exits)."""
        if not self.nodes.alive(node["node_id"]):
            return
        try:
            self.ray.get(self.discard_task.options(scheduling_strategy=pinned).remote(scratch), timeout=15)
        except Exception:  # the node went away, or is slow: its staging folder stays there
            pass

    def _leave(self, outcome: CellOutcome, what: str) -> None:
        """Note what of a cell is on a node and not yet here: what a second signal says is left."""
        with self.lock:
            self.left[outcome.index] = f"cell {outcome.label}: {what}"

    def _watch_for_another_signal(self, stop: StopRequest) -> None:
        """Once per batch: a thread that, after the batch was stopped, stops this process at once on one more
        signal (while nodes stop, archive and ship the runs of the running cells), saying what is left where."""
        with self.lock:
            if self.watching:
                return
            self.watching = True

        def watch() -> None:
            while not stop.cancel.wait(_POLL_S):
                if self.closed.is_set():
                    return
            seen = min(1, len(stop.received))  # the signal that stopped the batch, if one did
            while not self.closed.wait(_POLL_S / 2):
                if len(stop.received) > seen:
                    signum = stop.received[-1]
                    with self.lock:
                        left = sorted(self.left.items())
                    name = signal.Signals(signum).name
                    for _index, what in left:
                        _say(f"xlarun: {name}: stopped at once; {what}, and stays there (`xlarun collect` fetches it)")
                    if not left:
                        _say(f"xlarun: {name}: stopped at once; nothing of the batch was left on the nodes")
                    os._exit(128 + signum)  # like kill -9 of the driver, which the store survives

        threading.Thread(target=watch, name="xlarun-second-signal", daemon=True).start()

    # --- waiting on the cluster ----------------------------------------------------------------

    def _next(self, gen: Any, stop: StopRequest, node: dict | None) -> dict:
        """The generator task's next item, watching for a stop and for the loss of its node meanwhile."""
        self._wait(gen, stop, node)
        return self._read(gen, node)

    def _read(self, gen: Any, node: dict | None) -> dict:
        try:
            return self.ray.get(next(gen))
        except StopIteration:
            raise CellLost("the cell's task ended without reporting its run") from None
        except Exception as exc:
            raise self._explain(exc, node) from None

    def _get(self, ref: Any, stop: StopRequest | None, node: dict) -> Any:
        self._wait(ref, stop, node)
        try:
            return self.ray.get(ref)
        except Exception as exc:
            raise self._explain(exc, node) from None

    def _wait(self, ref: Any, stop: StopRequest | None, node: dict | None, until: float | None = None) -> bool:
        """Wait until ``ref`` is ready (True) or ``until`` passes (False); CellStopped once ``stop`` is (None: not
        watched), CellLost when the node dies meanwhile."""
        ray = self.ray
        while not ray.wait([ref], timeout=_POLL_S)[0]:
            if stop is not None and stop.cancel.is_set():
                if ray.wait([ref], timeout=0)[0]:  # it came as the batch stopped: take it
                    return True
                raise CellStopped(f"the batch was stopped{_on(node, ' while the cell ran on')}")
            if node is not None and not self.nodes.alive(node["node_id"]):
                self._force_cancel(ref)
                raise CellLost(f"node {node['node_ip']}/{node['node_id'][:8]} died while running the cell")
            if until is not None and time.monotonic() > until:
                return False
        return True

    def _explain(self, exc: Exception, node: dict | None) -> Exception:
        """A Ray error as CellLost (the node or worker went away: retryable), CellStopped, or a cell error."""
        from ray import exceptions as rx

        first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
        if isinstance(exc, rx.TaskCancelledError):
            return CellStopped(f"the cell's task{_on(node)} was cancelled")
        cause = getattr(exc, "cause", None)
        if isinstance(exc, rx.RayTaskError) and type(cause).__name__ == "NodeLost":
            return CellLost(str(cause))
        lost_kinds = tuple(
            getattr(rx, name)
            for name in (
                "WorkerCrashedError",
                "NodeDiedError",
                "ObjectLostError",
                "OwnerDiedError",
                "RaySystemError",
                "ObjectFetchTimedOutError",
                "TaskUnschedulableError",
            )
            if hasattr(rx, name)
        )
        if isinstance(exc, lost_kinds) or (node is not None and not self.nodes.alive(node["node_id"])):
            return CellLost(f"node{_on(node, '')} was lost: {first}")
        return XlarunError(f"the cell's Ray task failed{_on(node)}: {first}")

    def _cancel(self, ref: Any) -> None:
        """Cancel a task: a queued one never runs; a running one gets KeyboardInterrupt (see node_side)."""
        try:
            self.ray.cancel(ref, force=False)
        except Exception:  # it had finished, or its node is gone
            pass

    def _force_cancel(self, ref: Any) -> None:
        try:
            self.ray.cancel(ref, force=True)
        except Exception:  # its node is gone: nothing to cancel there
            pass

    class _Tracked:
        def __init__(self, owner: RayCellCapture, ref: Any) -> None:
            self.owner, self.ref = owner, ref

        def __enter__(self) -> None:
            with self.owner.lock:
                self.owner.in_flight.add(self.ref)

        def __exit__(self, *_exc: object) -> None:
            with self.owner.lock:
                self.owner.in_flight.discard(self.ref)

    def _tracked(self, ref: Any) -> _Tracked:
        return RayCellCapture._Tracked(self, ref)

    def cancel_in_flight(self) -> None:
        """Cancel whatever tasks are still in flight (the batch is ending abnormally)."""
        with self.lock:
            left = list(self.in_flight)
        for ref in left:
            self._force_cancel(ref)

    def close(self) -> None:
        """The batch is over: a signal from now on is no longer this executor's to handle."""
        self.closed.set()


def _snapshots(cells: list[LoadedSpec], ship: str) -> dict[str, Project]:
    """The snapshot of each project folder the cells run from (none with ``never``); a folder too big to send
    stops the batch with ``always`` and is run in place with ``auto`` (saying so once)."""
    found: dict[str, Project] = {}
    roots = {} if ship == "never" else {str(project_root(loaded)): loaded for loaded in cells}
    for root, loaded in roots.items():
        try:
            found[root] = snapshot(loaded)
        except ProjectTooBig as exc:
            if ship == "always":
                raise
            _say(f"xlarun: {exc.message}; the cells run the files at the same path on each node")
    return found


def ray_details(node_id: str, where: dict, shipment: Any, project: dict | None, **extra: Any) -> dict:
    """What a run's manifest says of where it was made and how it came back (``backend_details.ray``)."""
    return {
        "ray": {
            "node_id": node_id,
            "node_ip": where["node_ip"],
            "hostname": where["hostname"],
            **extra,
            "shipped_bytes": shipment.wire_bytes,
            "files_shipped": len(shipment.sent),
            "files": len(shipment.files),
            "project": project,
        }
    }


def _on(node: dict | None, prefix: str = " on") -> str:
    return f"{prefix} {node['node_ip']}/{node['node_id'][:8]}" if node else ""


def _remote_entry(remote: RemoteSpec | None) -> dict | None:
    """What a node needs to push to a team store (no credential: each node has its own)."""
    if remote is None:
        return None
    return {"name": remote.name, "bucket": remote.bucket, "prefix": remote.prefix, "endpoint": remote.endpoint}


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # the terminal is gone (SIGHUP)
        pass


def run_batch_on_ray(
    cells: list[LoadedSpec],
    store: LocalStore,
    *,
    address: str | None = None,
    jobs: int | None = None,
    fail_fast: bool | None = None,
    on_event: BatchEvent | None = None,
    retries: int = 0,
    batch_id: str | None = None,
    ship: str = "auto",
    remote: RemoteSpec | None = None,
) -> BatchResult:
    """:func:`xlarun.batch.run_batch` with every cell captured on the Ray cluster at ``address`` (see the module
    docstring); the runs land in ``store`` as a local batch's do, each cell saying which node it ran on. ``ship``
    says whether the spec's project folder is sent to the nodes (:mod:`xlarun.executors.project`). With ``remote``,
    each node pushes its cell's run to that team store instead, and nothing is shipped to ``store``."""
    snapshots = _snapshots(cells, ship)  # before connecting: a project too big for --ship always stops the batch here
    ray, connected_here = connect(address)
    projects = {root: ray.put(snapshot_) for root, snapshot_ in snapshots.items()}  # sent to each node once
    capture_cell = RayCellCapture(ray, store, retries, ship, projects, remote)
    try:
        return run_batch(
            cells,
            store,
            jobs=jobs or min(len(cells), DEFAULT_IN_FLIGHT),
            fail_fast=fail_fast,
            on_event=on_event,
            batch_id=batch_id,
            capture_cell=capture_cell,
        )
    finally:
        capture_cell.close()
        capture_cell.cancel_in_flight()
        # drop the snapshots' object refs now: one collected after the caller's ray.shutdown() (a notebook, a
        # test) makes Ray end the whole process ("the core worker has already been shutdown")
        capture_cell.projects.clear()
        projects.clear()
        if connected_here:
            ray.shutdown()
