"""What runs on a node of the cluster for one cell: the ordinary capture, into a staging store of the node's own.

:func:`capture_cell_on_node` (a Ray task, a generator) first says where it runs, then starts the capture as a
child process (``python -m xlarun.executors.node_side``) and reports the run it committed into a fresh store
under the node's staging folder. The child is an ordinary capture with its own signal handling, so stopping
it (SIGTERM) stops the job's process group or container and archives what it wrote, as a capture in a
terminal does; it gets SIGTERM too when the Ray worker running the task dies (``PR_SET_PDEATHSIG``). The task
stops the child when Ray cancels it (the driver's Ctrl-C) and when the node's raylet goes away (the node is
lost: nothing of the cell may keep running there). :func:`fetch_run` then packs the run, with only the files
the driver lacks, and removes the staging store.

The node's staging folder is ``$XLARUN_NODE_STAGING`` or ``<tmp>/xlarun-node-<uid>``.
"""

from __future__ import annotations

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
import time
from collections.abc import Iterator
from pathlib import Path

#: How long a stopped capture may take to archive what its job wrote before it is killed.
STOP_GRACE_S = 30.0
_POLL_S = 0.2


def node_staging_root() -> Path:
    """Where this node keeps the stores of the cells it runs until the driver has fetched them."""
    return Path(os.environ.get("XLARUN_NODE_STAGING") or Path(tempfile.gettempdir()) / f"xlarun-node-{os.getuid()}")


def where_am_i() -> dict:
    """This node as the driver shows it: Ray node id, IP, host name, and this worker's pid."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(), "pid": os.getpid()}


class NodeLost(RuntimeError):
    """The node's raylet went away while the cell ran: the cell is stopped and nothing of it is kept."""


def new_scratch_name() -> str:
    """A name for one attempt's staging store on a node, chosen by the driver (so it can wait for its removal)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{secrets.token_hex(4)}"


def capture_cell_on_node(request: bytes, scratch_name: str) -> Iterator[dict]:
    """Ray task: yields where it runs, then the captured run ({run_id, status, files, scratch, ...}) or {error}.
    ``request`` is the pickled (LoadedSpec, batch id, matrix values, the driver's argv)."""
    scratch = node_staging_root() / scratch_name
    scratch.mkdir(parents=True)  # before saying where: from then on the driver waits for its removal when it cancels
    (scratch / "request.pickle").write_bytes(request)
    here = where_am_i()
    yield here
    raylet = os.getppid()
    # its own session: Ray kills a worker's process group when the worker goes, and the capture must outlive
    # that long enough to stop its job (it gets SIGTERM when the worker dies)
    with open(scratch / "capture.err", "wb") as errors:
        child = subprocess.Popen([sys.executable, "-m", "xlarun.executors.node_side", str(scratch)], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=errors, preexec_fn=_die_with_parent, start_new_session=True)
    try:
        while child.poll() is None:
            if os.getppid() != raylet:  # the raylet died: the node is lost to the cluster
                _stop(child)
                shutil.rmtree(scratch, ignore_errors=True)
                raise NodeLost(f"the raylet of node {here['node_ip']} ({here['node_id'][:8]}) went away while the cell ran; the cell was stopped")
            time.sleep(_POLL_S)
    except KeyboardInterrupt:  # ray.cancel: the driver was interrupted, or gave the cell up
        _stop(child)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    report = _read_report(scratch)
    if report.get("error"):
        shutil.rmtree(scratch, ignore_errors=True)
    yield {**report, "scratch": str(scratch)}


def fetch_run(scratch: str, run_id: str, missing: list[str] | None):
    """Ray task, on the node that ran the cell: the run as a Shipment carrying the files in ``missing`` (every
    file when None); the node's staging store is removed once it is packed."""
    from ..store import Store
    from .shipping import pack_run

    store = Store.open(Path(scratch) / "store", create=False)
    try:
        return pack_run(store, run_id, None if missing is None else set(missing))
    finally:
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def discard_scratch(scratch: str) -> None:
    """Ray task: remove a cell's staging store the driver does not want (the batch was stopped)."""
    shutil.rmtree(scratch, ignore_errors=True)


def await_stopped(scratch_name: str, timeout_s: float) -> bool:
    """Ray task, on the node of a cancelled cell: wait until the cell has stopped its capture and removed its
    staging store (True), or ``timeout_s`` has passed (False)."""
    scratch = node_staging_root() / scratch_name
    deadline = time.monotonic() + timeout_s
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return not scratch.exists()


def _read_report(scratch: Path) -> dict:
    try:
        return json.loads((scratch / "report.json").read_text())
    except (OSError, ValueError):
        err = (scratch / "capture.err").read_bytes()[-2000:].decode("utf-8", "replace").strip() if (scratch / "capture.err").exists() else ""
        return {"error": f"the capture on this node ended without a report{': ' + err.splitlines()[-1] if err else ''}"}


def _die_with_parent() -> None:
    """In the child: SIGTERM when the Ray worker dies, and SIGINT/SIGTERM at their defaults (capture handles them)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM the capture (it stops its job and archives), then SIGKILL it if it takes too long."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _main(scratch: Path) -> int:
    """The child: one ordinary capture into ``scratch/store``; writes ``scratch/report.json``."""
    from ..capture import capture
    from ..errors import XlarunError
    from ..store import Store

    loaded, batch_id, matrix, argv = pickle.loads((scratch / "request.pickle").read_bytes())
    sys.argv = list(argv)  # the manifest records the command the user ran, on the driver
    try:
        store = Store.open(scratch / "store", create=True)
        result = capture(loaded, store, batch_id=batch_id, matrix=matrix)
        report = {"run_id": result.run_id, "status": result.status.value, "files": [[f.path, f.digest, f.size] for f in store.stored_files(result.run_id)],
                  "warnings": result.warnings, "signal": result.signal}
    except XlarunError as exc:
        report = {"error": exc.one_line()}
    except Exception as exc:  # a bug or an SDK error: the cell says why it failed
        report = {"error": f"{type(exc).__name__}: {exc}"}
    tmp = scratch / "report.json.tmp"
    tmp.write_text(json.dumps(report))
    os.replace(tmp, scratch / "report.json")
    return 0


if __name__ == "__main__":
    sys.exit(_main(Path(sys.argv[1])))
