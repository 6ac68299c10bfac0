"""Backends run a job somewhere: a local process, or a container."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlarun.capture.backends.base import Backend

if TYPE_CHECKING:
    from xlarun.capture.spec import BackendSpec


def make_backend(spec: BackendSpec) -> Backend:
    """The backend a spec's ``backend`` section asks for."""
    if spec.kind == "local":
        from xlarun.capture.backends.local import LocalBackend

        return LocalBackend()
    from xlarun.capture.backends.docker import DockerBackend

    return DockerBackend.from_spec(spec)
