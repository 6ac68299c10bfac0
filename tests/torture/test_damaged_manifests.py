"""A run's manifest.json or files.json damaged by hand, with the index there or gone: every main command ends with
a documented exit code and no traceback, the damaged run is named with the fix (`reindex` leaves it out and says
so, every other command keeps working), `rm` removes it, and every file of the other run reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .sweep import build_two_run_store, commands, copy_store, sweep
from .test_gc_liveness import read_back


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _edit_list(path: Path, change) -> None:
    entries = json.loads(path.read_text())
    change(entries)
    path.write_text(json.dumps(entries))


def _folder_instead(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _dupe(entries: list) -> None:
    entries[1]["path"] = entries[0]["path"]


def _huge(entries: list) -> None:
    entries[0]["size"] = 10**30


WRONG_TYPES = {"name": 5, "status": [], "files": "x", "started": {}, "tags": 3, "matrix": 7, "duration_s": "a", "exit_code": True}

#: name -> (the file damaged, what is done to it)
RUN_DAMAGE = {
    "manifest-not-utf8": ("manifest.json", lambda p: p.write_bytes(b"\xff\xfe{\x00}")),
    "manifest-array": ("manifest.json", lambda p: p.write_text("[1, 2, 3]")),
    "manifest-wrong-types": ("manifest.json", lambda p: p.write_text(json.dumps(WRONG_TYPES))),
    "manifest-100k-deep": ("manifest.json", lambda p: p.write_text(_deep(100_000))),
    "manifest-folder": ("manifest.json", _folder_instead),
    "files-duplicate-paths": ("files.json", lambda p: _edit_list(p, _dupe)),
    "files-size-10e30": ("files.json", lambda p: _edit_list(p, _huge)),
    "files-100k-deep": ("files.json", lambda p: p.write_text(_deep(100_000))),
    "files-object": ("files.json", lambda p: p.write_text('{"path": "x"}')),
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged-manifests") / "store"
    return root, build_two_run_store(root)


@pytest.mark.slow
@pytest.mark.parametrize("index", ["kept", "missing"])
@pytest.mark.parametrize("damage", sorted(RUN_DAMAGE))
def test_a_damaged_run_is_named_left_out_and_removable(damage, index, two_runs, tmp_path, cli, figures):
    source, (damaged, sound) = two_runs
    store = copy_store(source, tmp_path / "store")
    expected, _ = read_back(source)
    name, do = RUN_DAMAGE[damage]
    do(store / "runs" / damaged / name)
    if index == "missing":  # every command rebuilds it from runs/ on opening
        (store / "index.sqlite").unlink()
    swept = sweep(cli, store, commands(damaged, tmp_path / "export"))
    figures(
        damage=damage, index=index, tried=len(swept.codes) + len(swept.hangs), exit4=len(swept.crashes),
        hangs=len(swept.hangs), codes=swept.codes,
    )  # fmt: skip
    assert not swept.crashes and not swept.hangs, (swept.crashes, swept.hangs)
    assert swept.codes["check"] == 1 and damaged in swept.outputs["check"], swept.outputs["check"]
    reindexed = " ".join(swept.outputs["reindex"].split())  # one line, however the terminal wrapped it
    assert swept.codes["reindex"] == 1 and f"left out run {damaged}" in reindexed and name in reindexed, reindexed
    assert f"xlarun rm {damaged}" in reindexed  # the fix, named
    assert swept.codes["rm"] == 0 and not (store / "runs" / damaged).exists(), swept.outputs["rm"]
    for command in ("runs", "modules", "show", "cat", "find"):  # the sound run answers throughout
        assert swept.codes[command] == 0, (command, swept.outputs[command])
    assert sound in swept.outputs["runs"]
    after = cli("check", "--store", store)
    assert after.exit_code == 0 and "all sound" in after.stdout, after.output
    read, lost = read_back(store)
    assert lost == [] and read == expected - 16  # the damaged run's 16 files went with it, every other reads back


@pytest.mark.slow
def test_a_reconcile_names_a_damaged_run_in_a_note(two_runs, tmp_path, cli):
    source, (damaged, _sound) = two_runs
    store = copy_store(source, tmp_path / "store")
    (store / "runs" / damaged / "manifest.json").write_text("[]")
    (store / "index.sqlite").unlink()
    result = cli("runs", "--store", store)
    stderr = " ".join(result.stderr.split())
    assert result.exit_code == 0
    assert f"note: run {damaged} is left out of the index: its manifest.json is a JSON array, not an object" in stderr
    assert f"`xlarun rm {damaged}`" in stderr


@pytest.mark.slow
def test_a_killed_captures_deep_archived_list_is_a_refusal_not_a_recursion(two_runs, tmp_path, cli, figures):
    source, _runs = two_runs
    store = copy_store(source, tmp_path / "store")
    leftover = store / "staging" / "20200101-000000-dead"
    (leftover / "dump").mkdir(parents=True)
    (leftover / "owner.pid").write_text("999999999")
    (leftover / "archived.json").write_text('{"files": ' + _deep(50_000) + ', "notes": []}')
    expected, _ = read_back(store)
    swept = sweep(cli, store, [("recover",), ("gc",), ("check",)])
    figures(tried=3, exit4=len(swept.crashes), hangs=len(swept.hangs), codes=swept.codes)
    assert not swept.crashes and not swept.hangs, swept.crashes
    assert swept.codes["gc"] == 3 and "archived.json cannot be read or is damaged" in swept.outputs["gc"]
    assert leftover.is_dir()  # kept: what it lists is unknown
    assert read_back(store) == (expected, [])


AS_NOBODY = r"""
import os, sys
import pwd, sqlite3, json, shutil, errno, html, typer, rich.console, rich.markup, rich.text
import xlarun.cli, xlarun.commands.housekeeping, xlarun.store.facade, xlarun.store.gc, xlarun.store.integrity
import xlarun.store.index, xlarun.store.ingest, xlarun.store.summaries, xlarun.console, xlarun.errors
import xlarun.capture.recover, xlarun.store.store_json, xlarun.store.index_health
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
sys.exit(xlarun.cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_parts_of_a_shared_store_another_user_cannot_read_are_refusals(two_runs, cli, figures):
    """A run folder of mode 700 and a manifest of mode 600, the index gone: nobody's check, reindex, gc and recover
    end with exit 1 or 3 naming the permission and the user, never a crash; the owner reads every file back."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a part as nobody")
    import shutil

    source, (first, second) = two_runs
    folder = Path(tempfile.mkdtemp(prefix="xlarun-shared-", dir="/tmp"))  # pytest's tmp_path is root's alone
    try:
        store = copy_store(source, folder / "store")
        expected, _ = read_back(store)
        subprocess.run(["chmod", "-R", "a+rwX", str(folder)], check=True)
        (store / "runs" / first).chmod(0o700)
        (store / "runs" / second / "manifest.json").chmod(0o600)
        (store / "index.sqlite").unlink()
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
        codes, crashes = {}, []
        for command in ("check", "reindex", "gc", "recover", "runs"):
            done = subprocess.run(
                [sys.executable, "-c", AS_NOBODY, command, "--store", str(store)],
                capture_output=True, text=True, timeout=300, cwd="/tmp",
                env={**env, "HOME": "/tmp", "XDG_CACHE_HOME": str(folder / "cache"), "NO_COLOR": "1", "COLUMNS": "400"},
            )  # fmt: skip
            codes[command] = done.returncode
            if done.returncode not in (0, 1, 2, 3) or "Traceback" in done.stderr:
                crashes.append((command, done.returncode, done.stderr[-600:]))
            elif done.returncode:
                assert "permission denied to user nobody" in done.stderr + done.stdout, (command, done.stderr)
        figures(tried=len(codes), exit4=len(crashes), codes=codes)
        assert not crashes, crashes
        assert codes["gc"] == 3 and codes["check"] == 1 and codes["reindex"] == 1 and codes["runs"] == 0
        subprocess.run(["chmod", "-R", "u+rwX", str(store)], check=True)
        assert read_back(store) == (expected, [])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
