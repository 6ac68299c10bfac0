"""Compile a StableHLO module in a child process, to learn whether XLA would abort.

XLA reports some malformed inputs with ``CHECK`` failures, which abort the whole process
(``Check failed: has_layout()``). Optimized modules recompiled through StableHLO are where
this happens, so the engine compiles them here first; a crash becomes an error message and a
fallback instead of a dead notebook kernel or CLI. Run as ``python -m xlarun.replay.probe
PLATFORM FILE [DEBUG_OPTIONS_JSON]``: exit 0 when the module compiles, 3 with the reason on stderr when it
does not. ``xlarun bisect`` probes this way which passes a module cannot compile without: with some passes
disabled, XLA's CPU emitters CHECK-fail instead of returning an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import IO, Any

_PROBE_TIMEOUT_S = 600


def probe_compile(
    stablehlo: bytes, platform: str, timeout_s: float | None = None, debug_options: dict | None = None
) -> str | None:
    """``None`` when the module compiles in a child process, else why it did not (one line)."""
    with tempfile.NamedTemporaryFile(prefix="xlarun-probe-", suffix=".mlirbc", delete=False) as handle:
        handle.write(stablehlo)
        path = handle.name
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "xlarun.replay.probe",
                platform,
                path,
                *([json.dumps(debug_options)] if debug_options else []),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s or _PROBE_TIMEOUT_S,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")},
        )
    except subprocess.TimeoutExpired:
        return f"compiling took longer than {timeout_s or _PROBE_TIMEOUT_S:.0f} s"
    finally:
        os.unlink(path)
    if proc.returncode == 0:
        return None
    return _reason(proc.returncode, proc.stderr)


class ProbeWorker:
    """One child process that compiles module after module (``python -m xlarun.replay.probe --serve PLATFORM``),
    started again when XLA aborts it: a probe costs the compile, not a Python start and a jax import (~2 s).
    Use as a context manager; :meth:`compile_error` is :func:`probe_compile` for one module file on disk."""

    def __init__(self, platform: str, timeout_s: float | None = None, devices: int = 1):
        self.platform, self.timeout_s = platform, timeout_s or _PROBE_TIMEOUT_S
        #: Host devices the child's CPU client has (a bisection of a module partitioned for N devices needs N).
        self.devices = devices
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: IO[str] | None = None
        self.starts = 0

    def __enter__(self) -> ProbeWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _running(self) -> tuple[subprocess.Popen[str], IO[str]]:
        """The child and the file its stderr goes to, started (again) if it is not running."""
        if self.proc is not None and self.proc.poll() is None and self.stderr is not None:
            return self.proc, self.stderr
        self.stderr = stderr = tempfile.TemporaryFile(mode="w+", prefix="xlarun-probe-")  # noqa: SIM115 (lives as long as the child)
        self.starts += 1
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")}
        if self.devices > 1 and self.platform in ("cpu", "host"):
            from xlarun.replay.worker import host_device_flags

            env["XLA_FLAGS"] = host_device_flags(env.get("XLA_FLAGS", ""), self.devices)
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-m", "xlarun.replay.probe", "--serve", self.platform],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            bufsize=1,
            env=env,
        )
        return proc, stderr

    def _ask(self, request: dict) -> tuple[dict | None, str]:
        """Send one request; (the reply, "") or, when the child aborted or hung, (None, the reason from its stderr)."""
        proc, stderr = self._running()
        assert proc.stdin is not None  # a pipe: Popen was given stdin=PIPE
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        reply = _read_line(proc, self.timeout_s)
        if reply is None:
            self.close()
            stderr.seek(0)
            return None, _reason(proc.returncode if proc.returncode is not None else -9, stderr.read())
        return json.loads(reply), ""

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
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    import selectors

    assert proc.stdout is not None  # a pipe: Popen was given stdout=PIPE
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            proc.kill()
            proc.wait()
            return None
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        return None
    return line


def _serve(platform_name: str) -> int:
    import pickle

    from xlarun.errors import EnvironmentProblem, XlarunError
    from xlarun.replay.pjrt import Platform, _register_jax_custom_calls
    from xlarun.replay.sharded_run import ShardedRunner

    platform = Platform(platform_name)
    sharded = ShardedRunner(platform)
    arguments: dict[str, list] = {}
    for line in sys.stdin:
        request = json.loads(line)
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
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


def _reason(returncode: int, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    check = next((line for line in lines if "Check failed" in line), None)
    if returncode < 0 or check:
        detail = check.split("] ", 1)[-1] if check else f"signal {-returncode}"
        return f"XLA aborted while compiling ({detail})"
    return lines[-1] if lines else f"compile probe exited with {returncode}"


def _main(argv: list[str]) -> int:
    from xlarun.errors import XlarunError
    from xlarun.replay.pjrt import Platform

    if argv[:1] == ["--serve"]:
        return _serve(argv[1])
    platform, path = argv[:2]
    debug_options = json.loads(argv[2]) if len(argv) > 2 else None
    with open(path, "rb") as handle:
        stablehlo = handle.read()
    try:
        Platform(platform).compile(stablehlo, debug_options)
    except XlarunError as exc:
        print(exc.message, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
