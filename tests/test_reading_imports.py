"""What each reading command may import: a heavy import creeping into `runs`, `modules`, `show`, `cat`, `find`,
`explain` or `files` (numpy, jax, the replay or bundle code, pydantic models, rich off a terminal, another command's
module) fails here, in the fast tier."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: never needed to read a store: each costs from 40 ms (pydantic) to seconds (jax) of every keystroke
FORBIDDEN = {
    "numpy", "jax", "jaxlib", "ml_dtypes", "pydantic", "yaml", "docker", "requests", "jinja2", "markupsafe", "ray",
    "graphviz", "xlarun.replay", "xlarun.share", "xlarun.bisect", "xlarun.render", "xlarun.report", "xlarun.capture",
    "xlarun.executors", "xlarun.see", "xlarun.batch", "xlarun.jax",
    # what writing needs (the archiver's thread pools and logging, ingest, random ids), and rich: off a terminal its
    # output is written without it (console.py), which saved more than the rest of `runs` cost at 10,000 runs
    "rich", "typer.rich_utils", "xlarun.store.archive", "xlarun.store.ingest", "xlarun.store.summaries", "concurrent",
    "logging", "secrets",
    # the HLO text reader: decoding a dump's name (xlarun.hlo.names) loads none of the HLO package's readers
    "xlarun.hlo.text", "xlarun.hlo.scan", "xlarun.hlo.model", "xlarun.hlo.proto", "gzip",
}  # fmt: skip

#: the command modules each reading command may load: its own (cli.COMMANDS builds one command, not every one)
COMMAND_MODULES = {"completion", "navigate"}

CHILD = """
import contextlib, json, os, sys
from xlarun.cli import main
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

MODULE = """HloModule jit_{name}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}

ENTRY main.3 {{
  Arg_0.1 = f32[4]{{0}} parameter(0)
  ROOT add.2 = f32[4]{{0}} add(Arg_0.1, Arg_0.1)
}}
"""


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    import xlarun

    root = tmp_path_factory.mktemp("reading")
    dump = root / "dump"
    dump.mkdir()
    (dump / "module_0000.jit_f.before_optimizations.txt").write_text(MODULE.format(name="f"))
    store = xlarun.open_store(root / "store")
    store.import_dump(dump, name="small")
    store.close()
    return str(root / "store")


COMMANDS = {
    "runs": ["runs"],
    "modules": ["modules"],
    "show": ["show", "jit_f"],
    "cat": ["cat", "jit_f"],
    "find": ["find", "add"],
    "files": ["files"],
    "explain": ["explain", "module_0000.jit_f.before_optimizations.txt", "module_0001.jit_g.cpu_after_optimizations.hlo.pb"],
}


def test_reading_commands_import_nothing_heavy(small_store):
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps([*argv, *(["--store", small_store] if name != "explain" else [])])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},  # rich's: it styles
        )
        for name, argv in COMMANDS.items()
    }
    heavy = {}
    for name, child in children.items():
        _, err = child.communicate(timeout=120)
        report = json.loads(err.strip().splitlines()[-1])
        assert report["code"] == 0, (name, err[-2000:])
        loaded = set(report["modules"])
        heavy[name] = sorted(m for m in FORBIDDEN if m in loaded or any(x.startswith(m + ".") for x in loaded))
        commands = {m.split(".")[2] for m in loaded if m.startswith("xlarun.commands.")} - {"share"}  # show: a bundle?
        heavy[name] += sorted(f"xlarun.commands.{m}" for m in commands - COMMAND_MODULES)
    assert heavy == {name: [] for name in COMMANDS}


#: what each reading command leaves out beyond FORBIDDEN, run as a user runs it (the console script): `html` is for
#: Jupyter, the compressor, the hash and the pack code for commands that read no blob, the remote's client and delta
#: codec for a store that mirrors none, the trace reader and profile code for commands that only read a time back,
#: the dump names' decoder for a REF that is a name, and importlib.metadata (a console script may load it to find
#: its entry point; xlarun's needs none)
NOT_FOR_READING = {
    "html", "importlib.metadata", "xlarun.store.remote", "xlarun.store.remote_delta", "xlarun.hlo.xspace",
    "xlarun.hlo.protowire", "xlarun.navigate.profile", "xlarun.hlo.names",
}  # fmt: skip
READS_NO_BLOB = {"zstandard", "blake3", "xlarun.store.packs", "xlarun.store.pack_format", "xlarun.store.buffers"}
LEFT_OUT = {
    "runs": NOT_FOR_READING | READS_NO_BLOB,
    "modules": NOT_FOR_READING | READS_NO_BLOB,
    "find": NOT_FOR_READING | READS_NO_BLOB,
    "show": NOT_FOR_READING,  # reads the module's text for its partitioning
    "cat": NOT_FOR_READING,
}


def _imported_by_console_script(argv: list[str]) -> set[str]:
    """Every module a run of the ``xlarun`` console script imports, from ``python -X importtime``'s report, less
    what the interpreter imports before any script runs (under a coverage run, its subprocess hook loads ``html``)."""
    script = Path(sys.executable).with_name("xlarun")
    return _importtime([str(script), *argv]) - _importtime(["-c", "pass"])


def _importtime(argv: list[str]) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("name", list(LEFT_OUT))
def test_reading_commands_run_as_a_user_runs_them_import_only_what_they_need(small_store, name):
    loaded = _imported_by_console_script([*COMMANDS[name], "--store", small_store])
    assert "xlarun.store.index" in loaded and "typer" in loaded  # the report is read: the command's own modules are in it
    assert sorted(m for m in LEFT_OUT[name] | FORBIDDEN if m in loaded) == []
