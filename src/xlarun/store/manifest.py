"""The manifest of a run: what ran, where, with which versions and flags, and how it ended."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class Manifest(BaseModel):
    """Everything recorded about one run (``manifest.json`` in the run folder)."""

    run_id: str
    name: str
    status: str
    exit_code: int | None = None
    error: str | None = None
    started: str
    ended: str
    duration_s: float
    spec_path: str | None = None
    command: list[str] = Field(default_factory=list, description="argv of the job as it ran")
    xlarun_command: list[str] = Field(default_factory=list, description="how xlarun was invoked")
    cwd: str | None = None
    backend: str = "local"
    backend_details: dict[str, Any] = Field(default_factory=dict)
    framework: str | None = None
    env_delta: dict[str, str | None] = Field(
        default_factory=dict, description="variables xlarun set or changed, secrets redacted"
    )
    xla_flags: list[str] = Field(default_factory=list)
    tf_xla_flags: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict)
    git: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    batch_id: str | None = None
    matrix: dict[str, Any] | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    files: int = 0
    dump_bytes: int = 0
    stored_bytes_new: int = 0
    signal: str | None = Field(None, description="the signal that stopped xlarun (SIGINT, SIGTERM, SIGHUP), if one did")
    file_notes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="paths of the dump folder not archived, or archived with a caveat: {path, archived, why}",
    )
    recovered: dict[str, Any] | None = Field(
        None, description="for a run made by `xlarun recover` from a killed capture's staging folder: when, and what was found"
    )
    kind: str = Field("capture", description="capture, replay for runs made by `xlarun replay`, or import for `xlarun import`")
    imported_from: dict[str, Any] | None = Field(
        None, description="for kind import: the source's path and kind, and the run it was exported from"
    )

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def host_facts() -> dict[str, Any]:
    """Host name, OS and processor facts."""
    import os

    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "xlarun_python": sys.version.split()[0],
    }


def git_facts(folder: Path) -> dict[str, Any] | None:
    """Commit, branch and dirty flag of the git repository holding ``folder``, or None outside one."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "root": git("rev-parse", "--show-toplevel"),
        "commit": commit,
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(status),
    }
