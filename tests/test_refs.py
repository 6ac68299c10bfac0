"""REF resolution over a synthetic store: run ids, unique prefixes, 'latest', spec names, module ids, names,
prefixes, substrings and dump file names, RUN/MODULE, the newest run that has a module, ambiguous REFs (one
error listing candidates a user can paste back), batches, and the counterpart a module is compared with."""

from __future__ import annotations

import json

import pytest

from xlarun.errors import ExitCode, InputError, RefError
from xlarun.navigate.refs import MAX_CANDIDATES, counterpart_module, resolve_batch, resolve_module, resolve_run
from xlarun.store.facade import LocalStore

from .synthetic_store import archive_run, module_dumps

# two runs of spec 'mlp' whose ids share a prefix, then a batch of two sweep cells, then a batch of one
MLP_OLD, MLP_NEW = "20261102-080000-1a2b", "20261102-080000-1a3c"
SWEEP_1, SWEEP_2, LATEST = "20261103-120000-9f00", "20261103-120001-9f01", "20261104-070000-0c0d"
BATCH_1, BATCH_2 = "b20261103-120000-ab12", "b20261104-070000-cd34"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> LocalStore:
    store = LocalStore.open(tmp_path_factory.mktemp("refs") / "store")
    mlp = {
        **module_dumps(1, "jit_init_params", dots=0, adds=20),
        **module_dumps(4, "jit_accuracy"),
        **module_dumps(7, "jit_train_step", dots=3),
    }
    archive_run(
        store, {**mlp, **module_dumps(7, "jit_train_step", dots=3, passes=4), **module_dumps(9, "jit_old_only")}, run_id=MLP_OLD
    )
    archive_run(store, {**mlp, **module_dumps(12, "jit_f"), **module_dumps(13, "jit_f_grad", dots=2)}, run_id=MLP_NEW)
    sweep_1 = {**module_dumps(2, "jit_sweep"), **module_dumps(5, "jit_accuracy")}  # the same function, another id
    archive_run(store, sweep_1, run_id=SWEEP_1, name="sweep", batch_id=BATCH_1, matrix={"lr": 0.1})
    archive_run(store, module_dumps(2, "jit_sweep"), run_id=SWEEP_2, name="sweep", batch_id=BATCH_1, matrix={"lr": 0.01})
    archive_run(store, module_dumps(2, "jit_sweep"), run_id=LATEST, name="sweep", batch_id=BATCH_2, matrix={"lr": 1.0})
    return store


def _where(module) -> tuple[str, int, str | None]:
    return module.run_id, module.module_id, module.name


# --- runs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", [None, "", "latest", "last", "@"])
def test_no_run_ref_or_latest_is_the_newest_run(store, ref):
    assert resolve_run(store.index, ref).run_id == LATEST


@pytest.mark.parametrize(
    ("ref", "run_id"),
    [
        (MLP_OLD, MLP_OLD),
        ("20261103-120001", SWEEP_2),  # a unique prefix
        ("20261104", LATEST),
        ("mlp", MLP_NEW),  # a spec name: its latest run
        ("sweep", LATEST),
    ],
)
def test_a_run_ref_is_an_id_a_unique_prefix_or_a_spec_name(store, ref, run_id):
    assert resolve_run(store.index, ref).run_id == run_id


@pytest.mark.parametrize(("ref", "run_id"), [(None, LATEST), (MLP_OLD, MLP_OLD), ("20261103-120001", SWEEP_2), ("mlp", MLP_NEW)])
def test_the_common_run_refs_never_read_every_run(store, ref, run_id, monkeypatch):
    """At 100,000 runs, reading every run row cost `modules`, `show` and `cat` 2 s each; latest, an id, a
    unique prefix and a spec name are answered by indexed reads (the module REF's newest run too)."""

    def every_run(*args, **kwargs):
        if not kwargs.get("name"):
            raise AssertionError("index.runs() read every run")
        return type(store.index).runs(store.index, *args, **kwargs)

    monkeypatch.setattr(store.index, "runs", every_run)
    assert resolve_run(store.index, ref).run_id == run_id
    assert _where(resolve_module(store.index, "jit_sweep")) == (LATEST, 2, "jit_sweep")


def test_an_ambiguous_run_prefix_lists_the_runs_it_matches(store):
    with pytest.raises(RefError) as error:
        resolve_run(store.index, "20261102-080000-1a")
    assert error.value.message == f"run REF '20261102-080000-1a' is ambiguous: {MLP_OLD}, {MLP_NEW}"
    assert error.value.hint == "type more of the run id" and error.value.exit_code == ExitCode.USAGE


def test_an_unknown_run_ref_points_at_xlarun_runs(store):
    with pytest.raises(RefError, match="no run matches 'nope'") as error:
        resolve_run(store.index, "nope")
    assert "xlarun runs" in error.value.hint


def test_an_empty_store_says_to_capture_first(tmp_path):
    index = LocalStore.open(tmp_path / "empty").index
    for resolve in (lambda: resolve_run(index, "latest"), lambda: resolve_module(index, "jit_f")):
        with pytest.raises(RefError, match="the store has no runs yet") as error:
            resolve()
        assert "xlarun capture" in error.value.hint


def test_a_long_candidate_list_is_cut_short(tmp_path):
    store = LocalStore.open(tmp_path / "many")
    ids = [archive_run(store, {}, run_id=f"20261105-1000{i:02d}-aaaa") for i in range(MAX_CANDIDATES + 3)]
    with pytest.raises(RefError) as error:
        resolve_run(store.index, "20261105")
    assert error.value.message.endswith(f"{', '.join(ids[:MAX_CANDIDATES])} (and 3 more)")


# --- modules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        "7",
        "module_0007",
        "module_0007.jit_train_step",
        "module_0007.jit_train",  # id, and id with the name or its prefix
        "jit_train_step",
        "jit_train",
        "train_step",  # name, unique prefix, substring
        "module_0007.jit_train_step.cpu_after_optimizations.txt",  # a dump file name, as `xlarun files` lists it
        f"{MLP_NEW}/module_0007",
        f"{MLP_NEW[:19]}/7",
        "mlp/jit_train_step",  # RUN/MODULE, the run a REF of its own
        "  jit_train_step  ",
    ],
)
def test_every_module_ref_form_names_the_same_module(store, ref):
    # the latest run (a sweep cell) has no such module: the newest run that has one is searched
    assert _where(resolve_module(store.index, ref)) == (MLP_NEW, 7, "jit_train_step")


def test_a_module_only_in_an_older_run_is_found_there(store):
    assert _where(resolve_module(store.index, "jit_old_only")) == (MLP_OLD, 9, "jit_old_only")
    assert _where(resolve_module(store.index, "module_0007.jit_train_step.0003.cpu-pipeline.after_fusion.before_cse.txt")) == (
        MLP_NEW,
        7,
        "jit_train_step",
    )


def test_a_module_in_the_latest_run_wins_over_older_runs(store):
    assert _where(resolve_module(store.index, "jit_sweep")) == (LATEST, 2, "jit_sweep")
    assert _where(resolve_module(store.index, "2")) == (LATEST, 2, "jit_sweep")


def test_a_run_given_apart_or_in_the_ref_limits_the_search_to_it(store):
    assert _where(resolve_module(store.index, "jit_train_step", run=MLP_OLD)) == (MLP_OLD, 7, "jit_train_step")
    assert _where(resolve_module(store.index, f"{MLP_OLD}/7")) == (MLP_OLD, 7, "jit_train_step")
    assert _where(resolve_module(store.index, "2", run=SWEEP_1)) == (SWEEP_1, 2, "jit_sweep")
    with pytest.raises(RefError) as error:  # no fall-back to another run when the user named one
        resolve_module(store.index, "jit_old_only", run=MLP_NEW)
    assert error.value.message == f"no module matches 'jit_old_only' in run {MLP_NEW}"
    assert "xlarun modules" in error.value.hint


def test_an_exact_name_wins_over_longer_names_it_prefixes(store):
    assert _where(resolve_module(store.index, "jit_f")) == (MLP_NEW, 12, "jit_f")
    assert _where(resolve_module(store.index, "jit_f_")) == (MLP_NEW, 13, "jit_f_grad")
    assert _where(resolve_module(store.index, "module_0013")) == (MLP_NEW, 13, "jit_f_grad")


def test_an_ambiguous_module_ref_lists_refs_that_each_name_one_module(store):
    with pytest.raises(RefError) as error:
        resolve_module(store.index, "jit_", run=MLP_NEW)
    message = error.value.message
    assert message.startswith("module REF 'jit_' is ambiguous: ") and error.value.hint == "use one of those RUN/module_NNNN forms"
    assert error.value.exit_code == ExitCode.USAGE
    listed = message.split("ambiguous: ", 1)[1].split(", ")
    # main program first, as `xlarun modules` lists them; each candidate pasted back names exactly its module
    assert listed == [
        f"{MLP_NEW}/module_0007 (jit_train_step)",
        f"{MLP_NEW}/module_0013 (jit_f_grad)",
        f"{MLP_NEW}/module_0004 (jit_accuracy)",
        f"{MLP_NEW}/module_0012 (jit_f)",
        f"{MLP_NEW}/module_0001 (jit_init_params)",
    ]
    for candidate in listed:
        ref, name = candidate.split(" ")
        assert resolve_module(store.index, ref).name == name.strip("()")


def test_an_unknown_or_empty_module_ref_says_what_to_type(store):
    with pytest.raises(RefError) as error:
        resolve_module(store.index, "no_such_module")
    assert error.value.message == "no module matches 'no_such_module' in any run" and "xlarun modules" in error.value.hint
    with pytest.raises(RefError, match="empty module REF") as empty:
        resolve_module(store.index, "  ")
    assert "module_0006" in empty.value.hint
    with pytest.raises(RefError, match="no run matches 'nope'"):
        resolve_module(store.index, "nope/7")


def test_prefer_picks_the_newest_run_whose_module_passes(store):
    # bisect wants the module captured pass by pass: only the older mlp run has pass dumps
    passes = resolve_module(store.index, "jit_train_step", prefer=lambda m: m.n_pass_dumps > 0)
    assert _where(passes) == (MLP_OLD, 7, "jit_train_step") and len(passes.passes) == 4
    # none passes: as without prefer
    assert _where(resolve_module(store.index, "jit_train_step", prefer=lambda m: False)) == (MLP_NEW, 7, "jit_train_step")


def test_a_dump_file_name_whose_module_name_differs_names_no_module(store):
    # in MLP_NEW, module 7 is jit_train_step: a file name of module 7 named jit_accuracy is not it
    with pytest.raises(RefError):
        resolve_module(store.index, "module_0007.jit_accuracy.before_optimizations.txt", run=MLP_NEW)


# --- batches and counterparts --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "batch"), [("latest", BATCH_2), (BATCH_1, BATCH_1), ("b20261103", BATCH_1), ("b20261104-07", BATCH_2)]
)
def test_a_batch_ref_is_an_id_a_unique_prefix_or_latest(store, ref, batch):
    assert resolve_batch(store.index, ref) == batch


def test_an_ambiguous_unknown_or_absent_batch_says_what_to_type(store, tmp_path):
    with pytest.raises(RefError) as ambiguous:
        resolve_batch(store.index, "b2026110")
    assert (
        ambiguous.value.message == f"batch REF 'b2026110' is ambiguous: {BATCH_1}, {BATCH_2}"
        and ambiguous.value.hint == "type more of the batch id"
    )
    with pytest.raises(RefError, match="no batch matches 'b1999'") as unknown:
        resolve_batch(store.index, "b1999")
    assert "xlarun runs" in unknown.value.hint
    no_batches = LocalStore.open(tmp_path / "plain")
    archive_run(no_batches, module_dumps(1, "jit_f"), run_id=MLP_OLD)
    with pytest.raises(RefError, match="the store has no batch yet") as none:
        resolve_batch(no_batches.index, "latest")
    assert "xlarun batch" in none.value.hint


def test_a_counterpart_is_a_module_ref_or_a_runs_module_of_the_same_name(store):
    index = store.index
    accuracy = resolve_module(index, "jit_accuracy", run=MLP_NEW)  # module 4 there
    assert _where(counterpart_module(index, accuracy, SWEEP_1)) == (SWEEP_1, 5, "jit_accuracy")  # by name, whatever its id
    assert _where(counterpart_module(index, accuracy, "20261103-120000")) == (SWEEP_1, 5, "jit_accuracy")  # a run prefix
    assert _where(counterpart_module(index, accuracy, f"{MLP_OLD}/module_0004")) == (MLP_OLD, 4, "jit_accuracy")
    assert _where(counterpart_module(index, accuracy, "jit_train_step")) == (MLP_NEW, 7, "jit_train_step")  # any module REF


def test_a_counterpart_that_is_missing_or_the_module_itself_is_refused(store):
    index = store.index
    accuracy = resolve_module(index, "jit_accuracy", run=MLP_NEW)
    with pytest.raises(InputError) as missing:
        counterpart_module(index, accuracy, SWEEP_2)
    assert missing.value.message == f"run {SWEEP_2} has no module named jit_accuracy" and "RUN/module_NNNN" in missing.value.hint
    with pytest.raises(InputError, match="both REFs name the same module"):
        counterpart_module(index, accuracy, f"{MLP_NEW}/4")


# --- through the CLI: what a user types, what a user reads -----------------------------------


def test_show_resolves_what_the_library_resolves(store, cli):
    shown = json.loads(cli("show", "train_step", "--store", store.root, "--json").stdout)
    assert (shown["run_id"], shown["module_id"]) == (MLP_NEW, 7)
    out = cli("show", "jit_", "--store", store.root, "--run", MLP_NEW)
    assert out.exit_code == ExitCode.USAGE
    assert (
        f"module REF 'jit_' is ambiguous: {MLP_NEW}/module_0007 (jit_train_step)" in out.stderr and "Traceback" not in out.stderr
    )


@pytest.mark.parametrize(
    ("ref", "runs"),
    [
        ("latest", [LATEST]),
        (BATCH_1, [SWEEP_1, SWEEP_2]),
        ("b20261103", [SWEEP_1, SWEEP_2]),  # a unique prefix
        ("b20261104-07", [LATEST]),
    ],
)
def test_runs_of_a_batch_ref(store, cli, ref, runs):
    out = cli("runs", "--batch", ref, "--store", store.root, "--json")
    assert out.exit_code == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [r["run_id"] for r in listed] == runs
    assert [r["matrix"] for r in listed] == [{"lr": 0.1}, {"lr": 0.01}] if len(runs) == 2 else [{"lr": 1.0}]


def test_an_ambiguous_or_unknown_batch_ref_is_a_usage_error_of_runs(store, cli):
    ambiguous = cli("runs", "--batch", "b2026110", "--store", store.root)
    assert ambiguous.exit_code == ExitCode.USAGE
    assert f"batch REF 'b2026110' is ambiguous: {BATCH_1}, {BATCH_2}" in ambiguous.stderr
    unknown = cli("runs", "--batch", "b1999", "--store", store.root)
    assert unknown.exit_code == ExitCode.USAGE and "no batch matches 'b1999'" in unknown.stderr


def test_a_bare_name_other_runs_also_have_says_which_run_it_took(store, cli, capsys):
    assert _where(resolve_module(store.index, "jit_sweep")) == (LATEST, 2, "jit_sweep")
    said = capsys.readouterr().err.strip()
    assert said == (
        f"note: 'jit_sweep' taken from run {LATEST} (module_0002.jit_sweep), the newest that has it; 2 other run(s) have "
        f"a module named so (newest {SWEEP_2}): name one as RUN/jit_sweep"
    )
    for quiet in (("jit_sweep", LATEST), ("jit_old_only", None), ("2", None)):  # a run named, one run only, an id
        resolve_module(store.index, quiet[0], run=quiet[1])
        assert capsys.readouterr().err == ""
    shown = cli("show", "sweep", "--store", store.root, "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["notes"] == [
        said.removeprefix("note: ").replace("'jit_sweep'", "'sweep'").replace("RUN/jit_sweep", "RUN/sweep")
    ]
    assert said.replace("jit_sweep'", "sweep'").split("taken")[0] in "note: " + shown.stderr


def test_a_run_id_in_the_middle_of_a_big_store_reads_no_run_after_it(tmp_path):
    """A REF that is a run id (or its prefix) finds its runs by the index's key, bounded at both ends: at 100,000
    runs, a whole id in the middle read the 50,000 rows after it (17 ms of `show`'s CPU)."""
    from bench.scale import grow, template_store

    root, template = template_store(tmp_path)
    ids = grow(root, template, 1000)
    store = LocalStore.open(root, create=False)
    conn = store.index.conn
    steps = []
    conn.set_progress_handler(lambda: steps.append(1) and 0, 100)  # once per 100 SQLite instructions

    def cost(ref: str) -> int:
        steps.clear()
        resolve_run(store.index, ref)
        return len(steps)

    first, middle = cost(ids[0]), cost(ids[500])
    assert resolve_run(store.index, ids[500]).run_id == ids[500]
    assert resolve_run(store.index, ids[500][:15]).run_id == ids[500]  # a prefix of one second names one run
    assert middle <= first + 5, (first, middle)  # was ~500 rows' worth more than the first run's
    conn.set_progress_handler(None, 0)
    store.close()
