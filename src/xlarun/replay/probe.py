"""Compile a StableHLO module in a child process, to learn whether XLA would abort.

XLA reports some malformed inputs with ``CHECK`` failures, which abort the whole process
(``Check failed: has_layout()``). Optimized modules recompiled through StableHLO are where
this happens, so the engine compiles them here first; a crash becomes an error message and a
fallback instead of a dead notebook kernel or CLI. Run as ``python -m xlarun.replay.probe
PLATFORM FILE``: exit 0 when the module compiles, 3 with the reason on stderr when it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

_PROBE_TIMEOUT_S = 600


def probe_compile(stablehlo: bytes, platform: str, timeout_s: float | None = None) -> str | None:
    """``None`` when the module compiles in a child process, else why it did not (one line)."""
    with tempfile.NamedTemporaryFile(prefix="xlarun-probe-", suffix=".mlirbc", delete=False) as handle:
        handle.write(stablehlo)
        path = handle.name
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "xlarun.replay.probe", platform, path],
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


def _reason(returncode: int, stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    check = next((line for line in lines if "Check failed" in line), None)
    if returncode < 0 or check:
        detail = check.split("] ", 1)[-1] if check else f"signal {-returncode}"
        return f"XLA aborted while compiling ({detail})"
    return lines[-1] if lines else f"compile probe exited with {returncode}"


def _main(argv: list[str]) -> int:
    from ..errors import XlarunError
    from .pjrt import Platform

    platform, path = argv
    with open(path, "rb") as handle:
        stablehlo = handle.read()
    try:
        Platform(platform).compile(stablehlo)
    except XlarunError as exc:
        print(exc.message, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
