"""xlarun extract: an instruction and its K-hop operands as a standalone module carrying the
values a real run computed, on the bisect examples' captures (tests/conftest.py's bisect_store)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_bisect_first_move import TEXT  # the same small module
from xlarun.bisect.extract import extract_instruction
from xlarun.bisect.extract_text import computations_of, instructions_of


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


#: A training step's shape in small: donated arguments (aliasing, a donor), a while loop, a fusion, sharding
#: annotations, a called computation nothing kept calls, stack frames the extract does not carry.
STEP = """HloModule jit_step, input_output_alias={ {0}: (0, {}, may-alias) }, buffer_donor={ (1, {}) }, entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[])}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%unused (u: f32[]) -> f32[] {
  ROOT %u = f32[] parameter(0)
}

%fused_mul (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[4]{0} parameter(1)
  ROOT %m = f32[4]{0} multiply(%p0, %p1)
}

%cond (c: (s32[], f32[4])) -> pred[] {
  %c = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%t), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i.1, %one)
  %v = f32[4]{0} get-tuple-element(%t), index=1
  %twice = f32[4]{0} add(%v, %v)
  ROOT %out = (s32[], f32[4]{0}) tuple(%next, %twice)
}

ENTRY %main (w: f32[4], x: f32[4]) -> (f32[4], f32[]) {
  %w = f32[4]{0} parameter(0), sharding={replicated}
  %x = f32[4]{0} parameter(1), sharding={replicated}
  %zero.i = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%zero.i, %x)
  %loop = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  %carried = f32[4]{0} get-tuple-element(%loop), index=1
  %mul_fusion = f32[4]{0} fusion(%w, %carried), kind=kLoop, calls=%fused_mul, metadata={op_name="jit(step)/mul" stack_frame_id=3}
  %annotated = f32[4]{0} custom-call(%mul_fusion), custom_call_target="Sharding", sharding={replicated}
  %new_w = f32[4]{0} subtract(%w, %annotated), sharding={replicated}
  %zero = f32[] constant(0)
  %loss = f32[] reduce(%new_w, %zero), dimensions={0}, to_apply=%add
  ROOT %result = (f32[4]{0}, f32[]) tuple(%new_w, %loss)
}
"""


def _run_on_cpu(text: str, arguments: list) -> list:
    from xlarun.replay import pjrt

    compiled = pjrt.Platform("cpu").compile(pjrt.module_proto_to_stablehlo(pjrt.text_to_module_proto(text)), {})
    raw, _ = compiled.run(compiled.upload(arguments))
    return compiled.download(raw)


def test_an_extract_of_a_training_step_carries_only_what_it_calls_and_a_header_of_its_own():
    pytest.importorskip("jax")
    cut = extract_instruction(STEP, "mul_fusion", hops=1)
    assert (cut.kept, cut.parameters) == (["mul_fusion"], ["w", "carried"])  # carried reads the loop: a parameter
    head = cut.text.splitlines()[0]
    # the donated arguments' aliasing and the donor name the step's parameters and outputs, not the extract's
    assert head == "HloModule extract_mul_fusion, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}"
    assert cut.computations == ["fused_mul"] and "%add" not in cut.text and "%body" not in cut.text  # only what it calls
    assert "sharding=" not in cut.text and "stack_frame_id" not in cut.text and 'op_name="jit(step)/mul"' in cut.text
    assert "call(%w, %carried), to_apply=%fused_mul" in cut.text  # the fusion as a call: it compiles as given
    assert cut.instructions == 3 + 2 + 1  # fused_mul's, the two parameters, the fusion
    w, carried = np.arange(4, dtype=np.float32), np.full(4, 8, np.float32)
    (product,) = _run_on_cpu(cut.text, [w, carried])
    np.testing.assert_array_equal(product, w * carried)


def test_another_fusion_than_the_instruction_is_a_parameter_and_its_body_stays_out():
    pytest.importorskip("jax")
    cut = extract_instruction(STEP, "new_w", hops=2)  # two hops reach mul_fusion: its value, not its body
    assert (cut.kept, cut.parameters) == (["annotated", "new_w"], ["mul_fusion", "w"])
    assert cut.computations == [] and "fused_mul" not in cut.text and cut.instructions == 2 + 2
    assert "sharding=" not in cut.text and "%annotated = f32[4]{0} copy(%mul_fusion)" in cut.text  # an identity on one device
    w, product = np.arange(4, dtype=np.float32), np.full(4, 8, np.float32)
    (new_w,) = _run_on_cpu(cut.text, [product, w])
    np.testing.assert_array_equal(new_w, w - product)


def test_a_loop_comes_along_with_its_computations_and_an_instruction_deeper_than_a_loop_body_is_refused():
    pytest.importorskip("jax")
    from xlarun.errors import InputError

    with pytest.raises(InputError, match=r"'carried' reads the tuple 'loop'") as caught:
        extract_instruction(STEP, "carried", hops=0)
    assert "extract with more --hops" in caught.value.one_line()
    loop = extract_instruction(STEP, "carried", hops=1)  # the while and the tuple it starts from (free, as a constant)
    assert loop.kept == ["zero.i", "init", "loop", "carried"]
    assert loop.parameters == ["x"] and loop.computations == ["body", "cond"]
    x = np.array([1, -2, 3, 0.5], np.float32)
    np.testing.assert_array_equal(_run_on_cpu(loop.text, [x])[0], x * 8)  # three iterations of doubling
    with pytest.raises(InputError, match=r"'m' is inside fused_mul, which mul_fusion \(fusion\) of the entry computation runs"):
        extract_instruction(STEP, "m")
    with pytest.raises(InputError, match=r"'lt' is inside cond, which loop \(while\)"):
        extract_instruction(STEP, "lt")
    with pytest.raises(InputError, match=r"'loop' has a \(s32\[\], f32\[4\]\{0\}\) value, not an array"):
        extract_instruction(STEP, "loop")


def test_an_instruction_of_a_loop_body_is_extracted_with_the_carried_values_of_the_first_iteration():
    pytest.importorskip("jax")
    from xlarun.bisect.extract import attach_values

    cut = extract_instruction(STEP, "twice", hops=1)
    assert (cut.called_by, cut.body, cut.kept, cut.parameters) == ("loop", "body", ["twice"], ["v"])  # v reads the carry
    assert cut.text.splitlines()[0] == "HloModule extract_twice, entry_computation_layout={(f32[4]{0})->f32[4]{0}}"
    w, x = np.ones(4, np.float32), np.array([1, -2, 3, 0.5], np.float32)
    attach_values(cut, STEP, lambda text: _run_on_cpu(text, [w, x]))  # the step itself, run with the body's values out
    assert cut.arguments is not None
    np.testing.assert_array_equal(cut.arguments[0], x)  # the carried value the loop starts from
    np.testing.assert_array_equal(cut.result, 2 * x)
    np.testing.assert_array_equal(_run_on_cpu(cut.text, cut.arguments)[0], cut.result)  # and the extract replays to it


#: Per-device code after the SPMD partitioner (configs/bisect-sharded.yaml's step 4, cut short).
PER_DEVICE = """HloModule jit_split_sum, entry_computation_layout={(f32[4]{0})->f32[]}, num_partitions=4

%region_0.0 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

ENTRY %main.0_spmd (param: f32[4]) -> f32[] {
  %param = f32[4]{0} parameter(0), sharding={devices=[4]<=[4]}
  %constant.7 = s32[4]{0} constant({0, 4, 8, 12})
  %partition-id = u32[] partition-id()
  %dynamic-slice = s32[1]{0} dynamic-slice(%constant.7, %partition-id), dynamic_slice_sizes={1}
  %reshape = s32[] reshape(%dynamic-slice)
  %dynamic-slice.1 = f32[4]{0} dynamic-slice(%param, %reshape), dynamic_slice_sizes={4}, sharding={devices=[4]<=[4]}
  %zero = f32[] constant(0), sharding={replicated}
  %reduce = f32[] reduce(%dynamic-slice.1, %zero), dimensions={0}, to_apply=%region_0.0
  ROOT %all-reduce = f32[] all-reduce(%reduce), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%region_0.0
}
"""


def test_collectives_and_partition_ids_are_never_kept_and_a_collective_is_refused_as_the_instruction():
    from xlarun.errors import InputError

    cut = extract_instruction(PER_DEVICE, "reduce", hops=5)  # hops enough for everything: the partition id stays out
    assert cut.parameters == ["partition-id", "param"] and "num_partitions" not in cut.text and "sharding" not in cut.text
    assert cut.kept == ["constant.7", "dynamic-slice", "reshape", "dynamic-slice.1", "zero", "reduce"]
    with pytest.raises(InputError, match=r"'all-reduce' is a collective \(all-reduce\) between devices"):
        extract_instruction(PER_DEVICE, "all-reduce")
    # a combined all-reduce is a tuple: an element of it has no one-device value either, and no --hops keeps it
    root = next(line for line in PER_DEVICE.splitlines() if line.startswith("  ROOT %all-reduce"))
    combined = root.replace("ROOT %all-reduce = f32[]", "%all-reduce = (f32[], f32[])").replace("(%reduce)", "(%reduce, %zero)")
    combined = PER_DEVICE.replace(root, f"{combined}\n  ROOT %total = f32[] get-tuple-element(%all-reduce), index=0")
    with pytest.raises(InputError, match=r"'total' takes an element of 'all-reduce', a collective") as caught:
        extract_instruction(combined, "total", hops=3)
    assert "extract what reads total" in caught.value.one_line() and "more --hops" not in caught.value.one_line()


def test_the_values_run_drops_the_aliasing_of_donated_arguments_so_xla_compiles_it():
    pytest.importorskip("jax")
    from xlarun.bisect.extract import expose_named
    from xlarun.bisect.first_move import expose_values

    # the step's first value is a scalar: output {0} of a values run is no longer the size of donated argument 0
    step = STEP.replace(
        "  %zero.i = s32[] constant(0)\n",
        "  %zero.i = s32[] constant(0)\n  %zero.f = f32[] constant(0)\n  %norm = f32[] reduce(%w, %zero.f), dimensions={0}, to_apply=%add\n",
    )
    w, x = np.array([1, 2, 3, 4], np.float32), np.ones(4, np.float32)
    exposed = expose_named(step, ["norm", "carried", "mul_fusion"])
    assert exposed.splitlines()[0] == "HloModule jit_step"
    assert "ROOT %xlarun.extract_values = (f32[], f32[4]{0}, f32[4]{0}) tuple(%norm, %carried, %mul_fusion)" in exposed
    norm, carried, product = _run_on_cpu(exposed, [w, x])
    assert norm == 10 and (carried == 8).all() and (product == 8 * w).all()
    everything, names = expose_values(step)  # bisect's value-by-value step: the same header, and it compiles too
    assert everything.splitlines()[0] == "HloModule jit_step" and names[0] == "norm"
    assert _run_on_cpu(everything, [w, x])[0] == 10


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
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps
    from xlarun.store.facade import LocalStore

    modules = json.loads(cli("modules", run_id, "--json", "--store", store).stdout)["modules"]
    # by number, the first listed (the main one): a program may compile its step twice under one name (sharded_drift)
    step = next(m for m in modules if zoo.STEPS[program] in m["name"])
    ref = f"{run_id}/module_{step['module_id']:04d}"
    opened = LocalStore.open(store)
    module = resolve_module(opened.index, ref)
    for step in reversed(pass_steps(module)):
        computations, by_name = computations_of(opened.read_file(module.run_id, step.path).decode())
        entry = next(c for c in computations if c.entry)
        fused = {  # fusion -> lines of the computation it calls
            name: len(by_name[called].lines)
            for name, (_, instr) in instructions_of(entry).items()
            if instr.opcode == "fusion"
            for called in [a.split("=", 1)[1].lstrip("%") for a in instr.attributes if a.startswith("calls=")]
        }
        if fused:
            return ref, max(fused, key=lambda n: fused[n]), ["--step", str(step.step)]
    before = next(f.path for f in module.files if f.stage == "before_optimizations" and f.format == "text")
    entry = next(c for c in computations_of(opened.read_file(module.run_id, before).decode())[0] if c.entry)
    return ref, next(n for n, (_, instr) in instructions_of(entry).items() if instr.root), []


def _zoo_extract(cli, zoo_runs, program: str, folder) -> dict:
    store, run_id = zoo_runs(program)
    ref, target, options = _zoo_target(cli, store, run_id, program)
    made = cli("extract", ref, target, "--hops", "1", *options, "-o", folder / program, "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    data = json.loads(made.stdout)
    text = (folder / f"{program}.hlo.txt").read_text()
    replayed = cli("replay", folder / f"{program}.snapshot.pb", "--json", "--store", folder / "none")
    data |= {"text": text, "replay": json.loads(replayed.stdout), "replay_exit": replayed.exit_code, "target": target}
    print(
        f"{program}: {target} {' '.join(options)}: {data['instructions']} instructions, {data['bytes']} bytes, replay exit {replayed.exit_code}"
    )
    return data


def _zoo_programs():
    from tests.test_zoo import zoo

    for name in zoo.STEPS:
        yield pytest.param(name, marks=[pytest.mark.slow], id=name)


@pytest.mark.parametrize("program", list(_zoo_programs()))
def test_a_zoo_extract_is_a_few_kilobytes_and_replays_to_the_run_value(cli, zoo_runs, program, tmp_path):
    data = _zoo_extract(cli, zoo_runs, program, tmp_path)
    text = data["text"]
    assert data["bytes"] == len(text.encode()) < 10_000 and data["has_values"] and data["parameters"]
    # the header is the new signature's: no aliasing of the step's donated arguments, no stale entry layout
    assert "input_output_alias" not in text and "buffer_donor" not in text and "sharding=" not in text
    assert text.startswith("HloModule extract_") and "entry_computation_layout={(" in text.splitlines()[0]
    # only the computations the kept instructions call (fused bodies, reducers), not the rest of the module
    called = {c.name for c in computations_of(text)[0] if not c.entry}
    assert called == set(data["computations"])
    replay = data["replay"]
    assert data["replay_exit"] == 0 and replay["verdict"] == "match" and replay["arguments"] == "snapshot"
    assert replay["compared_with"] == ["snapshot result"] and replay["max_abs_error"] == 0


@pytest.mark.parametrize("program", list(_zoo_programs()))
def test_a_zoo_extract_with_one_hop_is_under_50_instructions(cli, zoo_runs, program, tmp_path):
    """Another fusion the biggest one reads (flax_nnx's adamw update reads four) is a parameter holding the value the
    run computed, not a copy of its body: the extract is that one kernel."""
    data = _zoo_extract(cli, zoo_runs, program, tmp_path)
    from xlarun.replay.deoptimize import parse_instruction

    assert data["instructions"] == sum(1 for line in data["text"].splitlines() if parse_instruction(line) is not None)
    assert data["instructions"] < 50 and data["bytes"] < 10_000
    computations, _by_name = computations_of(data["text"])
    entry = next(c for c in computations if c.entry)
    calls = [instr for _, instr in instructions_of(entry).values() if instr.opcode == "call"]
    assert [c.name.lstrip("%") for c in calls] in ([], [data["target"]])  # the fusion itself is the one call kept
    replay = data["replay"]
    assert (replay["verdict"], replay["max_abs_error"]) == ("match", 0)


@pytest.mark.slow
def test_a_zoo_culprit_extract_reproduces_the_pass_effect_with_its_switch(cli, zoo_runs, tmp_path):
    """bf16: bisect names float-normalization-bf16 (kept on: XLA does not compile the step without it) and the first
    value it moves; that value's one-hop extract replays to a match, and with the pass's switch off it moves by what
    the bisection measured on the whole step. The bundle says that line."""
    import zipfile

    from tests.test_zoo import zoo

    store, run_id = zoo_runs("bf16")
    ref, _target, _options = _zoo_target(cli, store, run_id, "bf16")
    bisected = cli("bisect", ref, "--json", "--store", store)
    data = json.loads(bisected.stdout)
    assert bisected.exit_code == 1 and data["culprit_pass"] == zoo.EXPECTED_BISECT["bf16"][1] == "float-normalization-bf16"
    moved = data["first_move"]["moved"]
    made = cli("extract", ref, moved["name"], "--hops", "1", "-o", tmp_path / "first", "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    extracted = json.loads(made.stdout)
    assert extracted["instructions"] < 50 and extracted["bytes"] < 10_000
    origin = json.loads((tmp_path / "first.extract.json").read_text())
    assert origin["culprit"]["pass"] == "float-normalization-bf16" and origin["culprit"]["kept"]
    switch = origin["culprit"]["switch"]
    assert switch == "xla_allow_excess_precision=false"
    snapshot = tmp_path / "first.snapshot.pb"
    plain = json.loads(cli("replay", snapshot, "--json", "--store", tmp_path / "none").stdout)
    assert (plain["verdict"], plain["max_abs_error"]) == ("match", 0)
    switched = cli("replay", snapshot, "--json", "--store", tmp_path / "none", env={"XLA_FLAGS": f"--{switch}"})
    effect = json.loads(switched.stdout)
    assert switched.exit_code == 1 and effect["verdict"] == "mismatch"
    assert effect["max_abs_error"] == pytest.approx(moved["max_abs_error"], rel=1e-3)  # the pass's effect, in the extract alone
    bundled = cli("bundle", snapshot, "-o", tmp_path / "bug.zip", "--json")
    assert bundled.exit_code == 0, bundled.stderr
    with zipfile.ZipFile(tmp_path / "bug.zip") as archive:
        readme = archive.read("README.md").decode()
    assert f"`XLA_FLAGS=--{switch} xlarun replay first.snapshot.pb` differs" in readme
    assert "--xla_disable_hlo_passes=float-normalization-bf16" not in readme  # the step does not compile without it


def _dot_in_a_body(store, ref: str, opcode: str) -> tuple[int, str, str, str]:
    """(step, the entry's `opcode` instruction, its body, a dot in the body) of the last step that has one."""
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps
    from xlarun.store.facade import LocalStore

    opened = LocalStore.open(store)
    module = resolve_module(opened.index, ref)
    key = "body=" if opcode == "while" else "to_apply="
    for step in reversed(pass_steps(module)):
        computations, by_name = computations_of(opened.read_file(module.run_id, step.path).decode())
        for _, runner in instructions_of(next(c for c in computations if c.entry)).values():
            called = [a.split("=", 1)[1].lstrip("%") for a in runner.attributes if a.startswith(key)]
            if runner.opcode != opcode or not called:
                continue
            for name, (_, instr) in instructions_of(by_name[called[0]]).items():
                fused = [a.split("=", 1)[1].lstrip("%") for a in instr.attributes if a.startswith("calls=")]
                if instr.opcode == "dot" or (fused and " dot(" in "\n".join(by_name[fused[0]].lines)):
                    return step.step, runner.name.lstrip("%"), called[0], name
    raise AssertionError(f"no {opcode} body with a dot in {ref}")


@pytest.mark.slow
@pytest.mark.parametrize(("program", "opcode"), [("scan_remat", "while"), ("sharded", "call")])
def test_a_dot_inside_a_scan_or_shard_map_body_is_extracted_with_the_values_of_its_first_run(
    cli, zoo_runs, program, opcode, tmp_path
):
    """Most of a scan/remat model's compute is inside its while body, a shard_map's inside the call of its body (on a
    per-device step: device 0's values): the body's dot comes out small and replays."""
    store, run_id = zoo_runs(program)
    ref, _target, _options = _zoo_target(cli, store, run_id, program)
    step, runner, body, dot = _dot_in_a_body(store, ref, opcode)
    made = cli("extract", ref, dot, "--hops", "1", "--step", step, "-o", tmp_path / "dot", "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    data = json.loads(made.stdout)
    assert (data["called_by"], data["body"], data["has_values"]) == (runner, body, True)
    assert data["instructions"] < 50 and data["bytes"] < 10_000
    origin = json.loads((tmp_path / "dot.extract.json").read_text())
    assert (origin["called_by"], origin["iteration"], origin["step"]) == (runner, 0, step)
    assert origin.get("device") == (0 if program == "sharded" else None)  # per-device code: device 0's values
    replayed = json.loads(cli("replay", tmp_path / "dot.snapshot.pb", "--json", "--store", tmp_path / "none").stdout)
    assert (replayed["verdict"], replayed["compared_with"], replayed["max_abs_error"]) == ("match", ["snapshot result"], 0)


@pytest.mark.slow
def test_an_element_of_a_scan_loop_is_extracted_with_its_loop_in_one_hop(cli, zoo_runs, tmp_path):
    """scan_remat's forward scan, read through a get-tuple-element: one hop keeps the while with the tuple it starts
    from (its elements are parameters), and the loop replays to the value the run computed."""
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.diff import pass_steps
    from xlarun.store.facade import LocalStore

    store, run_id = zoo_runs("scan_remat")
    ref, _target, options = _zoo_target(cli, store, run_id, "scan_remat")
    opened = LocalStore.open(store)
    module = resolve_module(opened.index, ref)
    path = next(s.path for s in pass_steps(module) if s.step == int(options[1]))
    entry = instructions_of(next(c for c in computations_of(opened.read_file(module.run_id, path).decode())[0] if c.entry))
    element, loop = next(
        (name, instr.operands.strip().lstrip("%"))
        for name, (_, instr) in entry.items()
        if instr.opcode == "get-tuple-element" and entry[instr.operands.strip().lstrip("%")][1].opcode == "while"
    )
    made = cli("extract", ref, element, "--hops", "1", *options, "-o", tmp_path / "loop", "--json", "--store", store)
    assert made.exit_code == 0, made.stdout
    data = json.loads(made.stdout)
    body = next(a.split("=", 1)[1].lstrip("%") for a in entry[loop][1].attributes if a.startswith("body="))
    assert loop in data["kept"] and body in data["computations"] and data["has_values"]
    replayed = json.loads(cli("replay", tmp_path / "loop.snapshot.pb", "--json", "--store", tmp_path / "none").stdout)
    assert (replayed["verdict"], replayed["max_abs_error"]) == ("match", 0)
