"""What a local capture loads and starts besides its job: its fixed cost (issue 36). A capture of a job that writes
one small module's dump, run by the CLI in a child process that records every module imported and every process
started (Python's audit hook), twice into one store with one cache folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: never needed by a capture on the local backend: the container backend and its SDK, the remote store, a pool of
#: worker processes (a small dump is parsed in this process), the OOM post-mortem (a job that failed only)
FORBIDDEN = {
    "docker", "requests", "xlarun.capture.backends.docker", "xlarun.capture.backends.docker_spec",
    "xlarun.capture.images", "xlarun.store.remote", "xlarun.store.remote_delta", "multiprocessing",
    "concurrent.futures.process", "xlarun.hlo.buffer_assignment", "numpy", "jax", "xlarun.replay", "xlarun.see",
}  # fmt: skip

JOB = '''import os, re
folder = re.search(r"--xla_dump_to=(\\S+)", os.environ["XLA_FLAGS"]).group(1)
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "module_0000.jit_f.before_optimizations.txt"), "w") as out:
    out.write("""HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

ENTRY main.3 {
  Arg_0.1 = f32[8]{0} parameter(0)
  ROOT tanh.2 = f32[8]{0} tanh(Arg_0.1)
}
""")
'''

CHILD = """
import contextlib, json, os, sys
started = []
sys.addaudithook(lambda event, args: started.append([str(a) for a in args[1]]) if event == "subprocess.Popen" else None)
from xlarun.cli import main
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules), "started": started}), file=sys.stderr)
"""


def _capture(spec, store, env) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "capture", str(spec), "--store", str(store), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr[-2000:]
    return report


def test_a_local_capture_loads_nothing_for_docker_or_remotes_and_probes_the_interpreter_once(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: tiny\nscript: job.py\nframework: jax\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    first, second = (_capture(spec, tmp_path / "store", env) for _ in range(2))

    # what the interpreter loads before xlarun runs (a coverage run's subprocess hook loads multiprocessing) is not
    # the capture's
    bare = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sorted(sys.modules)))"], env=env,
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    at_start = set(json.loads(bare.stdout))
    for report in (first, second):
        loaded = set(report["modules"]) - at_start
        assert sorted(m for m in FORBIDDEN if m in loaded or any(x.startswith(m + ".") for x in loaded)) == []

    def pythons(report: dict) -> list[list[str]]:
        return [argv[1:3] for argv in report["started"] if os.path.basename(argv[0]).startswith("python")]

    # the first capture asks the job's interpreter for its packages; the second reads that answer from the cache,
    # and starts no Python but the job's keeper (which starts the job)
    keeper, probe = sorted(pythons(first))  # the probe runs beside the job: either may start first
    assert keeper == ["-I", "-S"] and probe[0] == "-c" and "importlib import metadata" in probe[1]
    assert pythons(second) == [["-I", "-S"]]

    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "store")
    runs = store.index.runs()
    assert len(runs) == 2
    one, two = (store.manifest(run.run_id)["versions"] for run in runs)
    assert one == two and one["python"] == ".".join(map(str, sys.version_info[:3]))
    import jax

    assert one["jax"] == jax.__version__
    assert [m.name for m in store.index.modules(runs[0].run_id)] == ["jit_f"]
