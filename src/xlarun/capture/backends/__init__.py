"""Backends run a job somewhere: a local process, or a container."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlarun.capture.backends.base import Backend

if TYPE_CHECKING:
    from xlarun.capture.spec import BackendSpec


def make_backend(spec: BackendSpec, processes: int = 1) -> Backend:
    """The backend a spec's ``backend`` section asks for; ``processes`` > 1 (local only) launches the job as that
    many processes of one distributed program."""
    if spec.kind == "local" and processes > 1:
        from xlarun.capture.backends.process_group import ProcessGroupBackend

        return ProcessGroupBackend(processes)
    if spec.kind == "local":
        from xlarun.capture.backends.local import LocalBackend

        return LocalBackend()
    from xlarun.capture.backends.docker import DockerBackend

    return DockerBackend.from_spec(spec)
