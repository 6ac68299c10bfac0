"""Capture end to end with real JAX and TensorFlow programs on CPU."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlarun.capture.launch import NO_DUMP_WARNING, capture, exit_status_error
from xlarun.errors import ExitCode
from xlarun.store.facade import LocalStore
from xlarun.store.rows import RunStatus

from .conftest import write_spec

TINY_JAX = """
import jax, jax.numpy as jnp
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
print("value", float(f(jnp.ones((8, 8)))))
"""


def test_bundled_example_lists_the_training_step_first(jax_run):
    store, result = jax_run
    assert result.status == RunStatus.SUCCEEDED and result.exit_code == 0
    main = result.modules[0]
    assert main.name == "jit_train_step"
    # ranked by compute ops: the RNG init module has more instructions but no matmul
    assert main.compute_ops > max(m.compute_ops for m in result.modules[1:])
    assert [m.name for m in result.modules[:2]] == ["jit_train_step", "jit_accuracy"]
    own = {m.name: m.own_code for m in result.modules}
    assert own["jit_train_step"] and own["jit_init_params"] and own["jit__normal"] is False
    assert "before_optimizations" in main.stages and "cpu_after_optimizations" in main.stages
    assert {m.name for m in result.modules} >= {"jit_train_step", "jit_accuracy", "jit_init_params"}
    assert main.fingerprint and len(main.fingerprint) == 64
    assert main.opcodes_before.get("dot", 0) >= 6  # 3 layers forward + gradients
    kinds = {f.kind for f in store.index.module(main.run_id, main.module_id).files}
    assert {"hlo", "snapshot", "buffer-assignment"} <= kinds


def test_manifest_records_what_ran(jax_run):
    store, result = jax_run
    manifest = store.manifest(result.run_id)
    assert manifest["status"] == "succeeded" and manifest["exit_code"] == 0
    assert manifest["framework"] == "jax" and manifest["backend"] == "local"
    assert manifest["versions"]["jax"].startswith("0.")
    assert manifest["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert manifest["xla_flags"][0].startswith("--xla_dump_to=") and "--xla_dump_hlo_snapshots" in manifest["xla_flags"]
    assert "XLA_FLAGS" in manifest["env_delta"] and manifest["env_delta"]["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert manifest["command"][1].endswith("configs/examples/jax_mlp.py")
    # the git state of the script's checkout; outside one (or without git) None, not an invented commit
    examples = Path(__file__).resolve().parent.parent / "configs" / "examples"
    top = (
        subprocess.run(["git", "-C", str(examples), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
        if shutil.which("git")
        else None
    )
    if top is None or top.returncode != 0:
        assert manifest["git"] is None
    else:
        git = manifest["git"]
        assert git["root"] == top.stdout.strip() and isinstance(git["dirty"], bool) and git["branch"]
        assert re.fullmatch(r"[0-9a-f]{40}", git["commit"])
        assert (
            subprocess.run(["git", "-C", git["root"], "cat-file", "-e", git["commit"] + "^{commit}"]).returncode == 0
        )  # a real commit of it
    assert manifest["files"] == len(store.stored_files(result.run_id)) > 10
    assert "step 2: loss" in store.read_log(result.run_id, "stdout")
    assert (result.run_dir / "spec.yaml").read_text().startswith("# The bundled example")


def test_tf2_jit_compile_capture(tf_run):
    store, result = tf_run
    assert result.status == RunStatus.SUCCEEDED, store.read_log(result.run_id, "stderr")[-2000:]
    names = [m.name or "" for m in result.modules]
    assert any(n.startswith("a_inference_train_step") for n in names), names
    main = result.modules[0]
    assert main.name.startswith("a_inference_train_step") and main.instr_before > 10


def test_tf1_autojit_keeps_graphdefs_and_clusters(tf1_run):
    store, result = tf1_run
    assert result.status == RunStatus.SUCCEEDED, store.read_log(result.run_id, "stderr")[-2000:]
    paths = [f.path for f in store.stored_files(result.run_id)]
    graphs = [p for p in paths if p.startswith("tf_graphs/")]
    assert "tf_graphs/mark_for_compilation.pbtxt" in graphs, graphs
    # the annotated graphs (one per graph TF optimized) are what a user opens to see which ops went to which XLA cluster
    annotated = [p for p in graphs if Path(p).name.startswith("mark_for_compilation_annotated")]
    assert "tf_graphs/mark_for_compilation_annotated.pbtxt" in annotated, graphs
    assert any(b'key: "_XlaCluster"' in store.read_file(result.run_id, p) for p in annotated), annotated
    cluster_modules = [m for m in result.modules if (m.name or "").startswith("cluster_")]
    assert cluster_modules, [m.name for m in result.modules]
    files = store.index.run_files(result.run_id)
    assert {f.kind for f in files if f.path.startswith("tf_graphs/")} == {"tf-graph"}


def test_same_computation_has_the_same_fingerprint_across_runs(jax_run, tmp_path):
    _store, first = jax_run
    second = capture(Path(__file__).parent.parent / "configs" / "jax-cpu.yaml", LocalStore.open(tmp_path / "s2"))
    fp1 = {m.name: m.fingerprint for m in first.modules}
    fp2 = {m.name: m.fingerprint for m in second.modules}
    assert fp1["jit_train_step"] == fp2["jit_train_step"]


LINSPACE_THEN_LOGEXP = """
import jax
import jax.numpy as jnp


@jax.jit
def logexp(x):
    return jnp.log(jnp.exp(x))


x = jnp.linspace(0.0, 1.0, 1000)
print(float(logexp(x).sum()))
"""


@pytest.mark.slow
def test_a_program_without_a_matmul_lists_its_own_module_first(tmp_path, cli):
    """No module holds a dot: where the code lives ranks jit_logexp above jax's own jit__linspace."""
    spec = write_spec(tmp_path, "name: logexp\nscript: job.py\n", LINSPACE_THEN_LOGEXP)
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert [(m.name, m.own_code) for m in result.modules] == [
        ("jit_logexp", True),
        ("jit__linspace", False),
        ("jit__reduce_sum", False),
    ]
    listed = cli("modules", "--store", tmp_path / "s")
    assert listed.exit_code == 0
    rows = [line.split()[1:3] for line in listed.stdout.splitlines() if line.split()[:1] in (["0"], ["2"], ["4"])]
    assert rows == [["jit_logexp", "yours"], ["jit__linspace", "framework"], ["jit__reduce_sum", "framework"]]


@pytest.mark.slow
def test_failing_job_is_archived_and_reported(tmp_path):
    spec = write_spec(tmp_path, "name: boom\nscript: job.py\n", TINY_JAX + "raise SystemExit(3)\n")
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.FAILED and result.exit_code == 3
    assert result.modules and result.modules[0].instr_before  # the dump of a failing job is kept
    error = exit_status_error(result)
    assert error.exit_code == ExitCode.FAILED and "exited with code 3" in error.message


@pytest.mark.slow
def test_timeout_kills_the_whole_process_group(tmp_path):
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    spec = write_spec(tmp_path, "name: slow\nscript: job.py\ntimeout: 2s\n", script)
    store = LocalStore.open(tmp_path / "s")
    started = time.monotonic()
    result = capture(spec, store)
    assert time.monotonic() - started < 20
    assert result.status == RunStatus.TIMED_OUT
    assert exit_status_error(result).exit_code == ExitCode.TIMEOUT
    child_pid = int(store.read_log(result.run_id, "stdout").split()[1])
    time.sleep(0.2)
    assert not _alive(child_pid)  # the grandchild went down with the job
    assert store.index.runs()[0].status == "timed_out"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that never comes, as under a bare PID 1, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_run_without_xla_warns_clearly(tmp_path):
    spec = write_spec(tmp_path, "name: nothing\nscript: job.py\n", "print('no xla here')\n")
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.SUCCEEDED and result.manifest.files == 0
    assert NO_DUMP_WARNING in result.warnings
    assert exit_status_error(result).exit_code == ExitCode.FAILED


def test_missing_interpreter_is_an_archived_error(tmp_path):
    spec = write_spec(tmp_path, "name: nopython\nscript: job.py\npython: /no/such/python\n", "print(1)\n")
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.ERROR
    assert "cannot start /no/such/python" in result.manifest.error


def _default_signals() -> None:
    # a test sending SIGINT must work when the suite itself runs under nohup or as a background job
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _xlarun(*args, store: Path, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, XLARUN_STORE=str(store), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "xlarun", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,
        **kwargs,
    )


def _wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if needle in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"xlarun ended before printing {needle!r}: {proc.stderr.read()}")
    raise AssertionError(f"no {needle!r} within {timeout}s")


WAITING_JAX = TINY_JAX + "print('ready', flush=True)\nimport time\ntime.sleep(120)\n"


@pytest.mark.slow
def test_ctrl_c_stops_the_job_and_archives_the_run(tmp_path):
    spec = write_spec(tmp_path, "name: interrupted\nscript: job.py\n", WAITING_JAX)
    proc = _xlarun("capture", str(spec), store=tmp_path / "s")
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == ExitCode.INTERRUPTED
    store = LocalStore.open(tmp_path / "s")
    [run] = store.index.runs()
    assert run.status == "interrupted" and run.n_modules >= 1  # what was dumped before Ctrl-C is kept
    assert store.manifest(run.run_id)["signal"] == "SIGINT"


@pytest.mark.slow
def test_kill_9_mid_capture_leaves_the_store_consistent(tmp_path):
    good = write_spec(tmp_path / "good", "name: good\nscript: job.py\n", TINY_JAX)
    store_root = tmp_path / "s"
    assert _xlarun("capture", str(good), store=store_root).wait(timeout=120) == 0
    before = LocalStore.open(store_root)
    [kept] = before.run_ids()
    kept_files = {f.path: before.read_file(kept, f.path) for f in before.stored_files(kept)}
    before.close()

    victim = write_spec(tmp_path / "victim", "name: victim\nscript: job.py\n", WAITING_JAX)
    proc = _xlarun("capture", str(victim), store=store_root, start_new_session=True)
    _wait_for_line(proc, "ready")
    os.killpg(proc.pid, signal.SIGKILL)  # xlarun and its job, no chance to clean up
    proc.wait(timeout=30)

    after = LocalStore.open(store_root)
    assert after.run_ids() == [kept]
    assert [r.run_id for r in after.index.runs()] == [kept]
    assert {f.path: after.read_file(kept, f.path) for f in after.stored_files(kept)} == kept_files
    [leftover] = after.leftovers()
    assert leftover.recoverable  # the victim's spec, logs and dump files: gc keeps them for recover
    folders = after.gc().folders
    assert folders == 0 and after.run_ids() == [kept]
    from xlarun.capture.recover import recover_runs

    [recovered] = recover_runs(after)
    assert recovered.status == "incomplete" and recovered.files >= 1
    assert sorted(after.run_ids()) == sorted([kept, leftover.run_id]) and after.leftovers() == []
    assert {r.run_id: r.status for r in after.index.runs()} == {kept: "succeeded", leftover.run_id: "incomplete"}


@pytest.mark.slow
def test_a_failure_while_archiving_keeps_earlier_runs_and_the_raw_output(tmp_path, monkeypatch):
    from xlarun.errors import StoreError
    from xlarun.store import archive
    from xlarun.store.packs import BlobStore

    store = LocalStore.open(tmp_path / "s")
    good = capture(write_spec(tmp_path / "a", "name: a\nscript: job.py\n", TINY_JAX), store)
    monkeypatch.setattr(archive, "SMALL_DUMP_BYTES", 0)  # a pack per series, so the disk fills after the first
    real_write = BlobStore._write
    calls = {"n": 0}

    def write_until_the_disk_fills(self, target, payload):
        calls["n"] += 1
        if calls["n"] > 1:
            raise OSError(28, "No space left on device")
        return real_write(self, target, payload)

    monkeypatch.setattr(BlobStore, "_write", write_until_the_disk_fills)
    with pytest.raises(StoreError, match=r"the disk is full \(No space left on device\); the job's output is kept in") as info:
        capture(write_spec(tmp_path / "b", "name: b\nscript: job.py\n", TINY_JAX), store)
    monkeypatch.setattr(BlobStore, "_write", real_write)
    staging = Path(info.value.message.split("kept in ")[1])
    assert any(staging.joinpath("dump").iterdir())  # nothing the job wrote was lost
    assert store.run_ids() == [good.run_id]
    assert [r.run_id for r in store.index.runs()] == [good.run_id]


def test_a_dead_docker_daemon_is_a_clear_error_and_a_recorded_run(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    spec = write_spec(tmp_path, "name: nodaemon\nscript: job.py\nbackend: docker-cpu\n", TINY_JAX)
    store = LocalStore.open(tmp_path / "s")
    result = capture(spec, store)
    assert result.status == RunStatus.ERROR
    assert "Docker daemon" in result.manifest.error and "DOCKER_HOST" in result.manifest.error
    error = exit_status_error(result)
    assert error.exit_code == ExitCode.ENVIRONMENT
    assert [r.status for r in store.index.runs()] == ["error"]


def test_a_missing_image_is_a_clear_error_and_a_recorded_run(tmp_path, docker_client):
    spec = write_spec(
        tmp_path, "name: noimage\nscript: job.py\nbackend:\n  kind: docker\n  image: xlarun-absent:nope\n", TINY_JAX
    )
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.ERROR
    assert "xlarun-absent:nope" in result.manifest.error
    assert exit_status_error(result).exit_code == ExitCode.ENVIRONMENT


REFUSING_JOB = (
    "import sys\n"
    "sys.stderr.write('2026-11-23 08:37:38.192632: F external/local_xla/xla/parse_flags_from_env.cc:225] "
    "Unknown flags in XLA_FLAGS: --xla_foo  \\n')\n"
    "raise SystemExit(1)\n"
)


def test_a_job_refusing_a_flag_is_told_which(tmp_path):
    spec = write_spec(tmp_path, "name: refused\nscript: job.py\ndump:\n  extra_xla_flags: ['--xla_foo']\n", REFUSING_JOB)
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.FAILED and result.flag_rejection.flags == ("--xla_foo",)
    assert NO_DUMP_WARNING not in result.warnings
    assert "the job aborted at start: its XLA does not know --xla_foo (Unknown flag in XLA_FLAGS)" in result.warnings
    error = exit_status_error(result)
    assert error.exit_code == ExitCode.FAILED
    assert (
        error.message.startswith("the job aborted at start: its XLA does not know --xla_foo") and result.run_id in error.message
    )
    assert error.hint == "--xla_foo: remove it from dump.extra_xla_flags"


def test_a_refusal_blames_only_flags_the_jobs_xla_lacks(tmp_path):
    """TF 2.16 names flags it does know among the unknown ones: the pre-run probe of the job's own
    jaxlib (this venv's) clears --xla_dump_hlo_snapshots, so only --xla_foo is blamed."""
    job = REFUSING_JOB.replace("--xla_foo  ", "--xla_foo --xla_dump_hlo_snapshots ")
    spec = write_spec(tmp_path, "name: refused\nscript: job.py\nframework: jax\ndump:\n  extra_xla_flags: ['--xla_foo']\n", job)
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    rejection = result.flag_rejection
    assert (rejection.flags, rejection.registered) == (("--xla_foo",), ("--xla_dump_hlo_snapshots",))
    error = exit_status_error(result)
    assert error.message.startswith(
        "the job aborted at start: its XLA does not know --xla_foo (Unknown flag in XLA_FLAGS); "
        "the log also names --xla_dump_hlo_snapshots, which jaxlib "
    )
    assert error.hint == "--xla_foo: remove it from dump.extra_xla_flags"  # no advice to turn snapshots off


def test_a_refusal_naming_only_registered_flags_blames_none(tmp_path):
    job = REFUSING_JOB.replace("--xla_foo  ", "--xla_dump_hlo_snapshots --xla_embed_ir_in_executable")
    spec = write_spec(tmp_path, "name: refused\nscript: job.py\nframework: jax\n", job)
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.flag_rejection.flags == ()
    error = exit_status_error(result)
    assert "registers every flag the log names (--xla_dump_hlo_snapshots --xla_embed_ir_in_executable)" in error.message
    assert "does not know" not in error.message and error.hint == f"`xlarun logs {result.run_id}` shows its output"


@pytest.mark.slow
def test_a_job_killed_by_a_signal_is_named_by_it(tmp_path):
    spec = write_spec(tmp_path, "name: abort\nscript: job.py\n", TINY_JAX + "import os\nos.abort()\n")
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.FAILED and result.exit_code == -signal.SIGABRT
    error = exit_status_error(result)
    assert error.message.startswith(f"the job was killed by SIGABRT (signal 6); run {result.run_id} is archived")


def test_a_docker_exit_code_above_128_is_named_as_a_signal():
    from xlarun.capture.launch import job_ending

    assert job_ending(137, "docker-cpu") == "the job was killed by SIGKILL (signal 9)"
    assert job_ending(137, "local") == "the job exited with code 137"  # a local job's own exit code
    assert job_ending(-11, "local") == "the job was killed by SIGSEGV (signal 11)"
    assert job_ending(3, "docker-gpu") == "the job exited with code 3"


@pytest.mark.slow
def test_a_job_that_cannot_import_its_framework_shows_why(tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import jax"], capture_output=True).returncode == 0:
        pytest.skip("the system python has jax")
    spec = write_spec(tmp_path, "name: nojax\nscript: job.py\npython: /usr/bin/python3\n", TINY_JAX)
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.FAILED and result.manifest.files == 0
    assert NO_DUMP_WARNING not in result.warnings
    error = exit_status_error(result)
    assert error.message.startswith("the job exited with code 1 before XLA compiled anything; its stderr ends: ")
    assert error.message.split("; its stderr ends: ")[1].split("; run ")[0].endswith("ModuleNotFoundError: No module named 'jax'")


def test_a_refusal_in_the_logs_of_a_succeeding_job_is_not_blamed(tmp_path):
    spec = write_spec(tmp_path, "name: fine\nscript: job.py\n", REFUSING_JOB.replace("raise SystemExit(1)\n", ""))
    result = capture(spec, LocalStore.open(tmp_path / "s"))
    assert result.status == RunStatus.SUCCEEDED and result.flag_rejection is None and NO_DUMP_WARNING in result.warnings


TF2_JIT = """
import tensorflow as tf

@tf.function(jit_compile=True)
def step(x, w):
    return tf.reduce_sum(tf.tanh(x @ w) * tf.constant([float(i) for i in range(64)]))

print("value", float(step(tf.ones([8, 16]), tf.ones([16, 64]))))
"""


@pytest.mark.tf
def test_tensorflow_2_16_captures_without_the_flag_it_lacks(tmp_path, cli):
    """TF 2.16's XLA lacks --xla_dump_large_constants: xlarun leaves it out instead of aborting the job."""
    from .compat_support import require_compat

    python = require_compat("tf-2.16.2")
    spec = write_spec(tmp_path, f"name: tf216\nscript: job.py\npython: {python}\n", TF2_JIT)
    lacks = "tensorflow 2.16.2's XLA does not know --xla_dump_large_constants: left out"

    shown = cli("flags", spec, "--json")
    assert shown.exit_code == 0, shown.output
    flags_json = json.loads(shown.stdout)
    assert flags_json["xla_flags_checked_against"] == "tensorflow 2.16.2"
    assert "--xla_dump_large_constants" not in flags_json["xla_flags"] and any(lacks in w for w in flags_json["warnings"])
    plain = cli("flags", spec)
    assert lacks in " ".join(plain.stderr.split()) and "--xla_dump_large_constants" not in plain.stdout

    captured = cli("capture", spec, "--store", tmp_path / "s", "--quiet")
    assert captured.exit_code == 0, captured.output
    assert lacks in " ".join(captured.stderr.split())
    store = LocalStore.open(tmp_path / "s")
    run = store.index.runs()[0]
    manifest = store.manifest(run.run_id)
    assert manifest["status"] == "succeeded" and "--xla_dump_large_constants" not in manifest["xla_flags"]
    modules = store.index.modules(run.run_id)
    assert [m.name for m in modules if m.name.startswith("a_inference_step")], [m.name for m in modules]
    assert manifest["files"] >= 3


@pytest.mark.tf
@pytest.mark.slow
def test_tensorflow_2_16_blames_only_the_flag_it_lacks(tmp_path, cli):
    """TF 2.16 aborts with "Unknown flags in XLA_FLAGS: --xla_foo_bar --xla_foo_bar --xla_embed_ir_in_executable
    --xla_dump_hlo_snapshots", naming flags its own registry holds: only --xla_foo_bar is blamed."""
    from .compat_support import require_compat

    python = require_compat("tf-2.16.2")
    flags = "['--xla_foo_bar', '--xla_embed_ir_in_executable', '--xla_dump_hlo_snapshots']"
    spec = write_spec(tmp_path, f"name: tf216\nscript: job.py\npython: {python}\ndump:\n  extra_xla_flags: {flags}\n", TF2_JIT)
    out = cli("capture", spec, "--store", tmp_path / "s", "--quiet")
    assert out.exit_code == ExitCode.FAILED
    run_id = LocalStore.open(tmp_path / "s").index.runs()[0].run_id
    assert "--xla_embed_ir_in_executable" in LocalStore.open(tmp_path / "s").read_log(run_id, "stderr")  # the log names it
    error = " ".join(out.stderr.split()).split("error: ", 1)[1]
    assert error == (
        "the job aborted at start: its XLA does not know --xla_foo_bar (Unknown flag in XLA_FLAGS); the log also names "
        "--xla_embed_ir_in_executable --xla_dump_hlo_snapshots, which tensorflow 2.16.2 registers; "
        f"run {run_id} is archived (--xla_foo_bar: remove it from dump.extra_xla_flags)"
    )


LEAVES_A_ZERO_BYTE_FILE_AND_A_SYMLINK = (
    TINY_JAX
    + """
import os
dump = next(a.split("=", 1)[1] for a in os.environ["XLA_FLAGS"].split() if a.startswith("--xla_dump_to="))
open(os.path.join(dump, "module_0097.jit_f.before_optimizations.hlo.pb"), "wb").close()  # a killed writer's
os.symlink("/etc/passwd", os.path.join(dump, "passwd.txt"))
"""
)


@pytest.mark.slow
def test_a_zero_byte_dump_file_and_a_symlink_keep_the_run(tmp_path, cli):
    # was: TypeError in the archiver, exit 4, the run left in staging; the symlink dropped without a word
    spec = write_spec(tmp_path, "name: odd\nscript: job.py\n", LEAVES_A_ZERO_BYTE_FILE_AND_A_SYMLINK)
    out = cli("capture", spec, "--store", tmp_path / "s", "--quiet")
    assert out.exit_code == 0, out.output
    said = " ".join(out.stderr.split())
    assert (
        "1 file(s) of the dump folder not archived: passwd.txt: a symbolic link (to '/etc/passwd'): skipped, its target is never read"
        in said
    )
    store = LocalStore.open(tmp_path / "s")
    [run] = store.index.runs()
    assert run.status == "succeeded" and store.read_file(run.run_id, "module_0097.jit_f.before_optimizations.hlo.pb") == b""
    assert "passwd.txt" not in {f.path for f in store.stored_files(run.run_id)}
    listed = cli("files", "--store", tmp_path / "s")
    assert "NOT ARCHIVED  passwd.txt: a symbolic link" in listed.stdout
