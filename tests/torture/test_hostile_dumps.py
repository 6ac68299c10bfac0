"""Hostile dump folders (tests/hostile_dumps.py, 20+ kinds, made by the job as it runs): every one is
captured into a committed run; each file is archived with its exact bytes or listed with why not."""

from __future__ import annotations

import json
import time

import pytest

from xlarun.capture.launch import capture
from xlarun.store.facade import LocalStore
from xlarun.store.rows import RunStatus

from ..conftest import write_spec
from ..hostile_dumps import MAKERS, ROOT, expectation
from .support import HOSTILE_JOB, assert_sound

# Marked per test: torture: kills, signals, damaged stores, hostile inputs


@pytest.mark.slow
def test_every_hostile_dump_folder_becomes_a_committed_run(tmp_path, figures, cli):
    store = LocalStore.open(tmp_path / "store")
    lost = crashes = hangs = checked = 0
    slowest = (0.0, "")
    for kind in sorted(MAKERS):
        spec = write_spec(tmp_path / kind, f"name: {kind}\nscript: job.py\nargs: [{kind}]\ntimeout: 60s\n", HOSTILE_JOB)
        started = time.monotonic()
        try:
            result = capture(spec, store)
        except Exception as exc:
            crashes += 1
            print(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        took = time.monotonic() - started
        slowest = max(slowest, (round(took, 2), kind))
        if result.status == RunStatus.TIMED_OUT:
            hangs += 1
        if result.run_id not in store.run_ids():
            lost += 1
            continue
        assert result.status == RunStatus.SUCCEEDED, (kind, result.warnings, store.read_log(result.run_id, "stderr")[-2000:])
        expect = expectation(kind)
        stored = {f.path: f for f in store.stored_files(result.run_id)}
        for name, data in expect.archived.items():
            assert name in stored, (kind, name, sorted(stored)[:20])
            if data is not None:
                assert store.read_file(result.run_id, name) == data, (kind, name)
            checked += 1
        assert len(stored) >= expect.at_least
        notes = {n["path"]: n for n in store.manifest(result.run_id)["file_notes"]}
        for name, why in expect.skipped.items():
            assert name in notes and not notes[name]["archived"] and why in notes[name]["why"], (kind, name, notes)
            assert name not in stored
            checked += 1
        for name, why in expect.caveats.items():
            assert notes[name]["archived"] and why in notes[name]["why"], (kind, name, notes)
        if expect.skipped:  # the user is told, in the capture's warnings and in `xlarun files`
            assert any("not archived" in w for w in result.warnings), result.warnings
            listed = cli("files", result.run_id, "--store", store.root)
            assert listed.exit_code == 0 and all(f"NOT ARCHIVED  {name}" in listed.stdout for name in expect.skipped), (
                listed.stdout
            )
            as_json = json.loads(cli("files", result.run_id, "--store", store.root, "--json").stdout)
            assert {n["path"] for n in as_json["not_archived"]} >= set(expect.skipped)
    store.close()
    state = assert_sound(tmp_path / "store")
    figures(
        folders=len(MAKERS),
        runs=len(state.runs),
        runs_lost=lost,
        exit4_crashes=crashes,
        hangs=hangs,
        paths_checked=checked,
        slowest_s=slowest[0],
        slowest=slowest[1],
        as_root=ROOT,
    )
    assert len(MAKERS) >= 20
    assert (lost, crashes, hangs) == (0, 0, 0)
    assert len(state.runs) == len(MAKERS)


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b", "\x7f"])
def test_bytes_dot_cannot_take_in_an_hlo_name_are_drawn_escaped(tmp_path, cli, char, figures):
    """A NUL (or another control byte) in an instruction's name and op_name reaches dot escaped as \\xNN, never as a
    byte that ends dot's string ("syntax error", exit 3)."""
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("graphviz is not installed (scripts/setup.sh installs it)")
    name = f"add{char}evil"
    text = (
        "HloModule hostile\n\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
        f'  ROOT %{name} = f32[4]{{0}} add(f32[4]{{0}} %p, f32[4]{{0}} %p), metadata={{op_name="jit(f)/{char}x"}}\n}}\n'
    )
    module = tmp_path / "module_0000.hostile.before_optimizations.txt"
    module.write_bytes(text.encode())
    out = cli("render", module, "-f", "svg", "-o", tmp_path / "h.svg")
    figures(char=f"\\x{ord(char):02x}", exit_code=out.exit_code)
    assert out.exit_code == 0, out.stderr
    svg = (tmp_path / "h.svg").read_text()
    assert f"add\\x{ord(char):02x}evil" in svg and char not in svg
