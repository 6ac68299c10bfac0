"""What ``xlarun capture`` and ``xlarun flags`` answer, made here so the command only prints it: a capture's JSON
document (its run, modules, warnings, failure, and how its processes compiled alike), and the environment a spec
composes for a job (the flags a capture would give it, checked against the flags the job's XLA knows)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlarun.capture.backends.base import JobPaths
from xlarun.capture.flags import ComposedEnv, compose_env
from xlarun.capture.known_flags import FlagNameCache, KnownXlaFlags
from xlarun.capture.launch import CaptureResult, exit_status_error, probe_job_xla_flags
from xlarun.capture.publish import push_failure
from xlarun.capture.spec_yaml import LoadedSpec, load_spec
from xlarun.errors import XlarunError


def capture_failure(result: CaptureResult) -> XlarunError | None:
    """The error a capture ends with: the job's (it failed, timed out, was stopped), else its push's (the spec's
    ``remote:`` could not be pushed to: exit 3, the run kept here); None when both went well."""
    return exit_status_error(result) or push_failure(result.run_id, result.push)


def capture_document(result: CaptureResult) -> dict[str, Any]:
    """``xlarun capture --json``'s one document; ``error``/``hint`` say why the run failed (None when it succeeded),
    ``push`` what the push to the spec's ``remote:`` did (None when the spec names none)."""
    from xlarun.navigate.desync import compare_processes

    failure = capture_failure(result)
    processes = compare_processes(result.modules)
    return {
        "run_id": result.run_id,
        "status": result.status,
        "exit_code": result.exit_code,
        "run_dir": result.run_dir,
        "manifest": result.manifest,
        "modules": result.modules,
        "warnings": result.warnings,
        "error": failure.message if failure else None,
        "hint": failure.hint if failure else None,
        "push": result.push.to_json() if result.push else None,
    } | ({"processes": processes.to_json()} if processes else {})


@dataclass
class SpecFlags:
    """The environment a spec gives its job (``xlarun flags``): the variables that differ from this one, the flags,
    and the XLA they were checked against."""

    loaded: LoadedSpec
    composed: ComposedEnv
    known: KnownXlaFlags | None

    def to_json(self) -> dict[str, Any]:
        return {
            "env": self.composed.delta,
            "xla_flags": self.composed.xla_flags,
            "tf_xla_flags": self.composed.tf_xla_flags,
            "xla_flags_checked_against": self.known.owner if self.known else None,
            "warnings": self.composed.warnings,
        }


def spec_flags(spec: str | Path, out_dir: str | Path) -> SpecFlags:
    """What a capture of ``spec`` would set for its job, its outputs under ``out_dir``; flags the job's XLA does not
    know are left out with a warning, as a capture leaves them out (the flag-name cache is read, never written)."""
    loaded = load_spec(spec)
    base_env = dict(os.environ) if loaded.spec.backend.kind == "local" else {}
    known = probe_job_xla_flags(loaded, base_env, FlagNameCache.default(writable=False))
    composed = compose_env(loaded.spec, JobPaths.under(str(Path(out_dir).absolute())), base_env, known)
    return SpecFlags(loaded, composed, known)
