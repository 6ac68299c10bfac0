"""Post-mortems that tell the truth (capture/launch.py): a job killed by a signal is named with the signal, and a job
that fails before compiling anything shows the last line it wrote, in the error itself."""

from __future__ import annotations


def _spec(tmp_path, script: str) -> str:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "job.py").write_text(script)
    (folder / "spec.yaml").write_text("name: post-mortem\nscript: job.py\n")
    return str(folder / "spec.yaml")


def test_a_job_killed_by_a_signal_is_named_with_the_signal(tmp_path, cli):
    spec = _spec(tmp_path, "import sys, os\nprint('about to abort', file=sys.stderr, flush=True)\nos.abort()\n")
    out = cli("capture", spec, "-q", "--store", tmp_path / "store")
    assert out.exit_code == 1
    said = " ".join(out.stderr.split())
    assert "the job was killed by SIGABRT (signal 6)" in said and "about to abort" in said
    assert "exited with code -6" not in out.stderr


def test_a_job_that_cannot_import_what_it_needs_says_so_in_the_error(tmp_path, cli):
    out = cli("capture", _spec(tmp_path, "import jax_that_is_not_installed\n"), "-q", "--store", tmp_path / "store")
    assert out.exit_code == 1
    said = " ".join(out.stderr.split())  # as one line, whatever the terminal's width wrapped
    assert "ModuleNotFoundError: No module named 'jax_that_is_not_installed'" in said
    assert "no XLA dump" not in out.stderr  # the failure explains the empty run; 'nothing was compiled' misled
