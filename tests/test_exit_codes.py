"""One test per exit code of README's table, each through the real CLI: what a script or a shell sees.

Jobs are plain Python scripts that write one XLA dump file by hand (no framework needed), so only the signal
and kill tests, which need xlarun in a process of its own, are slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlarun import __version__
from xlarun.errors import ExitCode
from xlarun.store.facade import LocalStore

from .conftest import write_spec
from .synthetic_store import archive_run, hlo_module, module_dumps

DUMP_NAME = "module_0001.jit_f.before_optimizations.txt"

# what a JAX job writes first, by hand: the folder comes from the XLA_FLAGS xlarun set
WRITES_A_DUMP = f"""
import os, pathlib, re
dump = pathlib.Path(re.search(r"--xla_dump_to=(\\S+)", os.environ["XLA_FLAGS"]).group(1))
dump.mkdir(parents=True, exist_ok=True)
(dump / "{DUMP_NAME}").write_text({hlo_module("jit_f")!r})
print("dumped", flush=True)
"""


def _runs(cli, store: Path) -> list[dict]:
    out = cli("runs", "--store", store, "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


def test_0_success(cli, tmp_path):
    store = tmp_path / "store"
    spec = write_spec(tmp_path, "name: ok\nscript: job.py\n", WRITES_A_DUMP)
    out = cli("capture", spec, "--store", store, "-q")
    assert out.exit_code == ExitCode.OK == 0, out.stderr
    [run] = _runs(cli, store)
    assert (run["status"], run["exit_code"], run["n_modules"]) == ("succeeded", 0, 1)


def test_1_the_job_failed_and_is_archived(cli, tmp_path):
    store = tmp_path / "store"
    spec = write_spec(tmp_path, "name: boom\nscript: job.py\n", WRITES_A_DUMP + "raise SystemExit(3)\n")
    out = cli("capture", spec, "--store", store, "-q")
    assert out.exit_code == ExitCode.FAILED == 1
    [run] = _runs(cli, store)
    assert (run["status"], run["exit_code"], run["n_modules"]) == ("failed", 3, 1)  # the dump of a failing job is kept
    assert f"the job exited with code 3; run {run['run_id']} is archived" in out.stderr


def test_1_a_capture_that_made_no_dump(cli, tmp_path):
    store = tmp_path / "store"
    spec = write_spec(tmp_path, "name: nothing\nscript: job.py\n", "print('no XLA here')\n")
    out = cli("capture", spec, "--store", store, "-q")
    assert out.exit_code == ExitCode.FAILED
    assert "the run produced no XLA dump" in out.stderr
    [run] = _runs(cli, store)
    assert run["n_files"] == 0


@pytest.mark.parametrize(
    "args, said",
    [
        (["show", "no_such_module", "--store", "{store}"], "no module matches 'no_such_module'"),  # an unknown REF
        (["show", "jit_", "--store", "{store}"], "module REF 'jit_' is ambiguous"),  # an ambiguous one
        (["validate", "{spec}"], "timeout"),  # a bad spec
        (["capture", "{spec}", "--store", "{store}"], "timeout"),  # refused before anything runs
        (["runs", "--no-such-option"], "No such option"),  # a bad command line
    ],
)
def test_2_bad_usage_spec_or_ref(cli, tmp_path, args, said):
    store = tmp_path / "store"
    archive_run(LocalStore.open(store), {**module_dumps(1, "jit_f"), **module_dumps(2, "jit_g")}, run_id="20261123-100000-abcd")
    spec = write_spec(tmp_path, "name: bad\nscript: job.py\ntimeout: -5\n", "pass\n")
    out = cli(*[a.format(spec=spec, store=store) for a in args])
    assert out.exit_code == ExitCode.USAGE == 2
    assert said in out.stderr and "Traceback" not in out.stderr
    assert [r.run_id for r in LocalStore.open(store).index.runs()] == ["20261123-100000-abcd"]  # nothing was captured


def test_3_a_component_is_missing(cli, tmp_path):
    store = tmp_path / "store"
    archive_run(LocalStore.open(store), module_dumps(1, "jit_f"), run_id="20261123-100000-abcd")
    empty = tmp_path / "no-tools"
    empty.mkdir()
    out = cli("render", "jit_f", "--store", store, "-o", tmp_path / "f.svg", env={"PATH": str(empty)})
    assert out.exit_code == ExitCode.ENVIRONMENT == 3
    assert "graphviz's `dot` is not installed" in out.stderr and "Traceback" not in out.stderr


def test_4_a_bug_prints_the_traceback_and_writes_a_crash_log(cli, tmp_path, monkeypatch):
    def broken(self):
        raise RuntimeError("boom")

    store = tmp_path / "store"
    archive_run(LocalStore.open(store), module_dumps(1, "jit_f"), run_id="20261123-100000-abcd")
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setattr(LocalStore, "run_ids", broken)  # any unexpected exception inside a command
    out = cli("runs", "--store", store)
    assert out.exit_code == ExitCode.INTERNAL == 4
    assert "Traceback (most recent call last)" in out.stderr and "RuntimeError: boom" in out.stderr
    [log] = (cache / "xlarun").glob("crash-*.log")
    last = out.stderr.strip().splitlines()[-1]
    assert last.endswith(f"internal error: RuntimeError('boom'); the traceback is in {log}; please report it")
    text = log.read_text()
    assert text.startswith(f"xlarun {__version__} on Python {sys.version}")
    assert "argv: " in text and "RuntimeError: boom" in text and "in broken" in text
    as_json = cli("runs", "--store", store, "--json")
    assert as_json.exit_code == 4
    assert json.loads(as_json.stdout)["exit_code"] == 4 and "please report it" in json.loads(as_json.stdout)["hint"]


@pytest.mark.parametrize("kind", ["chained", "pydantic"])
def test_130_a_ctrl_c_a_library_wrapped_is_an_interruption_not_a_bug(cli, tmp_path, monkeypatch, kind):
    """A Ctrl-C while pydantic-core builds a model's validators comes out as its SchemaError naming the
    KeyboardInterrupt (seen when a Ctrl-C reached xlarun as a capture began); a library may also re-raise one
    as its own error. Either is exit 130 "interrupted", no traceback, no crash log."""
    from pydantic_core import SchemaError

    def interrupted(self):
        if kind == "pydantic":
            raise SchemaError('Error building "literal" validator:\n  KeyboardInterrupt: ')
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("the library stopped") from exc

    store = tmp_path / "store"
    archive_run(LocalStore.open(store), module_dumps(1, "jit_f"), run_id="20261123-100000-abcd")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(LocalStore, "run_ids", interrupted)
    out = cli("runs", "--store", store)
    assert out.exit_code == ExitCode.INTERRUPTED == 130
    assert out.stderr.strip().splitlines()[-1].endswith("interrupted") and "Traceback" not in out.stderr
    assert not (tmp_path / "cache" / "xlarun").exists()


def test_130_python_m_xlarun_interrupted_while_it_loads(tmp_path):
    """``python -m xlarun`` stopped by a Ctrl-C while its modules load exited 1 with a traceback (Python's
    exit for an uncaught KeyboardInterrupt under -m); now 130 like every interrupted command."""
    stub = tmp_path / "stub"
    (stub / "xlarun").mkdir(parents=True)
    (stub / "xlarun" / "cli.py").write_text("raise KeyboardInterrupt\n")  # the Ctrl-C, as the import sees it
    (stub / "xlarun" / "__init__.py").write_text("")
    package = Path(__import__("xlarun").__file__).parent
    for real in ("__main__.py", "interrupts.py", "pydantic_plugins.py"):  # what the program loads before the CLI
        (stub / "xlarun" / real).write_text((package / real).read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "xlarun", "runs"],
        cwd=stub,
        env=dict(os.environ, PYTHONPATH=str(stub)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_124_the_job_ran_past_its_timeout(cli, tmp_path):
    store = tmp_path / "store"
    spec = write_spec(tmp_path, "name: slow\nscript: job.py\ntimeout: 1\n", WRITES_A_DUMP + "import time\ntime.sleep(60)\n")
    started = time.monotonic()
    out = cli("capture", spec, "--store", store, "-q")
    assert out.exit_code == ExitCode.TIMEOUT == 124
    assert time.monotonic() - started < 30
    [run] = _runs(cli, store)
    assert run["status"] == "timed_out" and run["n_modules"] == 1  # what it dumped before is archived
    assert "ran past its timeout" in out.stderr


def _capture_in_a_process(tmp_path: Path, env: dict | None = None, job: str = WRITES_A_DUMP) -> tuple[subprocess.Popen, Path]:
    spec = write_spec(tmp_path, "name: waits\nscript: job.py\n", job)
    store = tmp_path / "store"
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "capture", str(spec), "--store", str(store), "-q"],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_signals_as_in_a_terminal,
    )
    return proc, store


def _signals_as_in_a_terminal() -> None:
    # the suite may run under nohup or as a background job, where SIGHUP or SIGINT are ignored and children inherit that
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code", [(signal.SIGHUP, ExitCode.HANGUP), (signal.SIGINT, ExitCode.INTERRUPTED), (signal.SIGTERM, ExitCode.TERMINATED)]
)
def test_129_130_143_a_stop_signal_archives_what_the_job_wrote(cli, tmp_path, sig, code):
    ready = tmp_path / "ready"
    proc, store = _capture_in_a_process(
        tmp_path, job=WRITES_A_DUMP + f"import pathlib, time\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(120)\n"
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == code == 128 + sig, err
    [run] = _runs(cli, store)
    assert run["status"] == "interrupted" and run["n_modules"] == 1, err
    assert signal.Signals(sig).name in err


@pytest.mark.slow
def test_137_xlarun_killed_leaves_nothing_half_written_and_recover_keeps_the_run(cli, tmp_path):
    # XLARUN_KILL_AT: the test hook that SIGKILLs xlarun between two steps of the archive (here: a pack just written)
    proc, store = _capture_in_a_process(tmp_path, env={"XLARUN_KILL_AT": "pack-written"})
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL  # a shell reports 128 + 9 = 137
    assert _runs(cli, store) == []  # no half-written run is visible
    recovered = cli("recover", "--store", store)
    assert recovered.exit_code == 0, recovered.stderr
    [run] = _runs(cli, store)
    assert run["status"] == "incomplete" and run["n_modules"] == 1
    assert cli("cat", DUMP_NAME, "--store", store).stdout == hlo_module("jit_f")
