"""A process of a many-process job that raised (capture/backends/process_failure.py): marked by the bootstrap it runs
under, and recorded as "failed" with Python's exit 1, not as stopped, even when jax.distributed's exit hook hangs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xlarun.capture.backends.process_failure import marking_argv, raised, raised_line
from xlarun.capture.launch import capture, exit_status_error
from xlarun.store.facade import LocalStore
from xlarun.store.rows import RunStatus

from .conftest import write_spec


def test_the_bootstrap_marks_an_uncaught_exception_and_prints_the_script_traceback_alone(tmp_path):
    script = tmp_path / "job.py"
    script.write_text('import sys\ndef load():\n    raise ValueError(f"no shard for {sys.argv[1:]}")\nload()\n')
    mark = tmp_path / "raised.txt"
    done = subprocess.run(marking_argv([sys.executable, str(script), "a", "b"], mark), capture_output=True, text=True)
    assert done.returncode == 1 and raised(mark) == "ValueError: no shard for ['a', 'b']"
    assert done.stderr.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{script}", line 4, in <module>',
        "    load()",
        f'  File "{script}", line 3, in load',
        '    raise ValueError(f"no shard for {sys.argv[1:]}")',
        "ValueError: no shard for ['a', 'b']",
    ]
    # an exit of its own is no exception: no mark
    script.write_text("import sys\nsys.exit(3)\n")
    mark.unlink()
    assert subprocess.run(marking_argv([sys.executable, str(script)], mark)).returncode == 3 and raised(mark) is None
    # around another bootstrap (the profiler's: python -c CODE ARGS) it marks the same
    code = "import sys\nraise KeyError(sys.argv[1:])"
    assert subprocess.run(marking_argv([sys.executable, "-c", code, "x"], mark), capture_output=True).returncode == 1
    assert raised(mark) == "KeyError: ['x']"
    assert raised_line({"processes": [{"process": 0}, {"process": 1, "raised": "ValueError: x"}]}) == "[process 1] ValueError: x"


@pytest.mark.slow
def test_a_jax_process_that_raised_is_failed_with_exit_1_and_its_peer_stopped(tmp_path):
    pytest.importorskip("jax")
    script = """
import os
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
process, count = int(os.environ["XLARUN_PROCESS_ID"]), int(os.environ["XLARUN_NUM_PROCESSES"])
jax.distributed.initialize(coordinator_address=os.environ["XLARUN_COORDINATOR"], num_processes=count, process_id=process)
if process == 1:
    raise RuntimeError("process 1 cannot read its shard of the data")
mesh = jax.make_mesh((jax.device_count(),), ("data",))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), np.ones((4, 16), np.float32))
print(float(jax.jit(lambda x: x.sum())(x)), flush=True)
"""
    text = "name: mp-raise\nscript: job.py\nframework: jax\nprocesses: 2\ntimeout: 3m\n"
    text += 'dump:\n  extra_xla_flags: ["--xla_force_host_platform_device_count=2"]\n'
    result = capture(write_spec(tmp_path, text, script), LocalStore.open(tmp_path / "store"))
    # without the mark both processes hang (process 1 in jax's exit hook, process 0 for its peer) until the timeout
    assert (result.status, result.exit_code) == (RunStatus.FAILED, 1)
    processes = result.manifest.backend_details["processes"]
    assert [(p["process"], p["status"]) for p in processes] == [(0, "interrupted"), (1, "failed")]
    assert processes[0]["exit_code"] < 0 and processes[1]["exit_code"] == 1  # process 0 killed by a signal
    assert processes[1]["raised"] == "RuntimeError: process 1 cannot read its shard of the data"
    assert "process 1: raised RuntimeError: process 1 cannot read its shard of the data" in result.warnings
    assert "process 1 ended first (failed): process(es) 0 were stopped" in result.warnings
    error = exit_status_error(result)
    assert error.exit_code == 1 and "[process 1] RuntimeError: process 1 cannot read its shard of the data" in error.message
    stderr = (result.run_dir / "processes" / "process-1" / "stderr.log").read_text()
    assert stderr.startswith(f'Traceback (most recent call last):\n  File "{tmp_path / "job.py"}", line 8, in <module>')
