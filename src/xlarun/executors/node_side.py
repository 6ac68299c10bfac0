"""What runs on a node of the cluster for one cell: the ordinary capture, into a staging store of the node's own.

:func:`capture_cell_on_node` (a Ray task, a generator) first says where it runs, then starts the capture as a
process of its own (``python -m xlarun.executors.node_side``, detached: Ray kills a worker's children when the
worker goes, and the capture must outlive it long enough to stop its job) and reports the run it committed into a
fresh store under the node's staging folder. The capture is an ordinary one with its own signal handling, told
what to do by a file in its staging folder:

- ``interrupt`` (the driver was stopped: Ctrl-C, SIGTERM, SIGHUP, or ``fail_fast``; written by
  :func:`interrupt_cell`, holding the signal's name): the capture gets that signal, stops its job (process group
  or container), archives what the job wrote as an ``interrupted`` run naming the signal, as a local capture does,
  and reports it; the run stays in the staging folder until the driver fetches it, even if the driver is gone.
- ``stop`` (the cell is given up: Ray cancelled its task, or the node's raylet went away), or the Ray worker that
  started it is gone with no ``interrupt`` (the driver was killed): the capture stops its job and removes its
  staging folder, since nobody will fetch it.

:func:`fetch_run` packs a finished run, with only the files the driver lacks; the staging folder is removed
(:func:`discard_scratch`) once the driver has committed the run, so a driver stopped meanwhile loses nothing.
The node's staging folder is ``$XLARUN_NODE_STAGING`` or ``<tmp>/xlarun-node-<uid>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xlarun.executors.project import Project, place
from xlarun.interrupts import STOP_SIGNALS, StopRequest, process_alive, stop_on_signals

#: How long a stopped capture may take to archive what its job wrote before the wait for it gives up.
STOP_GRACE_S = 30.0
_POLL_S = 0.2
STOP_FILE = "stop"
INTERRUPT_FILE = "interrupt"
#: Written when the driver gave up an interrupted cell whose run its node still archives: `xlarun collect` takes it.
ABANDONED_FILE = "abandoned"
#: Written when the cell's run goes to a team store from the node (the remote's bucket, prefix and endpoint).
PUSH_TO_FILE = "push-to.json"
#: The pid of the Ray worker that ran the cell's task.
WORKER_PID_FILE = "worker.pid"
#: A finished run whose task's worker is gone and that nobody fetched for this long was left by a driver that
#: died after its node reported the run (kill -9): `xlarun collect` takes it. A live driver fetches in seconds.
UNFETCHED_AFTER_S = 600.0


def node_staging_root() -> Path:
    """Where this node keeps the stores of the cells it runs until the driver has fetched them."""
    return Path(os.environ.get("XLARUN_NODE_STAGING") or Path(tempfile.gettempdir()) / f"xlarun-node-{os.getuid()}")


def where_am_i() -> dict:
    """This node as the driver shows it: Ray node id, IP, host name, and this worker's pid."""
    import ray

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


class NodeLost(RuntimeError):
    """The node's raylet went away while the cell ran: the cell is stopped and nothing of it is kept."""


def new_scratch_name() -> str:
    """A name for one attempt's staging store on a node, chosen by the driver (so it can wait for its removal)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(4)}"


def capture_cell_on_node(
    request: bytes, scratch_name: str, project: Project | None = None, ship: str = "auto", remote: dict | None = None
) -> Iterator[dict]:
    """Ray task: yields where it runs (with its staging folder), then the captured run ({run_id, status, files,
    scratch, project, ...}) or {error}. ``request`` is the pickled (LoadedSpec, batch id, matrix values, the
    driver's argv); ``project`` the snapshot of the project folder (None when not sent), placed as ``ship`` says
    (see :mod:`xlarun.executors.project`). With ``remote`` (a team store: bucket, prefix, endpoint; credentials are
    the node's own), the node pushes the run there itself and keeps nothing: the report says ``pushed``."""
    from xlarun.errors import XlarunError

    scratch = node_staging_root() / scratch_name
    scratch.mkdir(parents=True)  # before saying where: from then on the driver can stop the cell through it
    launched = False
    try:
        here = where_am_i()
        (scratch / "node.json").write_text(json.dumps(here))  # which node ran it (nodes of one machine share the folder)
        yield {**here, "scratch": str(scratch)}
        loaded, batch_id, matrix, argv = pickle.loads(request)
        try:
            loaded, placed = place(project, ship, loaded, scratch)
        except XlarunError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            yield {"error": f"{exc.one_line()} (on {here['node_ip']}/{here['node_id'][:8]})"}
            return
        if loaded.spec.python is None:  # the driver's interpreter is a path on the driver: run this node's
            loaded = dataclasses.replace(loaded, python=sys.executable)
        (scratch / "request.pickle").write_bytes(pickle.dumps((loaded, batch_id, matrix, argv)))
        (scratch / "placed.json").write_text(json.dumps(placed))  # for `xlarun collect`, should the driver give up
        if remote is not None:
            (scratch / PUSH_TO_FILE).write_text(json.dumps(remote))
        raylet = os.getppid()
        (scratch / WORKER_PID_FILE).write_text(str(os.getpid()))
        with open(scratch / "capture.err", "wb") as errors:
            subprocess.run(
                [sys.executable, "-m", "xlarun.executors.node_side", str(scratch), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                start_new_session=True,
                check=False,
            )  # returns once detached
        launched = True
        # an interrupted capture stops its job and archives it by itself: wait for its report as for any other
        while not (scratch / "report.json").exists():
            if os.getppid() != raylet:  # the raylet died: the node is lost to the cluster
                stop_capture(scratch)
                raise NodeLost(
                    f"the raylet of node {here['node_ip']} ({here['node_id'][:8]}) went away while the cell ran; the cell was stopped"
                )
            if not scratch.exists() or (scratch / STOP_FILE).exists() or not _capture_alive(scratch):
                break
            time.sleep(_POLL_S)
    except KeyboardInterrupt:  # ray.cancel: the driver gave the cell up (an interrupted one keeps its run here)
        if not launched:
            shutil.rmtree(scratch, ignore_errors=True)
        elif not (scratch / INTERRUPT_FILE).exists():
            stop_capture(scratch)
        else:  # nobody will fetch the run this capture still archives: `xlarun collect` may
            _touch(scratch / ABANDONED_FILE)
        raise
    if not scratch.exists() or (scratch / STOP_FILE).exists():
        stop_capture(scratch)
        yield {"error": "the cell was stopped"}
        return
    report = _read_report(scratch)
    if report.get("error") or report.get("pushed"):  # nothing to fetch: failed, or on the team store already
        shutil.rmtree(scratch, ignore_errors=True)
    yield {**report, "scratch": str(scratch), "project": placed}


def stop_capture(scratch: Path, timeout_s: float = STOP_GRACE_S) -> bool:
    """Ask the capture in ``scratch`` to stop, and wait until it has stopped its job and removed ``scratch`` (True),
    or ``timeout_s`` has passed (False)."""
    try:
        (scratch / STOP_FILE).touch()
    except OSError:  # already removed: nothing runs there
        return True
    deadline = time.monotonic() + timeout_s
    while scratch.exists() and time.monotonic() < deadline:
        if not _capture_alive(scratch):  # it ended (or never started) without removing its folder
            shutil.rmtree(scratch, ignore_errors=True)
            break
        time.sleep(_POLL_S)
    return not scratch.exists()


def fetch_run(scratch: str, run_id: str, missing: list[str] | None) -> Any:
    """Ray task, on the node that ran the cell: the run as a Shipment carrying the files in ``missing`` (every
    file when None). The staging store stays until the driver has committed the run (:func:`discard_scratch`)."""
    from xlarun.executors.shipping import pack_run
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(Path(scratch) / "store", create=False)
    try:
        return pack_run(store, run_id, None if missing is None else set(missing))
    finally:
        store.close()


def discard_scratch(scratch: str) -> None:
    """Ray task: remove a cell's staging store once the driver holds its run."""
    shutil.rmtree(scratch, ignore_errors=True)


def interrupt_cell(scratch_name: str, signal_name: str | None) -> bool:
    """Ray task, on the node of a cell the driver was stopped while it ran: the cell's capture stops its job as
    ``signal_name`` would (None: as a ``fail_fast`` cancel does), archives it as ``interrupted`` and reports it.
    False when the cell's staging folder is not there (it has ended, or never started)."""
    scratch = node_staging_root() / scratch_name
    tmp = scratch / f"{INTERRUPT_FILE}.tmp"
    try:
        tmp.write_text(signal_name or "")
        os.replace(tmp, scratch / INTERRUPT_FILE)  # whole: the capture reads the signal's name from it
    except OSError:  # the folder is gone
        return False
    return True


def _touch(path: Path) -> None:
    try:
        path.touch()
    except OSError:  # the folder is gone
        pass


def left_on_node() -> list[dict]:
    """Ray task: the cells' staging folders on this node, each with its state and, for a finished run, its report.

    ``collect``: a run the driver gave up (it was stopped while its node archived the run, and did not wait for
    it, or a second signal stopped it at once), or one nobody fetched for :data:`UNFETCHED_AFTER_S` after the
    worker of its task was gone (its driver died after the node reported it); ``archiving``: a run given up
    whose capture still runs; ``in use``: a cell a batch may still be running or fetching; ``dead``: a capture
    that ended without a report (nothing to fetch)."""
    root = node_staging_root()
    here = where_am_i()
    found = []
    for scratch in sorted(root.iterdir()) if root.is_dir() else []:
        if not scratch.is_dir():
            continue
        entry = {**here, "scratch": str(scratch), "ran_on": None}
        try:
            entry["ran_on"] = json.loads((scratch / "node.json").read_text())["node_id"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        has_report = (scratch / "report.json").exists()
        try:
            worker_pid: int | None = int((scratch / WORKER_PID_FILE).read_text())
        except (OSError, ValueError):
            worker_pid = None
        worker_gone = worker_pid is not None and not process_alive(worker_pid)
        given_up = (scratch / ABANDONED_FILE).exists() or (worker_gone and (scratch / INTERRUPT_FILE).exists())
        if has_report and worker_gone and not given_up:
            try:
                given_up = time.time() - (scratch / "report.json").stat().st_mtime > UNFETCHED_AFTER_S
            except OSError:  # removed meanwhile
                continue
        if has_report:
            report = _read_report(scratch)
            entry.update(report)
            try:
                entry["project"] = json.loads((scratch / "placed.json").read_text())
            except (OSError, ValueError):
                pass
            entry["state"] = "dead" if report.get("error") else "collect" if given_up else "in use"
        elif _capture_alive(scratch):
            entry["state"] = "archiving" if given_up else "in use"
        else:
            entry["state"] = "dead"
        found.append(entry)
    return found


def _read_report(scratch: Path) -> dict:
    try:
        return json.loads((scratch / "report.json").read_text())
    except (OSError, ValueError):
        err = (
            (scratch / "capture.err").read_bytes()[-2000:].decode("utf-8", "replace").strip()
            if (scratch / "capture.err").exists()
            else ""
        )
        return {"error": f"the capture on this node ended without a report{': ' + err.splitlines()[-1] if err else ''}"}


def _capture_alive(scratch: Path) -> bool:
    """Whether the detached capture of ``scratch`` still runs (True until it has written its pid)."""
    try:
        pid = int((scratch / "capture.pid").read_text())
    except (OSError, ValueError):
        return scratch.exists() and time.time() - scratch.stat().st_mtime < 60  # still starting
    return process_alive(pid)


def _push(store: Any, run_id: str, remote: dict) -> dict:
    """Push a run this node captured to the team store: {pushed: what moved}, or, when the push failed,
    {push_error: why} (the run then stays here and goes to the driver as any run does: nothing is lost)."""
    from xlarun.errors import XlarunError
    from xlarun.store.remote import ObjectStore, RemoteSpec
    from xlarun.store.remote_sync import RemoteSync

    spec = RemoteSpec(remote.get("name", ""), remote["bucket"], remote.get("prefix", ""), remote.get("endpoint"))
    try:
        transfer = RemoteSync(store, ObjectStore(spec)).push([run_id])
    except XlarunError as exc:
        return {"push_error": exc.one_line()}
    return {"pushed": {"remote": spec.url, **transfer.as_dict()}}


def _watch_for_stop(scratch: Path, worker_pid: int, stopped: threading.Event, stop: StopRequest) -> None:
    """In the capture: on ``interrupt``, stop as the driver was stopped (its signal, else a cancel); on ``stop``
    or once orphaned, SIGTERM itself (capture stops its job and archives; ``_main`` then removes the run)."""
    while not stopped.is_set():
        if (scratch / INTERRUPT_FILE).exists():
            name = (scratch / INTERRUPT_FILE).read_text().strip()
            if name in signal.Signals.__members__:
                os.kill(os.getpid(), signal.Signals[name])  # recorded by the capture as a local one records it
            else:
                stop.cancel.set()
            return
        if (scratch / STOP_FILE).exists() or not process_alive(worker_pid):
            os.kill(os.getpid(), signal.SIGTERM)
            return
        stopped.wait(_POLL_S)


def _main(scratch: Path, worker_pid: int) -> int:
    """The capture: detaches from the Ray worker, then one ordinary capture into ``scratch/store``; writes
    ``scratch/report.json``, or removes ``scratch`` when nobody will fetch it (see the module docstring)."""
    if os.fork() > 0:  # the worker waits for this parent only; the capture goes on as an orphan Ray does not kill
        os._exit(0)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a Ray worker's thread blocks SIGINT, and we inherit that
    (scratch / "capture.pid").write_text(str(os.getpid()))
    from xlarun.capture.launch import capture
    from xlarun.errors import XlarunError
    from xlarun.store.facade import LocalStore

    loaded, batch_id, matrix, argv = pickle.loads((scratch / "request.pickle").read_bytes())
    sys.argv = list(argv)  # the manifest records the command the user ran, on the driver
    stopped = threading.Event()
    stop = StopRequest()
    threading.Thread(
        target=_watch_for_stop, args=(scratch, worker_pid, stopped, stop), name="xlarun-stop-watch", daemon=True
    ).start()
    try:
        with stop_on_signals(stop):  # a signal before the capture's own handlers are in stops it all the same
            store = LocalStore.open(scratch / "store", create=True)
            result = capture(loaded, store, batch_id=batch_id, matrix=matrix, stop=stop)
        report = {
            "run_id": result.run_id,
            "status": result.status.value,
            "files": [[f.path, f.digest, f.size] for f in store.stored_files(result.run_id)],
            "warnings": result.warnings,
            "signal": result.signal,
        }
        if (scratch / PUSH_TO_FILE).exists():
            report.update(_push(store, result.run_id, json.loads((scratch / PUSH_TO_FILE).read_text())))
    except XlarunError as exc:
        report = {"error": exc.one_line()}
    except Exception as exc:  # a bug or an SDK error: the cell says why it failed
        report = {"error": f"{type(exc).__name__}: {exc}"}
    stopped.set()
    given_up = (scratch / STOP_FILE).exists()
    if given_up or not ((scratch / INTERRUPT_FILE).exists() or process_alive(worker_pid)):
        shutil.rmtree(scratch, ignore_errors=True)
        return 0
    tmp = scratch / "report.json.tmp"
    tmp.write_text(json.dumps(report))
    os.replace(tmp, scratch / "report.json")
    return 0


if __name__ == "__main__":
    sys.exit(_main(Path(sys.argv[1]), int(sys.argv[2])))
