"""Compile and run a bisection's step dumps on fixed arguments, in a child process (XLA may abort with passes disabled).

:class:`StepReplayer` runs each step on one device; :class:`.sharded_replayer.ShardedReplayer` runs the steps
of a module partitioned for N devices on its N devices.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from xlarun.bisect.bisect_options import BisectOptions
from xlarun.errors import EngineError, InputError
from xlarun.replay import pjrt
from xlarun.replay.deoptimize import deoptimize_hlo_text
from xlarun.replay.fakedata import fake_arguments
from xlarun.replay.literals import describe
from xlarun.replay.probe import ProbeWorker
from xlarun.replay.sources import ELIDED_CONSTANT, SNAPSHOT, entry_parameter_shapes, load_source

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo

Log = Callable[[str], None]


class StepReplayer:
    """Compiles and runs step dumps on fixed arguments; remembers outputs by dump digest."""

    def __init__(self, store: LocalStore, module: ModuleInfo, options: BisectOptions, debug_options: dict, log: Log):
        self.store, self.module, self.options, self.debug_options, self.log = store, module, options, debug_options, log
        self.platform = pjrt.Platform(options.platform)
        self.outputs: dict[str, tuple[list | None, float | None, str | None]] = {}
        self.replays = 0
        self.arguments: list | None = None
        self._stablehlo: dict[str, str] = {}  # dump path -> its StableHLO in a temporary file, for the probe
        self._probe: ProbeWorker | None = None
        self._arguments_file: str | None = None

    def text(self, path: str) -> str:
        text = self.store.read_file(self.module.run_id, path).decode("utf-8", errors="replace")
        if ELIDED_CONSTANT.search(text):
            raise InputError(
                f"{path} holds elided constants ({{...}}), which replay would fill with garbage",
                "set dump.large_constants: true in the spec and capture again",
            )
        return text

    def run(self, digest: str, path: str, platform: pjrt.Platform | None = None) -> tuple[list | None, float | None, str | None]:
        """(outputs, compile seconds, error) of the dump; cached by digest on the main platform."""
        if platform is None and digest in self.outputs:
            return self.outputs[digest]
        try:
            rewritten = deoptimize_hlo_text(self.text(path)).text  # fusions -> calls, layouts spelled out; no-op before fusion
            proto = pjrt.text_to_module_proto(rewritten)
            if self.arguments is None:
                self.arguments = self._arguments(proto)
            found: tuple[list | None, float | None, str | None]
            if platform is not None:  # the reference platform's one run
                stablehlo = pjrt.module_proto_to_stablehlo(proto)
                pjrt.prepare_custom_calls(proto)
                compiled = platform.compile(stablehlo, self.debug_options)
                raw, _ = compiled.run(compiled.upload(self.arguments))
                found = (compiled.download(raw), compiled.compile_s, None)
            else:  # in the worker: with passes disabled, XLA may abort instead of raising
                found = self._run_in_worker(path, proto)
        except (EngineError, InputError) as exc:
            if isinstance(exc, InputError) and "elided constants" in exc.message:
                raise
            found = (None, None, exc.one_line())
        self.replays += 1
        if platform is None:
            self.outputs[digest] = found
        return found

    def run_text(self, text: str) -> list | None:
        """The outputs of HLO ``text`` on the bisection's arguments, in the worker (an EngineError if it fails)."""
        proto = pjrt.text_to_module_proto(deoptimize_hlo_text(text).text)
        if self.arguments is None:
            self.arguments = self._arguments(proto)
        outputs, _, error = self._run_in_worker(f"text:{hash(text)}", proto)
        if error is not None:
            raise EngineError(error)
        return outputs

    def compile_error(self, path: str, debug_options: dict) -> str | None:
        """Why the dump does not compile with ``debug_options`` on the main platform (None: it does), learnt in
        the worker process: with passes disabled, XLA can abort the process instead of raising."""
        return self._worker().compile_error(self._module_file(path), debug_options, devices=self.devices_for(path))

    def close(self) -> None:
        """Stop the worker and delete the temporary files."""
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        for file in [*self._stablehlo.values(), *([self._arguments_file] if self._arguments_file else [])]:
            if os.path.exists(file):
                os.unlink(file)
        self._stablehlo.clear()
        self._arguments_file = None

    def _run_in_worker(self, path: str, proto: bytes) -> tuple[list | None, float | None, str | None]:
        import pickle

        if self._arguments_file is None:
            with tempfile.NamedTemporaryFile(prefix="xlarun-bisect-args-", suffix=".pkl", delete=False) as handle:
                pickle.dump(self.arguments, handle)
            self._arguments_file = handle.name
        module_file = self._module_file(path, proto)
        outputs_file = module_file + ".out.pkl"
        compile_s, error = self._worker().run(
            module_file,
            self.debug_options,
            self._arguments_file,
            outputs_file,
            custom_calls=b"custom-call" in proto,
            devices=self.devices_for(path),
        )
        if error is not None:
            return None, None, f"compile or run failed: {error}"
        with open(outputs_file, "rb") as results:
            outputs = pickle.load(results)
        os.unlink(outputs_file)
        return outputs, compile_s, None

    def devices_for(self, path: str) -> dict | None:
        """How the dump at ``path`` runs on several devices (:class:`~xlarun.replay.sharded_run.ShardedRunner`'s
        spec); ``None``: on one device, as every step does here."""
        return None

    def compilable_proto(self, path: str) -> bytes:
        """The dump at ``path`` as the module proto that is compiled (fusions made calls, layouts spelled out)."""
        return pjrt.text_to_module_proto(deoptimize_hlo_text(self.text(path)).text)

    def _worker(self) -> ProbeWorker:
        if self._probe is None:
            self._probe = ProbeWorker(self.options.platform, devices=self.device_count)
        return self._probe

    #: Devices the worker's platform must have.
    device_count = 1

    def _module_file(self, path: str, proto: bytes | None = None) -> str:
        if path not in self._stablehlo:
            if proto is None:
                proto = self.compilable_proto(path)
            with tempfile.NamedTemporaryFile(prefix="xlarun-bisect-", suffix=".mlirbc", delete=False) as handle:
                handle.write(pjrt.module_proto_to_stablehlo(proto))
            self._stablehlo[path] = handle.name
        return self._stablehlo[path]

    def _arguments(self, proto: bytes) -> list:
        snapshot = self.snapshot()
        if self.options.inputs == "snapshot" and snapshot is None:
            raise InputError(f"{self.module.label} has no snapshot", "capture with dump.snapshots: true, or use --inputs fake")
        if snapshot is not None and self.options.inputs != "fake":
            shapes = [s.hlo_text() for s in entry_parameter_shapes(proto)]
            if shapes == [describe(a) for a in snapshot.arguments]:
                return snapshot.arguments
            self.log(f"the snapshot's arguments do not fit the module's parameters ({', '.join(shapes)}); using fake data")
        return fake_arguments(entry_parameter_shapes(proto), self.options.seed)

    def snapshot(self) -> Any:
        found = getattr(self, "_snapshot", False)
        if found is False:
            files = sorted(f.path for f in self.module.files if f.kind == "snapshot")
            found = None
            if files:
                source = load_source(files[0], self.store.read_file(self.module.run_id, files[0]))
                found = source if source.file_format == SNAPSHOT else None
            self._snapshot = found
        return found
