"""xlarun bisect on real pass-by-pass captures of tiny JAX programs (configs/examples/bisect_*.py).

bf16_sum: float-normalization-bf16 keeps bf16 intermediates in f32 (the sum moves by 0.069);
residual: algsimp folds (x / 3) * 3 - x to 0; layer: nothing moves past the tolerance.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest

from tests.conftest import CONFIGS


def _bisect_json(cli, *args):
    result = cli("bisect", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.slow
def test_replay_mode_names_float_normalization_bf16(cli, bisect_store):
    code, data = _bisect_json(cli, "bf16_sum", "--store", bisect_store)
    assert code == 1 and data["verdict"] == "diverged"
    assert data["culprit_pass"] == "float-normalization-bf16"
    assert data["culprit_pipeline"] == "HLO_passes_through_layout_assignment"
    assert data["arguments"] == "snapshot"
    assert data["error_before"]["max_abs_error"] == 0.0
    assert 0.05 < data["error_after"]["max_abs_error"] < 0.1  # -112.938 (f32 intermediates) against -113.007 (bf16 roundings)
    assert "convert +10" in " ".join(data["diff_summary"])  # the pass's structural diff: converts to f32 around the arithmetic
    assert data["replays"] < data["steps_total"]
    assert "float-normalization-bf16" in data["disabled_passes"]


@pytest.mark.slow
def test_linear_replays_every_step_and_agrees(cli, bisect_store):
    _, binary = _bisect_json(cli, "bf16_sum", "--store", bisect_store)
    code, linear = _bisect_json(cli, "bf16_sum", "--linear", "--store", bisect_store)
    assert code == 1 and linear["culprit_pass"] == binary["culprit_pass"] and linear["culprit_step"] == binary["culprit_step"]
    assert len(linear["steps"]) == linear["steps_total"] > len(binary["steps"])
    assert linear["replays"] > binary["replays"]  # steps whose dump repeats an earlier one are not replayed again
    before = [s for s in linear["steps"] if s["step"] < linear["culprit_step"]]
    assert before and all(s["max_abs_error"] == 0.0 for s in before)


@pytest.mark.slow
def test_replay_mode_names_algsimp(cli, bisect_store):
    code, data = _bisect_json(cli, "residual", "--store", bisect_store)
    assert code == 1 and data["culprit_pass"] == "algsimp" and data["culprit_pipeline"] == "simplification"
    assert data["error_after"]["max_abs_error"] > 0.1
    assert "divide -1" in " ".join(data["diff_summary"])


@pytest.mark.slow
def test_nothing_diverges_says_so(cli, bisect_store):
    result = cli("bisect", "layer", "--store", bisect_store)
    assert result.exit_code == 0
    assert "no step diverges past the tolerance; largest error seen" in result.stdout


@pytest.mark.slow
def test_recompiling_with_the_full_pipeline_hides_the_culprit(cli, bisect_store):
    # why steps are recompiled with their timeline's passes disabled: otherwise the pass applies again
    code, data = _bisect_json(cli, "bf16_sum", "--recompile", "full", "--linear", "--store", bisect_store)
    assert code == 0 and data["verdict"] == "no-divergence"
    code, data = _bisect_json(cli, "bf16_sum", "--recompile", "all", "--store", bisect_store)
    assert code == 1 and data["culprit_pass"] == "float-normalization-bf16"


@pytest.mark.slow
def test_snapshot_reference_finds_the_step_that_matches_the_recorded_result(cli, bisect_store):
    code, data = _bisect_json(cli, "bf16_sum", "--reference", "snapshot", "--store", bisect_store)
    assert code == 1 and data["culprit_pass"] == "float-normalization-bf16"
    assert data["steps"][0]["step"] == -1 and data["steps"][0]["diverged"] is True
    assert data["error_after"]["max_abs_error"] == 0.0


@pytest.mark.slow
def test_bisections_are_recorded_and_shown(cli, bisect_store):
    cli("bisect", "residual", "--store", bisect_store, "-q")
    shown = cli("show", "residual", "--store", bisect_store)
    assert "bisections" in shown.stdout and "algsimp" in shown.stdout


def test_json_on_failure(cli, bisect_store):
    code, data = _bisect_json(cli, "no_such_module", "--store", bisect_store)
    assert code == 2 and data["verdict"] is None and "no_such_module" in data["error"]


def test_refuses_modules_without_pass_dumps_or_with_elided_constants(bisect_store):
    from xlarun.bisect.bisect_plan import refuse_unbisectable
    from xlarun.errors import InputError
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps
    from xlarun.store.facade import LocalStore

    module = resolve_module(LocalStore.open(bisect_store).index, "bf16_sum")
    with pytest.raises(InputError, match="without per-pass dumps") as raised:
        refuse_unbisectable(module, [])
    assert "dump.pass_re" in raised.value.hint
    with pytest.raises(InputError, match="without large constants") as raised:
        refuse_unbisectable(dataclasses.replace(module, elided_constants=True), pass_steps(module))
    assert "dump.large_constants: true" in raised.value.hint


@pytest.mark.slow
def test_refuses_a_capture_without_pass_dumps(cli, tmp_path):
    spec = tmp_path / "plain.yaml"
    spec.write_text(
        f"name: plain\nscript: {CONFIGS / 'examples' / 'bisect_stable.py'}\nframework: jax\ndump:\n  formats: [text]\n"
    )
    store = tmp_path / "store"
    assert cli("capture", spec, "--store", store, "-q").exit_code == 0
    result = cli("bisect", "layer", "--store", store)
    assert result.exit_code == 2 and "without per-pass dumps" in result.stderr and "dump.pass_re" in result.stderr


def test_rerun_mode_refuses_a_flaky_check(cli, tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text("import random\nprint(f'result {random.random()}')\n")
    spec = tmp_path / "noisy.yaml"
    spec.write_text(f"name: noisy\nscript: noisy.py\npython: {sys.executable}\ndump:\n  formats: [text]\n")
    code, data = _bisect_json(cli, spec, "--check", r"result (\S+)", "-j", "2", "--store", tmp_path / "store")
    assert code == 2 and data["error"].startswith("the check is flaky")


@pytest.mark.slow
def test_rerun_mode_names_float_normalization_bf16(cli, tmp_path):
    store = tmp_path / "store"
    code, data = _bisect_json(cli, CONFIGS / "bisect-bf16.yaml", "--check", r"result (\S+)", "-j", "2", "--store", store)
    assert code == 1 and data["verdict"] == "diverged" and data["culprit_pass"] == "float-normalization-bf16"
    assert data["baseline"] == pytest.approx(-112.938255)
    flipped = [t for t in data["trials"] if t["disabled"] == ["float-normalization-bf16"]]
    assert flipped and flipped[0]["flipped"] and flipped[0]["value"] == pytest.approx(-113.007385)
    assert data["reruns"] < 2 * len(data["disabled_passes"])  # delta debugging, not one rerun per pass
    runs = cli("runs", "--all", "--store", store, "--json")
    tagged = [r for r in json.loads(runs.stdout) if r["tags"].get("bisect")]
    assert len(tagged) == data["reruns"] + 2  # and the two baseline runs
    # the reruns are xlarun's own: a plain listing leaves them out
    assert not [r for r in json.loads(cli("runs", "--store", store, "--json").stdout) if r["tags"].get("bisect")]
    # the reruns hold bf16_sum without pass dumps: a name alone still finds the run captured pass by pass
    code, by_replay = _bisect_json(cli, "bf16_sum", "--store", store)
    assert code == 1 and by_replay["culprit_pass"] == "float-normalization-bf16"


@pytest.mark.slow
def test_rerun_mode_looks_for_other_single_culprits_once_it_has_one(cli, tmp_path):
    """algsimp alone flips the residual; the other candidates, disabled together without it, do not: algsimp is the
    only pass whose disabling alone flips it, and the rerun that shows so is in the table."""
    code, data = _bisect_json(
        cli, CONFIGS / "bisect-algsimp.yaml", "--check", r"result (\S+)", "--tolerance", "1e-3", "-j", "2", "--store", tmp_path
    )
    assert code == 1 and data["culprit_pass"] == "algsimp" and data["culprit_passes"] == ["algsimp"]
    rest = [t for t in data["trials"] if t["role"] == "rest"]
    assert len(rest) == 1 and rest[0]["flipped"] is False
    assert sorted(rest[0]["disabled"]) == sorted(p for p in data["disabled_passes"] if p != "algsimp")
    assert rest[0]["value"] == pytest.approx(data["baseline"], abs=1e-3)


def test_check_reads_exit_codes_and_numbers():
    from xlarun.bisect.rerun import Check

    exit_check = Check.parse("exit")
    assert exit_check.same(0.0, 0.0, 0, 0) and not exit_check.same(0.0, 1.0, 0, 0)
    number = Check.parse(r"loss (\S+)")
    assert number.same(2.0, 2.0000001, 1e-5, 1e-5) and not number.same(2.0, 2.1, 1e-5, 1e-5)
    assert number.same(2.0, None, 1e-5, 1e-5) is None


def test_ddmin_narrows_to_one_pass_with_few_trials():
    from xlarun.bisect.bisect_result import BisectResult, RerunTrial
    from xlarun.bisect.rerun import _ddmin

    class FakeReruns:  # judges subsets by rule instead of running a job: only the search is under test here
        def __init__(self):
            self.seen, self.count = {}, 0

        def trials(self, subsets, role):
            out = []
            for s in subsets:
                self.count += 1
                trial = RerunTrial(None, list(s), role, flipped="p13" in s if "p4" not in s or len(s) > 8 else None)
                self.seen[tuple(s)] = trial
                out.append(trial)
            return out

    result = BisectResult("rerun", "spec")
    runner = FakeReruns()
    _ddmin([f"p{i}" for i in range(32)], runner, result, jobs=2)
    assert result.culprit_pass == "p13" and runner.count <= 12


def test_rerun_mode_reports_every_pass_whose_disabling_alone_flips_the_check():
    """The issue: it named only algsimp where its own table showed constant_folding alone flipping the result too."""
    from xlarun.bisect.bisect_result import BisectResult, RerunTrial
    from xlarun.bisect.rerun import _ddmin, _other_culprits

    flipping = {"p5", "p13", "p27"}  # each alone flips; the search finds one first

    class FakeReruns:  # judges subsets by rule instead of running a job: only the search is under test here
        def __init__(self):
            self.seen, self.count = {}, 0

        def trials(self, subsets, role):
            out = []
            for s in subsets:
                if tuple(s) not in self.seen:
                    self.count += 1
                    self.seen[tuple(s)] = RerunTrial(None, list(s), role, flipped=bool(flipping & set(s)))
                out.append(self.seen[tuple(s)])
            return out

    candidates = [f"p{i}" for i in range(32)]
    result, runner = BisectResult("rerun", "spec", check="result (\\S+)", verdict="diverged"), FakeReruns()
    _ddmin(candidates, runner, result, jobs=2)
    first = result.culprit_pass
    _other_culprits(candidates, runner, result, jobs=2)
    assert first in flipping and result.culprit_passes == ["p5", "p13", "p27"]
    assert runner.count <= 3 * 12  # three narrowings (ddmin finds one in at most 12 of 32), not a rerun per pass alone
    others = ", ".join(p for p in ["p5", "p13", "p27"] if p != first)
    assert f"disabling pass {first} flips the check" in result.headline()
    assert f"so does disabling {others} alone" in result.headline()
    # nothing else flips: the one culprit is all there is, found with one more rerun (the rest, together)
    flipping.intersection_update({"p13"})
    result, runner = BisectResult("rerun", "spec", verdict="diverged"), FakeReruns()
    _ddmin(candidates, runner, result, jobs=2)
    before = runner.count
    _other_culprits(candidates, runner, result, jobs=2)
    assert result.culprit_passes == ["p13"] and runner.count == before + 1


@pytest.mark.slow
def test_bisect_result_round_trips_through_json(bisect_store):
    from xlarun.bisect import BisectOptions, BisectResult, bisect_module
    from xlarun.navigate.refs import resolve_module
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(bisect_store)
    result = bisect_module(store, resolve_module(store.index, "residual"), BisectOptions())
    again = BisectResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.culprit_pass == "algsimp" and again.steps == result.steps and again.headline() == result.headline()


def test_help_teaches_both_modes(cli):
    result = cli("bisect", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--check" in text and "dump.pass_re" in text and "--linear" in text
    assert textwrap.shorten("Replay mode", 20) in text and "Rerun mode" in text


@pytest.mark.slow
def test_report_shows_the_error_plot_and_the_culprit_diff(cli, bisect_store, tmp_path):
    from xlarun.navigate.refs import resolve_module
    from xlarun.store.facade import LocalStore

    cli("bisect", "bf16_sum", "--linear", "--store", bisect_store, "-q")
    module = resolve_module(LocalStore.open(bisect_store).index, "bf16_sum")
    out = tmp_path / "report"
    assert cli("report", module.run_id, "--store", bisect_store, "-o", out, "--no-graphs").exit_code == 0
    page = (out / "modules" / f"module_{module.module_id:04d}.html").read_text()
    section = page[page.index('id="bisections"') :]
    assert 'class="error-plot"' in section and section.count("<circle") >= module.n_pass_dumps  # one point per replayed step
    assert "float-normalization-bf16" in section and "convert +10" in section
    assert '<span class="add">' in section  # the culprit's unified diff


def test_passes_the_module_cannot_compile_without_are_found_by_binary_search():
    from xlarun.bisect.replay_mode import _passes_needed

    disabled = [f"p{i}" for i in range(40)]
    calls = []

    def compile_error(off):
        calls.append(off)
        missing = [p for p in ("p7", "p31") if p in off]
        return f"UNIMPLEMENTED: needs {missing[0]}" if missing else None

    assert sorted(_passes_needed(disabled, compile_error)) == ["p31", "p7"]
    assert len(calls) <= 2 * 7 + 3  # about log2(40) compiles per needed pass, not one per pass
    assert _passes_needed(disabled, lambda off: "broken") is None  # not even the full pipeline compiles


@pytest.mark.slow
def test_a_module_that_needs_a_lowering_pass_keeps_it_on(cli, tmp_path):
    # a dot over two contracting dimensions: the CPU backend has no emitter for it until dot_decomposer runs
    script = tmp_path / "twodims.py"
    script.write_text(
        textwrap.dedent("""
        import jax, jax.numpy as jnp
        @jax.jit
        def contract(a, b):
            return jnp.einsum("ijk,jk->i", a, b) * 2.0
        a = jax.random.normal(jax.random.PRNGKey(0), (8, 4, 3))
        b = jax.random.normal(jax.random.PRNGKey(1), (4, 3))
        print(f"result {float(contract(a, b).sum()):.6f}")
    """)
    )
    spec = tmp_path / "twodims.yaml"
    spec.write_text(
        f"name: twodims\nscript: {script}\nframework: jax\ndump:\n  formats: [text]\n  pass_re: '.*'\n"
        "  snapshots: true\n  large_constants: true\n"
    )
    store = tmp_path / "store"
    assert cli("capture", spec, "--store", store, "-q").exit_code == 0
    code, data = _bisect_json(cli, "contract", "--store", store)
    assert data["error"] is None, data
    assert "dot_decomposer" in data["kept_passes"] and "dot_decomposer" not in data["disabled_passes"]
    assert data["kept_passes"] == ["dot_decomposer"]  # the search keeps what is needed, nothing more
    assert code == 0 and data["verdict"] == "no-divergence"  # the decomposed dot sums the same products in the same order


@pytest.mark.slow
def test_a_bundle_with_passes_carries_the_bisection_and_imports(cli, bisect_store, tmp_path):
    import zipfile

    assert cli("bisect", "bf16_sum", "--store", bisect_store).exit_code == 1
    out = tmp_path / "bf16.zip"
    assert cli("bundle", "bf16_sum", "--passes", "-o", out, "--store", bisect_store).exit_code == 0
    with zipfile.ZipFile(out) as bundle:
        records = [n for n in bundle.namelist() if "/bisections/" in n]
        assert records and json.loads(bundle.read(records[-1]))["result"]["culprit_pass"] == "float-normalization-bf16"
        assert "float-normalization-bf16" in bundle.read("README.md").decode()
    imported = cli("import", out, "--store", tmp_path / "theirs")
    assert imported.exit_code == 0, imported.output
    without = tmp_path / "plain.zip"
    assert cli("bundle", "bf16_sum", "-o", without, "--store", bisect_store).exit_code == 0
    assert not [n for n in zipfile.ZipFile(without).namelist() if "/bisections/" in n]


def test_json_on_failure_of_each_mode_before_anything_runs(cli, tmp_path):
    """One JSON document, the usage error's, whichever mode refuses its arguments; nothing is captured or created."""
    spec = CONFIGS / "bisect-bf16.yaml"
    result = cli("bisect", spec, "--store", tmp_path / "store", "--json")
    documents = [line for line in result.stdout.splitlines() if line.startswith("{")]
    data = json.loads(result.stdout)
    assert result.exit_code == data["exit_code"] == 2 and len(documents) == 1
    assert data["subject"] == str(spec) and data["bisect_id"] is None and data["error"].endswith("rerun mode needs --check")
    assert not (tmp_path / "store").exists()
    code, data = _bisect_json(cli, "jit_f", "--check", "exit", "--store", tmp_path / "store")
    assert code == 2 and data["error"] == "--check goes with a spec file (rerun mode)" and data["subject"] == "jit_f"
    code, data = _bisect_json(cli, "jit_f", "--recompile", "some", "--store", tmp_path / "store")
    assert code == 2 and data["error"] == "unknown recompile 'some'" and data["hint"] == "use one of: timeline, all, full"
