"""The torture suite's figures: each test records its own, printed together at the end of the session."""

from __future__ import annotations

import pytest

_FIGURES: list[tuple[str, dict]] = []


@pytest.fixture
def figures(request):
    """figures(**numbers): record this test's figures (trials, runs lost, exit-4 crashes, hangs...)."""

    def record(**numbers) -> None:
        _FIGURES.append((request.node.name, numbers))
        print(f"\n[torture] {request.node.name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))

    return record


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("torture figures")
    for name, numbers in _FIGURES:
        terminalreporter.write_line(f"{name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


REAL_DUMP_JOB = """
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
g = jax.jit(lambda x, y: (jnp.sin(x) * y).mean(axis=0))
print(float(f(jnp.ones((8, 8)))), g(jnp.ones((4, 4)), jnp.ones((4, 4))).shape)
"""


@pytest.fixture(scope="session")
def real_dump(tmp_path_factory):
    """A real JAX dump folder, pass by pass, text and proto (about 270 files), made once per session."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("real-dump")
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_dump_to={folder} --xla_dump_hlo_pass_re=.* --xla_dump_hlo_as_text --xla_dump_hlo_as_proto",
    )
    subprocess.run([sys.executable, "-c", REAL_DUMP_JOB], env=env, check=True, capture_output=True, timeout=300)
    assert len(os.listdir(folder)) > 100
    return folder


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (we are root in CI); skipped with the reason where mounting is not allowed."""
    from .support import mounted_tmpfs

    with mounted_tmpfs(tmp_path / "disk", "16m") as mount:
        yield mount
