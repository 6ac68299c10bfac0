"""xlarun extract (issue 26, item 5): an instruction and its K-hop operands as a standalone module carrying the
values a real run computed, on the bisect examples' captures (tests/conftest.py's bisect_store)."""

from __future__ import annotations

import json

import pytest

from tests.test_bisect_first_move import TEXT  # the same small module
from xlarun.bisect.extract import extract_instruction


def test_the_operands_within_k_hops_stay_and_the_rest_become_parameters():
    alone = extract_instruction(TEXT, "sum", hops=0)
    assert (alone.kept, alone.parameters) == (["zero", "sum"], ["div"])  # a constant operand always comes along
    assert "ENTRY %extract_sum (div: f32[4]{0}) -> f32[] {" in alone.text and "%add (a: f32[]" in alone.text
    assert "  ROOT %sum = f32[] reduce(%div, %zero)" in alone.text
    two = extract_instruction(TEXT, "%sum", hops=2)
    assert (two.kept, two.parameters) == (["three", "b3", "div", "zero", "sum"], ["x"])  # parameters are never kept


def test_an_unknown_instruction_names_the_near_ones():
    from xlarun.errors import InputError

    with pytest.raises(InputError, match=r"no instruction 'div\.7'") as caught:
        extract_instruction(TEXT, "div.7")
    assert "did you mean: div" in caught.value.one_line()


@pytest.mark.slow
def test_an_extract_replays_to_the_value_the_run_computed(cli, bisect_store, tmp_path):
    out = tmp_path / "repro" / "mul2"
    result = cli("extract", "residual", "mul.2", "-o", out, "--json", "--store", bisect_store)
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["kept"] == ["constant.5", "broadcast.1", "div.1", "mul.2"]
    assert data["parameters"] == ["x.1"] and data["has_values"]
    snapshot = tmp_path / "repro" / "mul2.snapshot.pb"
    assert (
        data["files"] == [str(out) + ".hlo.txt", str(snapshot), str(out) + ".extract.json"] and snapshot.stat().st_size < 40_000
    )  # 4,096 floats in, 4,096 out
    replayed = json.loads(cli("replay", snapshot, "--json", "--store", tmp_path / "none").stdout)
    assert (replayed["verdict"], replayed["compared_with"], replayed["max_abs_error"]) == ("match", ["snapshot result"], 0)


@pytest.mark.slow
def test_an_extract_from_the_culprit_step_holds_what_the_pass_made(cli, bisect_store, tmp_path):
    """algsimp's step 6: mul.2 now multiplies x by the folded constant; hops 0 keeps it with its new operand as a value."""
    result = cli(
        "extract", "residual", "mul.2", "--step", "6", "-k", "0", "-o", tmp_path / "s6", "--json", "--store", bisect_store
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["kept"] == ["mul.2"] and data["parameters"] == ["x.1", "broadcast.2"]
    replayed = json.loads(cli("replay", tmp_path / "s6.snapshot.pb", "--json", "--store", tmp_path / "none").stdout)
    assert replayed["verdict"] == "match" and replayed["arguments"] == "snapshot"
    missing = cli("extract", "residual", "mul.9", "--json", "--store", bisect_store)
    assert missing.exit_code == 2 and "did you mean: mul.2, mul.3" in json.loads(missing.stdout)["hint"]


# --- the zoo (issue 34, item 1): on every real training step, an extract of its biggest fusion with --hops 1 is
# a few kilobytes and replays to the value the run computed


def _zoo_target(cli, store, run_id: str, program: str) -> tuple[str, str, list[str]]:
    """(module REF, instruction, extra options): the biggest fusion of the step's last dump that has fusions,
    else (a program XLA folds to nothing to fuse) the ROOT of its before_optimizations module."""
    from tests.test_zoo import zoo
    from xlarun.bisect.extract_text import _computations, _instructions
    from xlarun.diff import pass_steps
    from xlarun.navigate.refs import resolve_module
    from xlarun.store.facade import Store

    names = [m["name"] for m in json.loads(cli("modules", run_id, "--json", "--store", store).stdout)["modules"]]
    ref = f"{run_id}/{next(n for n in names if zoo.STEPS[program] in n)}"
    opened = Store.open(store)
    module = resolve_module(opened.index, ref)
    for step in reversed(pass_steps(module)):
        computations, by_name = _computations(opened.read_file(module.run_id, step.path).decode())
        entry = next(c for c in computations if c.entry)
        fusions = {
            name: len(by_name[i.attributes[[a.split("=")[0] for a in i.attributes].index("calls")].split("=")[1].lstrip("%")].lines)
            for name, (_, i) in _instructions(entry).items()
            if i.opcode == "fusion"
        }
        if fusions:
            return ref, max(fusions, key=lambda n: fusions[n]), ["--step", str(step.step)]
    before = opened.read_file(module.run_id, next(f.path for f in module.files if f.stage == "before_optimizations" and f.format == "text"))
    entry = next(c for c in _computations(before.decode())[0] if c.entry)
    return ref, next(n for n, (_, i) in _instructions(entry).items() if i.root), []


def _zoo_extract(cli, zoo_runs, program: str, folder) -> dict:
    store, run_id = zoo_runs(program)
    ref, target, options = _zoo_target(cli, store, run_id, program)
    made = cli("extract", ref, target, "--hops", "1", *options, "-o", folder / program, "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    data = json.loads(made.stdout)
    text = (folder / f"{program}.hlo.txt").read_text()
    replayed = cli("replay", folder / f"{program}.snapshot.pb", "--json", "--store", folder / "none")
    data |= {"text": text, "replay": json.loads(replayed.stdout), "replay_exit": replayed.exit_code, "target": target}
    print(f"{program}: {target} {' '.join(options)}: {data['instructions']} instructions, {data['bytes']} bytes, replay exit {replayed.exit_code}")
    return data


def _zoo_programs(over_50: tuple[str, ...] = ()):
    from tests.test_zoo import zoo

    for name in zoo.STEPS:
        marks = [pytest.mark.slow]
        if name in over_50:
            marks.append(pytest.mark.xfail(strict=True, reason="its biggest fusion reads four fusions whose bodies come along"))
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("program", list(_zoo_programs()))
def test_a_zoo_extract_is_a_few_kilobytes_and_replays_to_the_run_value(cli, zoo_runs, program, tmp_path):
    data = _zoo_extract(cli, zoo_runs, program, tmp_path)
    text = data["text"]
    assert data["bytes"] == len(text.encode()) < 10_000 and data["has_values"] and data["parameters"]
    # the header is the new signature's: no aliasing of the step's donated arguments, no stale entry layout
    assert "input_output_alias" not in text and "buffer_donor" not in text and "sharding=" not in text
    assert text.startswith(f"HloModule extract_") and "entry_computation_layout={(" in text.splitlines()[0]
    # only the computations the kept instructions call (fused bodies, reducers), not the rest of the module
    called = {c.name for c in __import__("xlarun.bisect.extract_text", fromlist=["x"])._computations(text)[0] if not c.entry}
    assert called == set(data["computations"])
    replay = data["replay"]
    assert data["replay_exit"] == 0 and replay["verdict"] == "match" and replay["arguments"] == "snapshot"
    assert replay["compared_with"] == ["snapshot result"] and replay["max_abs_error"] == 0


@pytest.mark.parametrize("program", list(_zoo_programs(over_50=("flax_nnx",))))
def test_a_zoo_extract_with_one_hop_is_under_50_instructions(cli, zoo_runs, program, tmp_path):
    data = _zoo_extract(cli, zoo_runs, program, tmp_path)
    from xlarun.replay.deoptimize import parse_instruction

    assert data["instructions"] == sum(1 for line in data["text"].splitlines() if parse_instruction(line) is not None)
    assert data["instructions"] < 50
