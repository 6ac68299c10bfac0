"""Replays and conversions in a child process, where XLA crashing or hanging cannot take the caller down.

XLA answers some inputs with a ``CHECK`` failure (an abort), a segfault or a wait that never ends
(a module reading infeed). :class:`ReplayWorker` runs the built-in engine in a child process
(``python -m xlarun.replay.worker_child``, :mod:`.worker_child`) under an address-space limit and a time limit; a child that dies
becomes a :class:`ReplayResult` with verdict ``engine-error``, the step it died in and how
(``failed_step``, ``crash``), and the next request starts a fresh child. One worker serves request
after request, so a batch of replays costs one Python start and one jax import, not one per module.

Protocol: one JSON request per line on the child's stdin; the child answers on its own channel (its
original stdout; fd 1 is pointed at stderr so nothing else can write there) with ``{"log": line}``
and ``{"stage": step}`` lines, then one ``{"result": ...}``, ``{"converted": ...}``, ``{"error": ...}``
(an XlarunError, raised again here) or ``{"bug": traceback}`` (raised as a RuntimeError here).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xlarun import errors
from xlarun.errors import EngineError, XlarunError
from xlarun.hlo.names import snapshot_file
from xlarun.replay.child import Child
from xlarun.replay.limits import address_space_limit
from xlarun.replay.options import DEFAULT_ENGINE_TIMEOUT_S, ReplayOptions
from xlarun.replay.result import Converted, ReplayResult

Sink = Callable[[str], None]
_STEPS = {
    "start": "starting the engine",
    "compile": "compiling",
    "compile-optimized": "compiling the rewritten optimized module",
    "run": "running",
    "reference": "running on the reference platform",
    "convert": "converting",
}


class ReplayWorker:
    """A child process that replays (and converts) module after module; use as a context manager.

    ``replay`` takes what :func:`xlarun.replay.replay_file` takes and returns its result, or an
    ``engine-error`` result when the child died or ran past ``options.timeout_s``; input errors and a
    missing engine are raised here as they would be in-process.
    """

    def __init__(self) -> None:
        self._limit: int | None = None
        #: Host devices the child's CPU client has: a partitioned module needs its N (``xla_force_host_platform_device_count``).
        self._devices = 1
        self._tmp = tempfile.TemporaryDirectory(prefix="xlarun-worker-")
        self._child = Child("xlarun.replay.worker_child", self._tmp.name)

    @property
    def starts(self) -> int:
        """How many children were started (one more after each crash, memory limit or device count change)."""
        return self._child.starts

    def __enter__(self) -> ReplayWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def replay(
        self,
        path: str | Path,
        options: ReplayOptions,
        sink: Sink | None = None,
        *,
        data: bytes | None = None,
        unoptimized: str | Path | None = None,
        unoptimized_data: bytes | None = None,
        snapshot: str | Path | None = None,
        snapshot_data: bytes | None = None,
    ) -> ReplayResult:
        from xlarun.replay.partitioned import partitioning_of_file

        devices = partitioning_of_file(path, data).devices if options.platform in ("cpu", "host") else 1
        request = {
            "kind": "replay",
            "devices": devices,
            "path": str(path),
            "options": options.to_dict(),
            "optimized_failure": None,
            "data_file": self._spill("data", data),
            "unoptimized": str(unoptimized) if unoptimized is not None else None,
            "unoptimized_data_file": self._spill("unoptimized", unoptimized_data),
            "snapshot": str(snapshot) if snapshot is not None else None,
            "snapshot_data_file": self._spill("snapshot", snapshot_data),
        }
        timeout_s = options.timeout_s or DEFAULT_ENGINE_TIMEOUT_S
        lines: list[str] = []

        def log(line: str) -> None:
            lines.append(line)
            if sink:
                sink(line)

        answer, step, crash = self._ask(request, options.max_data_bytes, timeout_s, log)
        first_crash = None
        if crash and step == "compile-optimized":  # the rewrite killed XLA: replay the unoptimized dump instead
            first_crash = crash
            request["optimized_failure"] = f"{crash.message} while compiling the rewritten module"
            log(f"engine died while compiling the rewritten optimized module ({crash.message}); trying its unoptimized dump")
            answer, step, crash = self._ask(request, options.max_data_bytes, timeout_s, log)
        if crash:
            crashed = _crashed_result(Path(path), options, step, crash, lines)
            crashed.devices = devices  # a partitioned module died on its N devices
            return crashed
        assert answer is not None  # the child answered: it did not crash
        result = ReplayResult.from_dict(answer["result"])
        if first_crash and result.verdict == "engine-error":
            result.failed_step, result.crash = "compile-optimized", first_crash.kind
        return result

    def convert(self, path: str | Path, to: str, data: bytes | None = None, timeout_s: float | None = None) -> Any:
        """:func:`xlarun.replay.convert.convert_hlo` in the child; EngineError when XLA dies doing it."""
        output = os.path.join(self._tmp.name, "converted")
        request = {"kind": "convert", "path": str(path), "to": to, "data_file": self._spill("data", data), "output": output}
        answer, _step, crash = self._ask(request, None, timeout_s or DEFAULT_ENGINE_TIMEOUT_S, lambda line: None)
        if crash:
            raise EngineError(f"XLA {crash.message} while converting {Path(path).name}", crash.hint)
        assert answer is not None  # the child answered: it did not crash
        converted = answer["converted"]
        return Converted(Path(output).read_bytes(), converted["module_name"], converted["warnings"])

    def close(self) -> None:
        self._child.stop()
        self._tmp.cleanup()

    # ---- the child ----

    def _spill(self, name: str, data: bytes | None) -> str | None:
        if data is None:
            return None
        path = os.path.join(self._tmp.name, name)
        Path(path).write_bytes(data)
        return path

    def _start(self, limit: int | None) -> None:
        self._limit = limit
        env = {}
        if self._devices > 1:
            env["XLA_FLAGS"] = host_device_flags(os.environ.get("XLA_FLAGS", ""), self._devices)
        self._child.start([str(address_space_limit(limit) or 0)], env)

    def _ask(self, request: dict, limit: int | None, timeout_s: float, log: Sink) -> tuple[dict | None, str, _Crash | None]:
        """Send one request; (answer, last step, None), or (None, the step it died in, how) when the child died."""
        if request.get("devices", 1) > self._devices:  # a child with more host devices replays one-device modules as well
            self._devices = request["devices"]
            self._child.stop()
        if not self._child.running or (request["kind"] == "replay" and limit != self._limit):
            self._start(limit if request["kind"] == "replay" else self._limit)
        step = "start"
        if not self._child.send(request):
            return None, step, self._died(step, timed_out=False)
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._child.receive(deadline)
            if message is None:  # the channel closed (the child died), or time ran out
                return None, step, self._died(step, timed_out=time.monotonic() >= deadline, timeout_s=timeout_s)
            if "log" in message:
                log(message["log"])
            elif "stage" in message:
                step = message["stage"]
            elif "error" in message:
                raise _error_from(message["error"])
            elif "bug" in message:
                raise RuntimeError(f"xlarun's replay worker failed:\n{message['bug']}")
            else:
                return message, step, None

    def _died(self, step: str, *, timed_out: bool, timeout_s: float = 0.0) -> _Crash:
        returncode, stderr = self._child.ended(kill=timed_out)
        return _Crash.of(returncode, stderr, timed_out, timeout_s, self._limit)


def host_device_flags(xla_flags: str, devices: int) -> str:
    """``XLA_FLAGS`` with ``--xla_force_host_platform_device_count`` set to ``devices`` (replacing any given)."""
    kept = [flag for flag in xla_flags.split() if not flag.startswith("--xla_force_host_platform_device_count")]
    return " ".join([*kept, f"--xla_force_host_platform_device_count={devices}"])


class _Crash:
    """How the child died: ``kind`` (``XLA CHECK failure``, ``SIGSEGV``, ``timeout``...) and a message."""

    def __init__(self, kind: str, message: str, hint: str | None = None):
        self.kind, self.message, self.hint = kind, message, hint

    @classmethod
    def of(cls, returncode: int, stderr: str, timed_out: bool, timeout_s: float, limit: int | None) -> _Crash:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        if timed_out:
            return cls(
                "timeout",
                f"did not finish within {timeout_s:g} s and was stopped",
                "allow more time with --timeout, or look for a loop that never ends",
            )
        check = next((line for line in lines if "Check failed" in line or "CHECK failed" in line), None)
        if check:
            return cls(
                "XLA CHECK failure",
                f"aborted on a CHECK failure ({check.split('] ', 1)[-1][:300]})",
                "XLA refuses this module with an assertion; a newer jaxlib may report it as an error",
            )
        fatal = next((line for line in lines if line.startswith("F") and "] " in line[:60]), None)
        memory = any("MemoryError" in line or "bad_alloc" in line or "Out of memory" in line for line in lines)
        if memory or (returncode == -signal.SIGKILL and limit):
            from xlarun.replay.limits import format_size

            space = address_space_limit(limit)
            where = f" (its address space is limited to {format_size(space)})" if space else ""
            return cls("out of memory", f"ran out of memory{where}", "raise --max-data-size, or replay a smaller module")
        if returncode < 0:
            name = _signal_name(-returncode)
            detail = f": {fatal.split('] ', 1)[-1][:300]}" if fatal else ""
            return cls(name, f"crashed with {name}{detail}", "this is a bug in XLA or jaxlib; the module reproduces it")
        last = lines[-1][:300] if lines else "no message"
        return cls(f"exit {returncode}", f"stopped with exit code {returncode} ({last})", None)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _error_from(payload: dict) -> XlarunError:
    kind = getattr(errors, payload.get("class", ""), None)
    if not (isinstance(kind, type) and issubclass(kind, XlarunError)) or kind is errors.SpecError:
        kind = XlarunError
    return kind(payload["message"], payload.get("hint"), exit_code=errors.ExitCode(payload["exit_code"]))


def _guess_input_kind(path: Path) -> str:
    if snapshot_file(path.name) == "snapshot":
        return "snapshot"
    return "proto" if path.name.removesuffix(".gz").endswith(".pb") else "text-large-constants"


def _crashed_result(path: Path, options: ReplayOptions, step: str, crash: _Crash, lines: list[str]) -> ReplayResult:
    doing = _STEPS.get(step, step)
    error = f"the engine's process {crash.message} while {doing}"
    lines.append(f"engine error: {error}")
    return ReplayResult(
        engine="pjrt",
        platform={"host": "cpu", "gpu": "cuda"}.get(options.platform.lower(), options.platform.lower()),
        source=str(path),
        input_kind=_guess_input_kind(path),
        verdict="engine-error",
        error=error + (f" ({crash.hint})" if crash.hint else ""),
        failed_step=step,
        crash=crash.kind,
        log="\n".join(lines),
    )
