"""capture and donated arguments with snapshots: warned before the job, explained after its abort.

jaxlib before 0.10 aborts a job (SIGABRT) writing a snapshot of a call whose arguments are donated; donation is only
known once the job compiles, so the warning goes by the job's jaxlib (read by the pre-run flag probe).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tests.compat_support import REPO, require_compat
from xlarun.capture.flags import donation_abort_cause, snapshot_donation_warning, snapshots_abort_on_donation
from xlarun.capture.known_flags import KnownXlaFlags
from xlarun.capture.spec import RunSpec

PROGRAM = REPO / "tests" / "fixtures" / "hlo" / "snapshots" / "donated_step.py"
ABORT_LINE = (
    "[external/com_google_absl/absl/status/statusor.cc : 86] RAW: Attempting to fetch value instead of handling error "
    "INVALID_ARGUMENT: CopyToHostAsync() called on deleted or donated buffer\n"
)


@pytest.mark.parametrize(
    ("version", "aborts"),
    [("0.4.30", True), ("0.7.2", True), ("0.8.0", True), ("0.9.2", True), ("0.10.2", False), ("0.12.0.1", False), ("1.0", False)],
)
def test_which_jaxlib_aborts_on_snapshots_of_donated_arguments(version, aborts):
    assert snapshots_abort_on_donation(version) is aborts


def _spec(snapshots: bool) -> RunSpec:
    return RunSpec.model_validate({"name": "s", "script": "s.py", "dump": {"snapshots": snapshots}})


def test_the_warning_goes_by_snapshots_and_the_jobs_jaxlib():
    old, new = (KnownXlaFlags(f"jaxlib {v}", (), frozenset()) for v in ("0.4.30", "0.10.2"))
    warning = snapshot_donation_warning(_spec(True), old)
    assert warning and "jaxlib 0.4.30" in warning and "SIGABRT" in warning and "dump.snapshots off" in warning
    assert snapshot_donation_warning(_spec(False), old) is None
    assert snapshot_donation_warning(_spec(True), new) is None
    assert snapshot_donation_warning(_spec(True), None) is None  # not known (a container job): no guess
    assert snapshot_donation_warning(_spec(True), KnownXlaFlags("tensorflow 2.16.2", (), frozenset())) is None


def test_the_post_mortem_needs_both_the_signal_and_the_log_line():
    cause = donation_abort_cause(-6, "some output\n" + ABORT_LINE)
    assert cause and cause.startswith("the job was killed by SIGABRT") and "donated" in cause
    assert donation_abort_cause(134, ABORT_LINE)  # a shell's report of the same signal
    assert donation_abort_cause(1, ABORT_LINE) is None
    assert donation_abort_cause(-6, "F0000 something else aborted\n") is None


@pytest.mark.slow
def test_a_donated_step_with_snapshots_on_jaxlib_0_4_30_is_warned_and_explained(tmp_path):
    python = require_compat("jax-0.4.30")
    spec = {"name": "donated", "script": str(PROGRAM), "python": str(python), "dump": {"snapshots": True}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), COLUMNS="400")
    proc = subprocess.run(
        [sys.executable, "-m", "xlarun", "capture", str(tmp_path / "spec.yaml"), "--store", str(tmp_path / "store")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    warned = out.index("dump.snapshots with jaxlib 0.4.30")
    assert warned < out.index("called on deleted or donated buffer")  # before the job's own abort line
    assert "the job was killed by SIGABRT: XLA aborted writing a snapshot" in out
    assert "the job was killed by SIGABRT (signal 6)" in out and "exited with code -6" not in out  # the error names it too


@pytest.mark.slow
def test_xlas_donated_snapshot_lines_are_kept_off_the_console_and_in_the_logs(cli, tmp_path):
    pytest.importorskip("jax")
    from tests.conftest import write_spec

    spec = write_spec(tmp_path, "name: donated\nscript: job.py\nframework: jax\ndump:\n  snapshots: true\n", PROGRAM.read_text())
    out = cli("capture", spec, "--store", tmp_path / "store")
    assert out.exit_code == 0, out.output
    run_id = next(line.split("run ")[1].split()[0] for line in out.output.splitlines() if line.startswith("succeeded run "))
    logged = (tmp_path / "store" / "runs" / run_id / "stderr.log").read_text()
    hidden = logged.count("ToLiteral() called on deleted or donated buffer")
    assert hidden >= 1  # XLA said it, once per donated argument of a snapshot, and the run's log keeps it
    assert logged.count("Failed to get literal for argument") == hidden
    assert "Failed to get literal for argument" not in out.output  # XLA's line itself is not on the console
    assert f'{hidden} line(s) of XLA\'s "ToLiteral() called on deleted or donated buffer"' in out.stderr
    assert "kept in the run's stderr.log, not shown" in out.stderr
