"""Compile a StableHLO module in a child process, to learn whether XLA would abort.

XLA reports some malformed inputs with ``CHECK`` failures, which abort the whole process
(``Check failed: has_layout()``). Optimized modules recompiled through StableHLO are where
this happens, so the engine compiles them here first; a crash becomes an error message and a
fallback instead of a dead notebook kernel or CLI. It runs as ``python -m xlarun.replay.probe
PLATFORM PARENT_PID``, a child serving request after request (:mod:`.child`). ``xlarun bisect`` probes
this way which passes a module cannot compile without: with some passes disabled, XLA's CPU emitters
CHECK-fail instead of returning an error.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from xlarun.replay.child import Child, Send, serve

_PROBE_TIMEOUT_S = 600


class ProbeWorker:
    """One child process that compiles module after module (``python -m xlarun.replay.probe PLATFORM PARENT_PID``, a
    :class:`~xlarun.replay.child.Child`), started again when XLA aborts it: a probe costs the compile, not a Python
    start and a jax import (~2 s). Use as a context manager; :meth:`compile_error` says why one module file on disk
    does not compile (None when it does)."""

    def __init__(self, platform: str, timeout_s: float | None = None, devices: int = 1):
        self.platform, self.timeout_s = platform, timeout_s or _PROBE_TIMEOUT_S
        #: Host devices the child's CPU client has (a bisection of a module partitioned for N devices needs N).
        self.devices = devices
        self._tmp = tempfile.TemporaryDirectory(prefix="xlarun-probe-")
        self._child = Child("xlarun.replay.probe", self._tmp.name)

    @property
    def starts(self) -> int:
        return self._child.starts

    def __enter__(self) -> ProbeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, request: dict) -> tuple[dict | None, str]:
        """Send one request; (the reply, "") or, when the child aborted or hung, (None, the reason from its stderr)."""
        if not self._child.running:
            env = {}
            if self.devices > 1 and self.platform in ("cpu", "host"):
                from xlarun.replay.worker import host_device_flags

                env["XLA_FLAGS"] = host_device_flags(os.environ.get("XLA_FLAGS", ""), self.devices)
            self._child.start([self.platform], env)
        deadline = time.monotonic() + self.timeout_s
        answer = self._child.receive(deadline) if self._child.send(request) else None
        if answer is None:
            timed_out = time.monotonic() >= deadline
            returncode, stderr = self._child.ended(kill=timed_out)
            if timed_out:
                return None, f"compiling took longer than {self.timeout_s:.0f} s"
            return None, _reason(returncode, stderr)
        if "bug" in answer:
            raise RuntimeError(f"xlarun's compile probe failed:\n{answer['bug']}")
        return answer, ""

    def compile_error(self, path: str, debug_options: dict | None = None, devices: dict | None = None) -> str | None:
        """``devices``: compile for N devices as :class:`.sharded_run.ShardedRunner` does (its request spec)."""
        answer, reason = self._ask({"path": path, "debug_options": debug_options or {}, "devices": devices})
        return reason if answer is None else self._raise_environment(answer).get("error")

    def run(
        self,
        path: str,
        debug_options: dict | None,
        arguments: str,
        outputs: str,
        custom_calls: bool = False,
        devices: dict | None = None,
    ) -> tuple[float | None, str | None]:
        """Compile the module file and run it on the pickled ``arguments`` in the child; the outputs are pickled
        to ``outputs``. (compile seconds, None), or (None, why) when it failed or XLA aborted the child.
        ``devices``: run it on N devices from global arguments (:class:`.sharded_run.ShardedRunner`'s spec); an
        EnvironmentProblem (exit 3) when the child has fewer than N."""
        answer, reason = self._ask(
            {
                "path": path,
                "debug_options": debug_options or {},
                "arguments": arguments,
                "outputs": outputs,
                "custom_calls": custom_calls,
                "devices": devices,
            }
        )
        if answer is None:
            return None, reason
        return answer.get("compile_s"), self._raise_environment(answer).get("error")

    @staticmethod
    def _raise_environment(answer: dict) -> dict:
        if answer.get("environment"):  # not the module's fault: the devices are missing
            from xlarun.errors import EnvironmentProblem

            raise EnvironmentProblem(answer["error"], answer.get("hint"))
        return answer

    def close(self) -> None:
        self._child.stop()
        self._tmp.cleanup()


def _handler(platform_name: str) -> Any:
    """The child's answer to one request: compile (and run); a compile error is an answer, not a failure."""
    import pickle

    from xlarun.errors import EnvironmentProblem, XlarunError
    from xlarun.replay.pjrt import Platform, _register_jax_custom_calls
    from xlarun.replay.sharded_run import ShardedRunner

    platform = Platform(platform_name)
    sharded = ShardedRunner(platform)
    arguments: dict[str, list] = {}

    def handle(request: dict, send: Send) -> dict:
        with open(request["path"], "rb") as handle:
            stablehlo = handle.read()
        devices, debug_options = request.get("devices"), request.get("debug_options") or None
        try:
            if request.get("custom_calls"):
                _register_jax_custom_calls()
            if request.get("arguments") and request["arguments"] not in arguments:
                with open(request["arguments"], "rb") as handle:
                    arguments[request["arguments"]] = pickle.load(handle)
            answer: dict[str, Any] = {"error": None}
            found: list | None = None
            if devices and request.get("arguments"):
                found, answer["compile_s"] = sharded.run(stablehlo, devices, debug_options, arguments[request["arguments"]])
            elif devices:
                answer["compile_s"] = sharded.compile(stablehlo, devices, debug_options).compile_s
            else:
                compiled = platform.compile(stablehlo, debug_options)
                answer["compile_s"] = compiled.compile_s
                if request.get("arguments"):
                    raw, _ = compiled.run(compiled.upload(arguments[request["arguments"]]))
                    found = compiled.download(raw)
            if request.get("arguments"):
                with open(request["outputs"], "wb") as handle:
                    pickle.dump(found, handle)
        except EnvironmentProblem as exc:
            answer = {"error": exc.message, "hint": exc.hint, "environment": True}
        except XlarunError as exc:
            answer = {"error": exc.message}
        return answer

    return handle


def _reason(returncode: int, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    check = next((line for line in lines if "Check failed" in line), None)
    if returncode < 0 or check:
        detail = check.split("] ", 1)[-1] if check else f"signal {-returncode}"
        return f"XLA aborted while compiling ({detail})"
    return lines[-1] if lines else f"compile probe exited with {returncode}"


if __name__ == "__main__":
    import sys

    sys.exit(serve(_handler(sys.argv[1]), parent=int(sys.argv[-1])))
