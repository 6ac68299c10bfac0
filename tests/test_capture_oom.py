"""capture/oom.py: a job that runs out of memory is named so in its post-mortem, with the module it was running and
its biggest buffers. Real JAX jobs, really out of memory: one under an address-space limit (XLA's allocation fails:
RESOURCE_EXHAUSTED), one in a small memory cgroup (the kernel's OOM killer sends SIGKILL), where one can be made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_spec

N = 20000  # jnp.outer of N floats: an N*N f32 buffer, 1.49 GiB, materialized for the sort
BIG = f"f32[{N * N}]"
BIG_SIZE = f"{N * N * 4 / (1 << 30):.3g} GiB"

STEP = f"""
import jax, jax.numpy as jnp

@jax.jit
def big(x):
    return jnp.sort(jnp.outer(x, x).ravel())[::7].sum()  # the sort cannot fuse: the outer product is written out

print(big(jnp.arange({N}, dtype=jnp.float32)))
"""

UNDER_RLIMIT = (
    """
import resource, jax
jax.devices()  # the backend's threads and pools first, then at most 512 MiB more address space
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (512 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
"""
    + STEP
)

SPEC = "name: oom\nscript: job.py\nframework: jax\nbackend: local\ntimeout: 3m\n"


def _capture_json(argv: list[str]) -> dict:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_a_job_out_of_address_space_is_named_with_the_module_it_ran_and_its_biggest_buffers(tmp_path):
    pytest.importorskip("jax")
    spec = write_spec(tmp_path / "job", SPEC, UNDER_RLIMIT)
    xlarun = [sys.executable, "-m", "xlarun"]
    data = _capture_json([*xlarun, "capture", str(spec), "--store", str(tmp_path / "store"), "-q", "--json"])
    assert data["status"] == "failed" and data["exit_code"] == 1
    said = [w for w in data["warnings"] if "out of memory" in w]
    assert len(said) == 1, data["warnings"]
    words = said[0]
    assert "RESOURCE_EXHAUSTED: Out of memory allocating" in words
    big = next(m for m in data["modules"] if m["name"] == "jit_big")
    label = f"module_{big['module_id']:04d} jit_big"
    assert f"while running {label}" in words  # it compiled (its optimized module is in the dump), then ran out
    biggest = words.split("its biggest buffers: ", 1)[1]
    assert biggest.startswith(next(w for w in biggest.split(", ") if BIG in w)) and BIG_SIZE in biggest
    assert f"`xlarun memory {data['run_id']}/module_{big['module_id']:04d}`" in words


def _memory_cgroup() -> Path | None:
    """This process's memory cgroup folder where a child group can be made (we may be root), else None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        for root, kind in ((Path("/sys/fs/cgroup/memory"), "memory"), (Path("/sys/fs/cgroup"), "")):
            if controllers == kind and (root / path.lstrip("/")).is_dir() and os.access(root / path.lstrip("/"), os.W_OK):
                folder = root / path.lstrip("/")
                if (folder / "memory.oom_control").exists() or (folder / "memory.events").exists():
                    return folder
    return None


@pytest.mark.slow
def test_a_job_the_kernels_oom_killer_killed_is_named_so(tmp_path):
    pytest.importorskip("jax")
    parent = _memory_cgroup()
    if parent is None:
        pytest.skip("no writable memory cgroup to run the capture in")
    group = parent / f"xlarun-oom-test-{os.getpid()}"
    group.mkdir()
    try:
        v2 = (group / "memory.max").exists()
        (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(1 << 30))
        if v2 and (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0")
        spec = write_spec(tmp_path / "job", SPEC, STEP)
        # xlarun and its job in the 1 GiB group: the job, the biggest process there, is the one the kernel kills
        command = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m xlarun capture {spec} --store {tmp_path / 'store'} -q --json"
        data = _capture_json(["sh", "-c", command])
    finally:
        group.rmdir()
    assert data["status"] == "failed" and data["exit_code"] == -9
    said = [w for w in data["warnings"] if "OOM killer" in w]
    assert len(said) == 1, data["warnings"]
    assert "killed by the kernel's OOM killer (SIGKILL; its cgroup's oom_kill went from" in said[0]
    big = next(m for m in data["modules"] if m["name"] == "jit_big")
    assert f"while running module_{big['module_id']:04d} jit_big" in said[0] and BIG in said[0]


@pytest.mark.slow
def test_a_job_that_fails_otherwise_is_not_called_out_of_memory(tmp_path):
    pytest.importorskip("jax")
    script = "import jax, jax.numpy as jnp\nprint(jax.jit(jnp.sin)(jnp.ones(4)))\nraise ValueError('bad input')\n"
    spec = write_spec(tmp_path / "job", SPEC, script)
    data = _capture_json(
        [sys.executable, "-m", "xlarun", "capture", str(spec), "--store", str(tmp_path / "store"), "-q", "--json"]
    )
    assert data["status"] == "failed" and data["modules"]
    assert not any("memory" in w.lower() for w in data["warnings"]), data["warnings"]


KILLED_WHILE_COMPILING = """
import os, re, signal, threading, time
import jax, jax.numpy as jnp

dump = re.search(r"--xla_dump_to=(\\S+)", os.environ["XLA_FLAGS"]).group(1)

def kill_once_compiling():  # what the OOM killer does, the moment XLA has dumped the module it starts to compile
    while not any(name.endswith("jit_many.before_optimizations.txt") for name in os.listdir(dump) if "jit_many" in name):
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGKILL)

threading.Thread(target=kill_once_compiling, daemon=True).start()

@jax.jit
def many(x):
    for i in range(600):
        x = jnp.sin(x * (i + 1)) + jnp.cos(x[::-1])
    return x

print(many(jnp.arange(1000, dtype=jnp.float32)).sum())
"""


@pytest.mark.slow
def test_a_job_killed_while_compiling_names_the_module_it_was_compiling(tmp_path):
    pytest.importorskip("jax")
    spec = write_spec(tmp_path / "job", SPEC, KILLED_WHILE_COMPILING)
    data = _capture_json(
        [sys.executable, "-m", "xlarun", "capture", str(spec), "--store", str(tmp_path / "store"), "-q", "--json"]
    )
    assert data["status"] == "failed" and data["exit_code"] == -9
    said = [w for w in data["warnings"] if "SIGKILL" in w]
    assert len(said) == 1, data["warnings"]
    many = next(m for m in data["modules"] if m["name"] == "jit_many")
    # xlarun did not send it and the job's cgroup counted no OOM kill: most likely, not surely, the OOM killer
    assert "killed by SIGKILL, which xlarun did not send: most likely the kernel's OOM killer" in said[0]
    assert f"while compiling module_{many['module_id']:04d} jit_many (XLA had not written its optimized module)" in said[0]
