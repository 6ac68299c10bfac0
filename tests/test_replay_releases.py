"""One module replayed on several jaxlib releases side by side (``xlarun replay REF --jaxlib``).

The module: tanh, exp, log1p, erf, gelu and sin over 4,096 points, captured with a snapshot by this venv's jax.
XLA's CPU approximations of these functions changed between releases: the outputs differ bit for bit between
jaxlib 0.4.30, 0.8.3 and 0.10.2 (by up to 3e-7), well within replay's default bounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.compat_support import require_compat

pytest.importorskip("jax")

SHARDED = Path(__file__).parent / "fixtures" / "hlo" / "sharded" / "module_0006.jit_sharded.before_optimizations.txt"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "transcendental" / "spec.yaml"  # docs/replay.md replays it too


@pytest.fixture(scope="module")
def transcendental_store(tmp_path_factory):
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    folder = tmp_path_factory.mktemp("releases")
    store = LocalStore.open(folder / "store", create=True)
    assert capture(EXAMPLE, store).ok
    return folder / "store"


@pytest.mark.slow
def test_three_releases_side_by_side_and_where_the_bits_change(cli, transcendental_store):
    for key in ("jax-0.4.30", "jax-0.8.3"):
        require_compat(key)
    result = cli(
        "replay", "transcendental", "--jaxlib", "0.4.30,0.8.3,current", "-n", "3", "--json", "--store", transcendental_store
    )
    data = json.loads(result.stdout)
    rows = data["releases"]
    assert [r["jaxlib"] for r in rows[:2]] == ["0.4.30", "0.8.3"] and rows[2]["release"] == "current"
    assert all(r["verdict"] == "match" and r["compile_s"] > 0 and r["median_run_s"] > 0 for r in rows)
    assert rows[2]["max_abs_error"] == 0  # the release that captured it reproduces its snapshot bit for bit
    # within replay's bounds everywhere, but not bit for bit: the functions' approximations changed between releases
    assert (result.exit_code, data["first_moved"]) == (0, None)
    assert rows[1]["identical_to_previous"] is False and rows[2]["identical_to_previous"] is False
    assert 0 < rows[2]["vs_first_abs"] < 1e-5
    strict = cli(
        "replay",
        "transcendental",
        "--jaxlib",
        "0.4.30,current",
        "--abs-error-bound",
        "0",
        "--rel-error-bound",
        "0",
        "--json",
        "--store",
        transcendental_store,
    )
    assert (strict.exit_code, json.loads(strict.stdout)["first_moved"]) == (1, "0.10.2")  # the release bisection's answer


@pytest.mark.slow
def test_a_dump_file_on_releases_and_its_outputs_saved(cli, transcendental_store, tmp_path):
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(transcendental_store)
    [run_id] = store.run_ids()
    [snapshot] = [f.path for f in store.stored_files(run_id) if ".jit_transcendental.snapshot." in f.path]
    path = tmp_path / snapshot.rsplit("/", 1)[-1]
    path.write_bytes(store.read_file(run_id, snapshot))
    saved = tmp_path / "out.npz"
    assert cli("replay", path, "--save-outputs", saved, "--store", tmp_path / "none", "-q").exit_code == 0
    with np.load(saved) as outputs:
        assert outputs["output_0"].shape == (6, 4096) and outputs["output_0"].dtype == np.float32
        assert float(outputs["output_0"][0, -1]) == pytest.approx(np.tanh(4.0), rel=1e-6)
    both = cli("replay", path, "--jaxlib", "current,current", "--store", tmp_path / "none")
    assert both.exit_code == 0 and "every release gives the same outputs, bit for bit" in both.output
    timed = cli("replay", path, "--jaxlib", "current,current", "-n", "3", "--time-tolerance", "1000", "--json")
    data = json.loads(timed.stdout)
    assert timed.exit_code == 0 and data["time_tolerance"] == 1000 and data["first_time_moved"] is None
    assert data["releases"][0]["time_vs_first"] == 1 and data["releases"][1]["time_vs_first"] > 0
    assert [r["time_moved"] for r in data["releases"]] == [False, False]


@pytest.mark.slow
def test_a_partitioned_module_on_releases_compares_its_outputs_or_says_in_one_line_why_not(cli):
    """The checked-in 2-partition module replays on 2 devices under each release and its outputs are compared; jaxlib
    0.4.30 (no Shardy, an HLO parser older than the module's attributes) gets a one-line reason, and exit 3."""
    for key in ("jax-0.4.30", "jax-0.8.3"):
        require_compat(key)
    result = cli("replay", SHARDED, "--jaxlib", "0.8.3,current,0.4.30", "--json")
    data = json.loads(result.stdout)
    newer, current, oldest = data["releases"]
    assert (newer["verdict"], current["verdict"]) == ("match", "match")
    assert current["vs_first_abs"] is not None and current["vs_first_abs"] < 1e-5
    assert oldest["verdict"] is None or oldest["verdict"] == "engine-error"
    assert oldest["error"] and "\n" not in oldest["error"] and "Traceback" not in oldest["error"]
    assert "use_shardy_partitioner" not in oldest["error"]
    assert result.exit_code == 3


HALVES = """HloModule jit_halves, entry_computation_layout={(f32[8]{0})->f32[8]{0}}, num_partitions=2

ENTRY main.4 {
  x = f32[8]{0} parameter(0), sharding={devices=[2]<=[2]}
  t = f32[8]{0} tanh(x), sharding={devices=[2]<=[2]}
  ROOT y = f32[8]{0} multiply(t, t), sharding={devices=[2]<=[2]}
}
"""


@pytest.mark.slow
def test_a_module_split_over_2_devices_replays_on_jaxlib_0_4_30_which_has_no_shardy(cli, tmp_path):
    """A module every release parses: 0.4.30 partitions it with GSPMD (its build options have no Shardy switch)
    and gives the outputs the current release gives."""
    require_compat("jax-0.4.30")
    path = tmp_path / "module_0001.jit_halves.before_optimizations.txt"
    path.write_text(HALVES)
    result = cli("replay", path, "--jaxlib", "0.4.30,current", "--json")
    data = json.loads(result.stdout)
    assert [(r["jaxlib"], r["verdict"], r["error"]) for r in data["releases"][:1]] == [("0.4.30", "match", None)]
    assert data["releases"][1]["verdict"] == "match" and data["releases"][1]["identical_to_first"] is True
    assert result.exit_code == 0


def test_the_first_release_whose_run_time_moved_past_the_tolerance_is_named():
    from xlarun.errors import ExitCode
    from xlarun.replay.releases import ReleaseReplay, ReleaseReplays, judge_times

    def releases(tolerance):
        answer = ReleaseReplays("m.pb", 1e-3, 1e-3, time_tolerance=tolerance)
        for jaxlib, median, moved in (("0.4.30", 0.010, False), ("0.8.3", 0.012, False), ("0.10.2", 0.025, False)):
            answer.releases.append(
                ReleaseReplay(jaxlib, jaxlib, "match", median_run_s=median, moved=moved, identical_to_first=True)
            )
        judge_times(answer)
        return answer

    judged = releases(0.5)
    assert [r.time_vs_first for r in judged.releases] == pytest.approx([1.0, 1.2, 2.5])
    assert [r.time_moved for r in judged.releases] == [False, False, True]
    assert (judged.first_time_moved, judged.exit_code) == ("0.10.2", ExitCode.FAILED)
    assert judged.headline() == (
        "every release gives the same outputs, bit for bit; the run time moves at jaxlib 0.10.2 (2.50x 0.4.30's median)"
    )
    lenient = releases(2.0)
    assert (lenient.first_time_moved, lenient.exit_code) == (None, ExitCode.OK)
    assert lenient.headline().endswith("; every run time is within 200% of 0.4.30's")
    unjudged = releases(None)  # the ratios are shown, nothing is judged
    assert unjudged.releases[2].time_vs_first == pytest.approx(2.5) and unjudged.releases[2].time_moved is None
    assert (unjudged.first_time_moved, unjudged.exit_code) == (None, ExitCode.OK)


def test_a_time_tolerance_without_releases_is_refused(cli, tmp_path):
    result = cli("replay", "jit_f", "--time-tolerance", "0.3", "--json", "--store", tmp_path / "s")
    assert result.exit_code == 2 and "give it with --jaxlib" in json.loads(result.stdout)["hint"]


@pytest.mark.parametrize(
    ("releases", "code", "message"),
    [
        ("0.1.0,current", 3, "no venv for jaxlib 0.1.0 under"),
        ("current", 2, "--jaxlib needs at least two releases"),
        ("latest,current", 2, "not a jaxlib release: 'latest'"),
    ],
)
def test_releases_that_cannot_run_are_refused_before_anything_runs(cli, tmp_path, releases, code, message):
    (tmp_path / "m.before_optimizations.txt").write_text(
        "HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n"
    )
    env = {"XLARUN_COMPAT_DIR": str(tmp_path / "compat")}
    result = cli("replay", tmp_path / "m.before_optimizations.txt", "--jaxlib", releases, "--json", env=env)
    assert result.exit_code == code and message in json.loads(result.stdout)["error"]
