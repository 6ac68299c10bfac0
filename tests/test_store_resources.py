"""Bounded resources per process: descriptors and threads stay flat however many runs one process archives,
commits, indexes and reads (a notebook loop, a batch or a Ray driver committing thousands of runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

MODULE = """HloModule jit_{name}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}

ENTRY main.3 {{
  Arg_0.1 = f32[4]{{0}} parameter(0)
  ROOT add.2 = f32[4]{{0}} add(Arg_0.1, Arg_0.1)
}}
"""

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, threading
    import xlarun
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    runs, dump, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    store = xlarun.open_store(root)
    seen = []
    for i in range(runs):
        run = store.import_dump(dump, name=f"r{i}")
        if i % 100 == 99:
            module = run.modules()[0]
            assert "add(" in module.text()  # read back what was archived
            seen.append({"runs": i + 1, "fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count()})
    print(json.dumps({"seen": seen, "listed": len(store.runs())}))
    """
)


@pytest.mark.slow
def test_two_thousand_runs_archived_in_one_process_under_ulimit_256_hold_descriptors_flat(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    for i, name in enumerate(["f", "g"]):
        (dump / f"module_{i:04d}.jit_{name}.before_optimizations.txt").write_text(MODULE.format(name=name))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "2000", str(dump), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    seen = report["seen"]
    assert report["listed"] == 2000 and len(seen) == 20
    # the store opens its files lazily over the first runs (a write-ahead log's -shm may come and go); from then on
    # nothing grows with the runs: within 3 descriptors of run 200's count up to run 2,000 (a
    # descriptor kept per run would make 4,000 at the end), and the same threads
    after = [s["fds"] for s in seen[1:]]
    assert max(after) - min(after) <= 3 and seen[-1]["fds"] < 32, seen
    assert {s["threads"] for s in seen} == {seen[0]["threads"]}, seen
