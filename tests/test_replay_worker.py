"""Replays in a child process: XLA's aborts, crashes and hangs become engine errors; limits refuse before allocating;
every parameter shape gets fake data; NaN/Inf and rng are said beside the verdict. Real jaxlib, no mocks."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from xlarun.errors import InputError
from xlarun.replay import ReplayOptions, replay_file
from xlarun.replay.convert import convert_hlo
from xlarun.replay.fakedata import fake_argument
from xlarun.replay.limits import format_size, parse_size, text_nesting
from xlarun.replay.literals import Shape, primitive_type
from xlarun.replay.worker import ReplayWorker


def _module(tmp_path: Path, text: str, name: str = "m.hlo") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).strip() + "\n")
    return path


@pytest.fixture(scope="module")
def worker():
    with ReplayWorker() as shared:
        yield shared


TUPLES_AND_TOKENS = """
    HloModule tuples
    ENTRY main {
      p = (f32[2], (s32[], f32[3])) parameter(0)
      t = token[] parameter(1)
      z = f32[0,3] parameter(2)
      a = f32[2] get-tuple-element(p), index=0
      inner = (s32[], f32[3]) get-tuple-element(p), index=1
      b = f32[3] get-tuple-element(inner), index=1
      after = token[] after-all(t)
      ROOT r = (f32[2], f32[3], token[], f32[0,3]) tuple(a, b, after, z)
    }
"""


@pytest.mark.slow
def test_fake_data_for_nested_tuples_tokens_and_zero_sized_parameters(worker, tmp_path):
    result = worker.replay(_module(tmp_path, TUPLES_AND_TOKENS), ReplayOptions(reference_platform="cpu"))
    assert result.verdict == "match", result.error
    assert [o.type for o in result.outputs] == ["f32[2]", "f32[3]", "token[]", "f32[0,3]"]


@pytest.mark.slow
def test_a_cholesky_of_fake_data_matches_with_nan_and_says_so(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule chol
        ENTRY main {
          a = f32[4,4] parameter(0)
          ROOT c = f32[4,4] cholesky(a), lower=true
        }
    """,
    )
    result = worker.replay(path, ReplayOptions(reference_platform="cpu"))
    assert result.verdict == "match" and result.nonfinite_outputs
    assert result.nonfinite_outputs[0].startswith("output 0 f32[4,4]: ") and "NaN" in result.nonfinite_outputs[0]
    assert any("fake data" in w and "cholesky" in w for w in result.warnings)
    assert result.to_dict()["nonfinite_outputs"] == result.nonfinite_outputs


@pytest.mark.slow
def test_rng_names_itself_and_its_mismatch_is_expected(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule random
        ENTRY main {
          lo = f32[] constant(0)
          hi = f32[] constant(1)
          ROOT r = f32[64] rng(lo, hi), distribution=rng_uniform
        }
    """,
    )
    result = worker.replay(path, ReplayOptions(reference_platform="cpu"))
    assert result.random_instructions == ["r (rng)"]
    if result.verdict == "mismatch":  # XLA seeds rng per compile
        assert any("a mismatch against another compile" in w for w in result.warnings)


@pytest.mark.slow
def test_parameters_too_large_are_refused_by_size_before_allocation(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule big
        ENTRY main {
          p = f32[40000,51000] parameter(0)
          ROOT r = f32[] constant(0)
        }
    """,
    )
    with pytest.raises(
        InputError, match=r"need 7\.6 GB \(arguments 7\.6 GB, results 4 B\), more than the limit of 4\.0 GB"
    ) as caught:
        worker.replay(path, ReplayOptions())
    assert "--max-data-size" in caught.value.hint
    with pytest.raises(InputError, match=r"more than the limit of 1\.0 MB"):
        worker.replay(
            _module(tmp_path, TUPLES_AND_TOKENS.replace("f32[3]", "f32[300000]")), ReplayOptions(max_data_bytes=1 << 20)
        )


#: A fusion whose tuple root has no layout: XLA's CPU emitter CHECK-fails on it (jaxlib 0.10), aborting the process.
CHECK_FAILS = """
        HloModule check
        fusion {
          p0 = f32[10,11,12] parameter(0)
          c0 = s32[] constant(0)
          p1 = f32[1,11,12] parameter(1)
          dus = f32[10,11,12] dynamic-update-slice(p0, p1, c0, c0, c0)
          ROOT t = (f32[10,11,12], f32[1,11,12]) tuple(dus, p1)
        }
        ENTRY main {
          p = f32[10,11,12] parameter(0)
          q = f32[1,11,12] parameter(1)
          ROOT f = (f32[10,11,12], f32[1,11,12]) fusion(p, q), kind=kLoop, calls=fusion
        }
"""


@pytest.mark.slow
def test_an_xla_check_failure_is_an_engine_error_with_the_check(worker, tmp_path):
    path = _module(tmp_path, CHECK_FAILS)
    result = worker.replay(path, ReplayOptions())
    if result.crash is None:
        pytest.skip(f"this jaxlib refuses the module cleanly: {result.error}")
    assert result.verdict == "engine-error" and int(result.exit_code) == 3
    assert result.crash == "XLA CHECK failure" and result.failed_step == "compile" and "Check failed" in result.error
    ok = worker.replay(_module(tmp_path, TUPLES_AND_TOKENS, "after.hlo"), ReplayOptions())
    assert ok.verdict == "ran"  # the next replay gets a fresh child


@pytest.mark.slow
def test_a_loop_that_never_ends_is_stopped_at_the_timeout(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule forever
        cond {
          s = s32[] parameter(0)
          ROOT t = pred[] constant(true)
        }
        body {
          s = s32[] parameter(0)
          one = s32[] constant(1)
          ROOT n = s32[] add(s, one)
        }
        ENTRY main {
          zero = s32[] constant(0)
          ROOT w = s32[] while(zero), condition=cond, body=body
        }
    """,
    )
    result = worker.replay(path, ReplayOptions(timeout_s=4))
    assert result.verdict == "engine-error" and result.crash == "timeout" and result.failed_step == "run"
    assert "did not finish within 4 s" in result.error


@pytest.mark.slow
def test_host_transfers_that_would_wait_forever_are_refused(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule feed
        ENTRY main {
          t = token[] after-all()
          in = (f32[3], token[]) infeed(t)
          ROOT v = f32[3] get-tuple-element(in), index=0
        }
    """,
    )
    with pytest.raises(InputError, match=r"reads its input from the host \(infeed\) \(instruction in\)"):
        worker.replay(path, ReplayOptions(timeout_s=30))


@pytest.mark.slow
def test_text_nested_past_the_limit_is_refused_before_xla_parses_it(tmp_path, cli):
    depth = 100_000
    path = tmp_path / "deep.hlo"
    path.write_text(
        f"HloModule deep\nENTRY main {{\n  p = f32[] parameter(0)\n  ROOT r = {'(' * depth}f32[]{')' * depth} add(p, p)\n}}\n"
    )
    result = cli("replay", path, "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert "nests brackets 100002 deep, more than the limit of 1000" in data["error"] and data["exit_code"] == 2
    converted = cli("convert", path, "--to", "proto", "-o", tmp_path / "deep.pb")
    assert converted.exit_code == 2 and "nests brackets" in converted.stderr


@pytest.mark.slow
def test_json_is_one_document_when_xla_aborts(tmp_path, cli):
    path = _module(tmp_path, CHECK_FAILS)
    result = cli("replay", path, "--json", "--store", tmp_path / "store")
    data = json.loads(result.stdout)
    assert result.exit_code == data["exit_code"] == 3 and data["verdict"] == "engine-error"
    shown = cli("show", "--store", tmp_path / "store")  # a loose file's replay is recorded too
    assert shown.exit_code in (0, 2)


@pytest.mark.slow
def test_in_process_and_isolated_replays_agree(tmp_path):
    path = _module(tmp_path, TUPLES_AND_TOKENS)
    isolated = replay_file(path, ReplayOptions(print_literals=True))
    here = replay_file(path, ReplayOptions(print_literals=True, isolate="never"))
    assert [o.literal for o in isolated.outputs] == [
        o.literal for o in here.outputs
    ] and isolated.verdict == here.verdict == "ran"


@pytest.mark.slow
def test_convert_runs_in_the_child_and_round_trips(tmp_path):
    path = _module(tmp_path, TUPLES_AND_TOKENS)
    proto = convert_hlo(path, "proto")
    text = convert_hlo(tmp_path / "m.pb", "text", proto.data)
    assert proto.module_name == "tuples" and b"infeed" not in text.data and b"after-all" in text.data


def test_sizes_and_nesting():
    assert parse_size("4G") == 4 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("0") == 0
    assert format_size(8_160_000_000) == "7.6 GB" and format_size(4) == "4 B"
    assert text_nesting(b'a(b{c[1]}) "(((("') == 3
    with pytest.raises(InputError, match="not a size"):
        parse_size("lots")


def test_a_module_for_two_replicas_runs_on_two_devices_each_with_its_own_values(worker, tmp_path):
    path = _module(
        tmp_path,
        """
        HloModule two_replicas, replica_count=2
        add {
          a = f32[] parameter(0)
          b = f32[] parameter(1)
          ROOT s = f32[] add(a, b)
        }
        ENTRY main {
          p = f32[4] parameter(0)
          ROOT r = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=add
        }
    """,
    )
    result = worker.replay(path, ReplayOptions(print_literals=True))
    assert (result.verdict, result.devices, result.partitioning) == ("ran", 2, "2 replicas")
    assert [o.type for o in result.outputs] == ["f32[2,4]"]  # one row per replica
    assert any("2 replicas" in w and "nothing to compare" in w for w in result.warnings)
    # each replica got its own fake row; the all-reduce left their sum on both
    rows = fake_argument(Shape(primitive_type("f32").code, (2, 4)), 0, 0)
    printed = [float(x) for x in re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", result.outputs[0].literal or "")]
    assert np.allclose(np.array(printed).reshape(2, 4), np.stack([rows.sum(0)] * 2), atol=1e-6)


def test_an_optimized_instruction_written_over_several_lines_keeps_its_attributes_in_the_rewrite(worker, tmp_path):
    # from XLA's command_buffer_scheduling_test.cc: the rewrite read line by line lost dimensions= (XLA's parser then
    # refused xlarun's text: 42 of the corpus's modules); now it compiles and fails only where one device must
    path = _module(
        tmp_path,
        """
        HloModule TestModule, is_scheduled=true
        ENTRY %main (a: s32[2]) -> s32[4] {
          %a = s32[2] parameter(0)
          %start = (s32[2]{0}, s32[4]{0}) all-gather-start(%a),
            channel_id=555, replica_groups={{0,1}}, dimensions={0},
            backend_config={"collective_backend_config": {"is_sync":true}}
          ROOT %done = s32[4]{0} all-gather-done(%start)
        }
    """,
    )
    result = worker.replay(path, ReplayOptions())
    assert result.route and result.route.startswith("deoptimized") and result.compile_s is not None
    assert result.verdict == "engine-error" and result.error.startswith("execution failed") and "replica" in result.error
