"""``view``: a module in Google's Model Explorer, served on loopback; and the JSON graph file it reads.

Model Explorer (``pip install ai-edge-model-explorer``, the ``view`` extra) does not read HLO. Its JSON
graph adapter reads a ``GraphCollection``: ``{"label", "graphs": [{"id", "nodes": [{"id", "label",
"namespace", "subgraphIds", "attrs", "incomingEdges", "outputsMetadata"}]}]}``. :func:`model_explorer_graphs`
writes one from xlarun's own HLO reading (xlarun.hlo): one graph per computation, the entry first; each
instruction a node with its opcode, shape, op_name, source line and the fusion it belongs to; nodes grouped
into collapsible layers by their op_name path (``jit(f)/jvp(g)/dot_general``); called computations
(fusions, loop bodies, reducers) linked as subgraphs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from xlarun import deadline
from xlarun.errors import EnvironmentProblem, InputError
from xlarun.hlo import HloComputation, HloInstruction, HloModule, load_hlo
from xlarun.store.facade import Store
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


def write_model_explorer_json(store: Store, module: ModuleInfo, dest: str | Path, stage: str = "before_optimizations") -> Path:
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


@dataclass
class ModelExplorerServer:
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

    def wait(self) -> int:
        """Block until the server ends (Ctrl-C stops it)."""
        try:
            return self.process.wait()
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            deadline.stop_group(self.process, grace_s=10)

    def __enter__(self) -> ModelExplorerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
