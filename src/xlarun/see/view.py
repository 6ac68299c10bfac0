"""``view``: a module in Google's Model Explorer, or a run's profile in XProf, served on loopback; and the files they read.

Model Explorer (``pip install ai-edge-model-explorer``, the ``view`` extra) does not read HLO. Its JSON
graph adapter reads a ``GraphCollection``: ``{"label", "graphs": [{"id", "nodes": [{"id", "label",
"namespace", "subgraphIds", "attrs", "incomingEdges", "outputsMetadata"}]}]}``. :func:`model_explorer_graphs`
writes one from xlarun's own HLO reading (xlarun.hlo): one graph per computation, the entry first; each
instruction a node with its opcode, shape, op_name, source line and the fusion it belongs to; nodes grouped
into collapsible layers by their op_name path (``jit(f)/jvp(g)/dot_general``); called computations
(fusions, loop bodies, reducers) linked as subgraphs.

XProf (``pip install xprof``, the ``profile`` extra) reads a log folder laid out as
``plugins/profile/<session>/<host>.xplane.pb``: :func:`xprof_logdir` writes the run's archived traces there, in
xlarun's cache folder, and :class:`XprofServer` serves it. xprof 2.24 has no flag to choose the address: its web
server binds every interface and its gRPC worker service listens on ``*:grpc_port``. The server is started through
a bootstrap that binds the web server to 127.0.0.1 and leaves the worker service unstarted (one host, one process:
XProf converts in process); where that xprof lacks the two names the bootstrap replaces, it says so, and ``view``
warns that the server listens on every interface.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from xlarun import deadline
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.hlo import HloComputation, HloInstruction, HloModule, load_hlo
from xlarun.store.facade import LocalStore
from xlarun.store.rows import ModuleInfo

#: Model Explorer serves here only: a dump's names and shapes are nobody else's business.
LOOPBACK = "127.0.0.1"
INSTALL_HINT = "install the view extra: pip install 'xlarun[view]' (or pip install ai-edge-model-explorer)"
_START_TIMEOUT_S = 60.0
_URL_LINE = re.compile(r"(http://127\.0\.0\.1:\d+/\S*)")


# --- the JSON graph --------------------------------------------------------------------------------


def _namespace(instruction: HloInstruction) -> str:
    """The op_name path without its last part: Model Explorer's collapsible layers."""
    if not instruction.op_name or "/" not in instruction.op_name:
        return ""
    return instruction.op_name.rsplit("/", 1)[0]


def _node(instruction: HloInstruction, ids: dict[str, str], graph_of: dict[str, str], fusion_of: dict[str, str]) -> dict:
    attrs = [("opcode", instruction.opcode), ("shape", instruction.shape)]
    if instruction.op_name:
        attrs.append(("op_name", instruction.op_name))
    if instruction.source_file:
        attrs.append(
            (
                "source",
                f"{instruction.source_file}:{instruction.source_line}" if instruction.source_line else instruction.source_file,
            )
        )
    if instruction.computation in fusion_of:
        attrs.append(("fused into", fusion_of[instruction.computation]))
    if instruction.is_root:
        attrs.append(("root", "true"))
    for key in ("kind", "dimensions", "slice", "to_apply", "calls", "custom_call_target", "backend_config"):
        if key in instruction.attributes:
            attrs.append((key, instruction.attributes[key][:500]))
    return {
        "id": ids[instruction.name],
        "label": instruction.opcode,
        "namespace": _namespace(instruction),
        "subgraphIds": [graph_of[c] for c in instruction.called_computations if c in graph_of],
        "attrs": [{"key": "name", "value": instruction.name}] + [{"key": k, "value": str(v)} for k, v in attrs],
        "incomingEdges": [
            {"sourceNodeId": ids[operand], "sourceNodeOutputId": "0", "targetNodeInputId": str(n)}
            for n, operand in enumerate(instruction.operands)
            if operand in ids
        ],
        "outputsMetadata": [{"id": "0", "attrs": [{"key": "shape", "value": instruction.shape}]}],
    }


def _graph(computation: HloComputation, graph_of: dict[str, str], fusion_of: dict[str, str]) -> dict:
    ids = {instruction.name: instruction.name for instruction in computation.instructions}
    return {"id": graph_of[computation.name], "nodes": [_node(i, ids, graph_of, fusion_of) for i in computation.instructions]}


def model_explorer_graphs(module: HloModule, label: str) -> dict:
    """A Model Explorer ``GraphCollection`` of ``module``: the entry computation first, then the ones it calls."""
    ordered = sorted(module.computations.values(), key=lambda c: (not c.is_entry, c.is_fusion, c.name))
    graph_of = {c.name: ("entry: " + c.name if c.is_entry else c.name) for c in ordered}
    fusion_of = {}
    for computation in ordered:
        for instruction in computation.instructions:
            if instruction.opcode == "fusion":
                for called in instruction.called_computations:
                    fusion_of[called] = instruction.name
    return {"label": label, "graphs": [_graph(c, graph_of, fusion_of) for c in ordered]}


def write_model_explorer_json(
    store: LocalStore, module: ModuleInfo, dest: str | Path, stage: str = "before_optimizations"
) -> Path:
    """Write ``module``'s graph at ``stage`` as a Model Explorer JSON graph file; returns its path."""
    from xlarun.navigate.select import select_file, stage_of

    stage = stage_of(stage)
    chosen = select_file(module, stage, purpose="graph")
    hlo = load_hlo(store.blobs.get(chosen.digest), chosen.path)
    collection = model_explorer_graphs(hlo, f"{module.label} ({stage}, run {module.run_id})")
    dest = Path(dest)
    if dest.suffix != ".json":
        raise InputError(f"{dest} does not end in .json", "Model Explorer picks its JSON graph adapter by the .json ending")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(collection, separators=(",", ":")), encoding="utf-8")
    return dest


# --- the server ------------------------------------------------------------------------------------


def model_explorer_installed() -> bool:
    return importlib.util.find_spec("model_explorer") is not None


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def viewer_url(port: int, graph_file: Path) -> str:
    """The page that opens ``graph_file`` with Model Explorer's JSON graph adapter."""
    data = {"models": [{"url": str(graph_file.resolve()), "adapterId": "builtin_json"}]}
    return f"http://{LOOPBACK}:{port}/?data={quote(json.dumps(data))}"


_Served = TypeVar("_Served", bound="ServedProcess")


class ServedProcess:
    """A local web server xlarun started in a session of its own: ``stop()`` ends it and whatever it started."""

    process: subprocess.Popen

    def wait(self) -> int:
        """Block until the server ends (Ctrl-C stops it)."""
        try:
            return self.process.wait()
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            deadline.stop_group(self.process, grace_s=10)

    def __enter__(self: _Served) -> _Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ModelExplorerServer(ServedProcess):
    """A Model Explorer process serving one graph file on loopback. Use as a context manager, or ``stop()``."""

    graph_file: Path
    port: int
    process: subprocess.Popen
    url: str

    @classmethod
    def start(cls, graph_file: Path, port: int | None = None, python: str | None = None) -> ModelExplorerServer:
        """Start Model Explorer on ``127.0.0.1:port`` (a free port by default) and wait until it answers."""
        if not model_explorer_installed():
            raise EnvironmentProblem("Model Explorer is not installed", INSTALL_HINT)
        port = port or free_loopback_port()
        argv = [
            python or sys.executable,
            "-m",
            "model_explorer",
            str(graph_file),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--no_open_in_browser",
        ]
        # its own session: stop() ends it and the threads it starts, nothing else
        process = deadline.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        server = cls(graph_file, port, process, viewer_url(port, graph_file))
        server._wait_until_serving()
        return server

    def _wait_until_serving(self) -> None:
        lines: list[str] = []
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stdout or ():  # keep draining: a full pipe would block the server
                lines.append(line.rstrip())
                if _URL_LINE.search(line):
                    ready.set()
            ready.set()

        threading.Thread(target=read, name="xlarun-model-explorer-log", daemon=True).start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready.wait(0.2):
            if time.monotonic() > deadline:
                break
        if self.process.poll() is not None or not any(_URL_LINE.search(line) for line in lines):
            self.stop()
            said = next((line for line in reversed(lines) if line.strip()), "no output")
            in_use = " (port in use?)" if "already in use" in " ".join(lines) else ""
            raise EnvironmentProblem(f"Model Explorer did not start on port {self.port}{in_use}: {said}", "try another --port")


# --- a run's profile in XProf ---------------------------------------------------------------------

XPROF_INSTALL_HINT = "install the profile extra: pip install 'xlarun[profile]' (or pip install xprof)"
#: What ``view --xprof`` says when the bootstrap could not keep XProf on loopback.
XPROF_ALL_INTERFACES = "this xprof has no way to choose its address: it listens on every interface, not only 127.0.0.1"
_XPROF_BIND_LINE = "xlarun-xprof-bind: "
# xprof's server module binds the address its _get_wildcard_address returns (every interface) and starts a gRPC
# worker service on *:grpc_port; both replaced here when this xprof has them, and the bootstrap says which it did.
_XPROF_BOOTSTRAP = """
import sys
import xprof.server as server
try:
    from xprof.convert import _pywrap_profiler_plugin as plugin
except ImportError:
    plugin = None
loopback = hasattr(server, "_get_wildcard_address") and hasattr(plugin, "start_grpc_server")
if loopback:
    server._get_wildcard_address = lambda port: "127.0.0.1"
    plugin.start_grpc_server = lambda *args: None
print("%s" + ("loopback" if loopback else "all-interfaces"), flush=True)
sys.exit(server.main(sys.argv[1:]))
"""


def xprof_installed() -> bool:
    return importlib.util.find_spec("xprof") is not None


def xprof_cache_root() -> Path:
    """Where ``view --xprof`` lays out runs' traces for XProf: ``$XDG_CACHE_HOME/xlarun/xprof`` (or ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlarun" / "xprof"


@dataclass(frozen=True)
class XprofLogdir:
    """A run's traces laid out as XProf reads them: ``logdir/plugins/profile/<session>/<host>.xplane.pb``."""

    run_id: str
    logdir: Path
    sessions: list[str]  # XProf's "runs": one, named by the run id
    hosts: list[str]  # one per trace: the host, or process-N-host for a many-process job
    trace_bytes: int


def xprof_logdir(store: LocalStore, run_id: str, cache_root: Path | None = None) -> XprofLogdir:
    """Write the run's archived traces (``profile:``) into an XProf log folder under ``cache_root`` (default
    :func:`xprof_cache_root`), one per run; a trace already there with the same content is kept, so XProf's own
    conversions beside it are reused. :class:`~xlarun.navigate.profile.NoProfile` when the run has no trace."""
    from xlarun.navigate.profile import no_profile
    from xlarun.store.profile_index import TRACE_SUFFIX

    traces = [f for f in store.index.run_files(run_id) if f.path.endswith(TRACE_SUFFIX)]
    if not traces:
        raise no_profile(run_id)
    logdir = (cache_root or xprof_cache_root()) / run_id
    session = logdir / "plugins" / "profile" / run_id
    hosts, total = [], 0
    for trace in traces:
        host = xprof_host_name(trace.path, several=len(traces) > 1)
        while host in hosts:  # two traces of one process (a trace started twice): both shown
            host += "-again"
        dest = session / f"{host}{TRACE_SUFFIX}"
        data = store.read_file(run_id, trace.path)
        if not dest.is_file() or _digest(dest.read_bytes()) != _digest(data):
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            partial.write_bytes(data)
            os.replace(partial, dest)  # XProf never sees half a trace
        hosts.append(host)
        total += len(data)
    return XprofLogdir(run_id, logdir, [run_id], sorted(hosts), total)


def xprof_host_name(path: str, several: bool) -> str:
    """The host XProf shows a trace as: its file's host name; with ``several`` traces (one per process of a
    many-process job: ``xlarun-profile/process-N/plugins/profile/SESSION/HOST.xplane.pb``), ``process-N-HOST``."""
    from xlarun.store.profile_index import TRACE_SUFFIX

    parts = path.split("/")
    host = parts[-1][: -len(TRACE_SUFFIX)] or "host"
    process = next((part for part in parts if part.startswith("process-")), None)
    return f"{process}-{host}" if several and process else host


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class XprofServer(ServedProcess):
    """An XProf server over one log folder on ``127.0.0.1:port``. Use as a context manager, or ``stop()``.
    ``loopback_only`` is False where this xprof could not be kept off the other interfaces."""

    logdir: XprofLogdir
    port: int
    process: subprocess.Popen
    url: str
    loopback_only: bool = True
    log: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, logdir: XprofLogdir, port: int | None = None, python: str | None = None) -> XprofServer:
        """Start XProf on ``logdir`` and wait until it lists the run's sessions (at most a minute)."""
        if not xprof_installed():
            raise EnvironmentProblem("XProf is not installed", XPROF_INSTALL_HINT)
        port = port or free_loopback_port()
        grpc_port = free_loopback_port()  # unused (no worker service), but xprof wants one unlike --port; 50051 may be taken
        grpc_port = grpc_port if grpc_port != port else free_loopback_port()
        argv = [
            python or sys.executable,
            "-c",
            _XPROF_BOOTSTRAP % _XPROF_BIND_LINE,
            "--logdir",
            str(logdir.logdir),
            "--port",
            str(port),
            "--grpc_port",
            str(grpc_port),
            "--worker_service_address",
            f"{LOOPBACK}:{grpc_port}",
            "--hide_capture_profile_button",  # it would profile a live job from this page: not what view is for
        ]
        process = deadline.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        server = cls(logdir, port, process, f"http://{LOOPBACK}:{port}/")
        threading.Thread(target=server._drain, name="xlarun-xprof-log", daemon=True).start()
        server._wait_until_listing()
        return server

    def _drain(self) -> None:
        for line in self.process.stdout or ():  # keep draining: a full pipe would block the server
            self.log.append(line.rstrip())
            if line.startswith(_XPROF_BIND_LINE):
                self.loopback_only = line.strip().endswith("loopback")

    def sessions(self) -> list[str]:
        """The runs XProf lists (its ``/data/plugin/profile/runs``)."""
        with urllib.request.urlopen(f"{self.url}data/plugin/profile/runs", timeout=10) as response:
            body = response.read()
            gzipped = response.headers.get("Content-Encoding") == "gzip"  # XProf compresses its answers
        return json.loads(gzip.decompress(body) if gzipped else body)

    def _wait_until_listing(self) -> None:
        stop_at = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < stop_at and self.process.poll() is None:
            try:
                if set(self.logdir.sessions) <= set(self.sessions()):
                    return
            except (OSError, ValueError):  # not listening yet
                pass
            time.sleep(0.3)
        self.stop()
        said = next((line for line in reversed(self.log) if line.strip() and not line.startswith(_XPROF_BIND_LINE)), "no output")
        in_use = " (port in use?)" if any("already in use" in line for line in self.log) else ""
        raise EnvironmentProblem(f"XProf did not start on port {self.port}{in_use}: {said[:300]}", "try another --port")
