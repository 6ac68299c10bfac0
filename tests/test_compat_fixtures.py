"""Dumps from every supported framework version (tests/fixtures/compat/<key>/), indexed as a capture indexes them.

`scripts/compat.py fixtures` wrote each folder from a real capture of the bundled example in that version's venv:
``names.txt`` (every file the capture wrote), the stage dumps (``dumps/`` or ``dumps.tar.gz``), and ``expected.json``,
whose instruction counts come from XLA's own parser (the version's jaxlib for jax; jaxlib 0.10.2's for TF and
PyTorch/XLA), not from xlarun, so a misreading cannot become the expected value.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from xlarun.hlo.names import decode_dump_name
from xlarun.store.facade import LocalStore

FIXTURES = Path(__file__).parent / "fixtures" / "compat"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file()) if FIXTURES.is_dir() else []
# The ends CI tests for real must always have fixtures (scripts/compat.py ENDS).
ENDS = ("jax-0.4.30", "jax-0.7.2", "jax-0.12.0.1", "tf-2.16.2", "torch_xla-2.9.0")


def expected(key: str) -> dict:
    return json.loads((FIXTURES / key / "expected.json").read_text())


def stage_dumps(key: str) -> dict[str, bytes]:
    folder = FIXTURES / key
    if (folder / "dumps.tar.gz").is_file():
        with tarfile.open(folder / "dumps.tar.gz") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return {p.name: p.read_bytes() for p in sorted((folder / "dumps").iterdir())}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """key -> the modules of a run made from that version's dumps, in the index's rank order (each indexed once)."""
    cache: dict[str, list] = {}

    def modules_of(key: str) -> list:
        if key not in cache:
            store = LocalStore.open(tmp_path_factory.mktemp(key) / "store")
            run_id, staging = store.begin_run()
            for name, data in stage_dumps(key).items():
                (staging / "dump" / name).write_bytes(data)
            files = store.archiver(staging).finish()  # what capture does once the job ends
            manifest = {"name": f"compat-{key}", "status": "succeeded", "framework": expected(key)["framework"]}
            store.commit_run(run_id, staging, files, {"manifest.json": json.dumps(manifest)})
            store.ingest(run_id)
            cache[key] = store.index.modules(run_id)
        return cache[key]

    return modules_of


def test_the_ci_ends_have_fixtures():
    assert set(ENDS) <= set(VERSIONS)


@pytest.mark.parametrize("key", VERSIONS)
def test_the_main_module_is_ranked_first(key, indexed):
    modules = indexed(key)
    main = expected(key)["main_module"]
    first = modules[0]
    assert (first.module_id, first.name) == (main["module_id"], main["name"]), (
        f"{first.name} ranked first; parse errors: {[m.parse_error for m in modules if m.parse_error][:1]}"
    )


#: The versions whose text dumps carry JAX's stack-frame tables (FileNames, FunctionNames...): where a module's code
#: lives is told there; earlier JAX, TF and PyTorch/XLA print only the innermost user line, a call site included.
FRAME_TABLES = ("jax-0.8.3", "jax-0.9.2", "jax-0.10.2", "jax-0.11.2", "jax-0.12.0.1")


@pytest.mark.parametrize("key", VERSIONS)
def test_the_users_modules_are_told_from_the_frameworks(key, indexed):
    """jax_mlp.py's jitted functions are the user's; jax.random's modules, called from its main(), are not."""
    told = {m.name: m.own_code for m in indexed(key) if m.own_code is not None}
    if key not in FRAME_TABLES:
        assert told == {}
        return
    assert {name for name, own in told.items() if own} == {"jit_init_params", "jit_train_step", "jit_accuracy"}
    assert {"jit__threefry_seed", "jit__randint", "jit__one_hot"} <= {name for name, own in told.items() if not own}
    ranks = [m.own_code for m in indexed(key)]
    assert ranks == sorted(ranks, key=lambda own: {True: 0, None: 1, False: 2}[own])  # yours, untold, framework


@pytest.mark.parametrize("key", VERSIONS)
def test_instruction_counts_are_xlas(key, indexed):
    got = {m.module_id: (m.name, m.instr_before, m.instr_after) for m in indexed(key)}
    want = {m["module_id"]: (m["name"], m["instr_before"], m["instr_after"]) for m in expected(key)["modules"]}
    wrong = {mid: {"xlarun": got.get(mid), "xla": want[mid]} for mid in want if got.get(mid) != want[mid]}
    errors = [m.parse_error for m in indexed(key) if m.parse_error]
    assert not wrong, (
        f"{len(wrong)}/{len(want)} modules differ from XLA's count ({expected(key)['counted_by']}): {wrong}; first parse error: {errors[:1]}"
    )


@pytest.mark.parametrize("key", VERSIONS)
def test_no_file_the_capture_wrote_is_unknown(key):
    names = (FIXTURES / key / "names.txt").read_text().split()
    unknown = [n for n in names if decode_dump_name(n).kind == "unknown"]
    assert not unknown, f"{len(unknown)} of {len(names)} names undecoded, e.g. {unknown[:3]}"
