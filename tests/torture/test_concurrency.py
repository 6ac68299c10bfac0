"""8 captures at once into one store, with ``gc`` and ``rm`` running meanwhile: every capture becomes a
whole run, gc takes no blob a run (or a run being committed) needs, the store stays sound."""

from __future__ import annotations

import time

import pytest

from ..conftest import write_spec
from .support import REPLAY_JOB, assert_sound, xlarun

# Marked per test: torture: kills, signals, damaged stores, hostile inputs


@pytest.mark.slow
def test_eight_captures_with_gc_and_rm_on_one_store(tmp_path, real_dump, figures, soak):
    root = tmp_path / "store"
    rounds = 3 if soak else 1
    lost = crashes = hangs = gcs = 0
    made: set[str] = set()
    for _round in range(rounds):
        spec = write_spec(
            tmp_path / "spec", f"name: crowd\nscript: job.py\nargs: [{real_dump}, '0.01', /dev/null]\ntimeout: 300s\n", REPLAY_JOB
        )
        doomed = xlarun("capture", str(spec), "-q", store=root)
        assert doomed.wait(timeout=300) == 0
        [to_remove] = [r for r in assert_sound(root).runs if r not in made]
        captures = [xlarun("capture", str(spec), "-q", store=root) for _ in range(8)]
        remover = xlarun("rm", "--yes", to_remove, store=root)
        deadline = time.monotonic() + 300
        while any(p.poll() is None for p in [*captures, remover]) and time.monotonic() < deadline:
            gc = xlarun("gc", store=root)
            _out, err = gc.communicate(timeout=300)
            assert gc.returncode == 0, err
            gcs += 1
        for proc in [*captures, remover]:
            if proc.poll() is None:
                hangs += 1
                proc.kill()
            _out, err = proc.communicate()
            crashes += proc.returncode == 4
            assert proc.returncode == 0, err
        state = assert_sound(root)
        new = set(state.runs) - made
        lost += 8 - len(new)
        assert to_remove not in state.runs
        made |= new
    final = xlarun("gc", store=root)
    final.communicate(timeout=300)
    state = assert_sound(root)  # after a last gc with nothing running: every run still reads back
    figures(
        rounds=rounds,
        captures=8 * rounds,
        gc_runs=gcs + 1,
        runs=len(state.runs),
        runs_lost=lost,
        exit4_crashes=crashes,
        hangs=hangs,
    )
    assert (lost, crashes, hangs) == (0, 0, 0) and len(state.runs) == 8 * rounds
