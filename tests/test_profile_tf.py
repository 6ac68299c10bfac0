"""TensorFlow jobs profiled (the spec's ``profile: true``): TensorFlow's profiler writes the XSpace JAX's does, but
its XLA events carry no execution number (run_id -1), so executions are numbered from the ops' order.

The fast tests read a real trace checked in (``fixtures/profile/tiny_tf.xplane.pb``, made by ``tiny_tf.py`` beside
it: a loop of 4 iterations, 3 executions)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from xlarun.hlo.xspace import read_op_events

FIXTURES = Path(__file__).parent / "fixtures" / "profile"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_tensorflows_executions_are_numbered_by_the_entry_op_that_starts_each():
    events = read_op_events((FIXTURES / "tiny_tf.xplane.pb").read_bytes())
    assert len({e.module for e in events}) == 1 and next(iter(events)).module.startswith("a_inference_step_")
    per_execution = Counter(e.run_id for e in events)
    assert sorted(per_execution) == [-3, -2, -1]  # 3 executions, none with TensorFlow's -1 for all
    assert len(set(per_execution.values())) == 1  # each execution ran the same ops
    loop_body = Counter((e.op, e.run_id) for e in events if e.op == "sine_add_fusion")
    assert set(loop_body.values()) == {4}  # the loop's 4 iterations stay within their execution
    spans = [[e.start_ps for e in events if e.run_id == run_id] for run_id in (-1, -2, -3)]
    assert max(spans[0]) < min(spans[1]) and max(spans[1]) < min(spans[2])  # executions in order, apart


def test_a_jax_trace_keeps_its_own_execution_numbers():
    events = [e for e in read_op_events((FIXTURES / "tiny.xplane.pb").read_bytes()) if e.module == "jit_step"]
    assert all(e.run_id is not None and e.run_id >= 0 for e in events)
    assert len({e.run_id for e in events}) == 3


@pytest.mark.slow
def test_a_tensorflow_job_captured_with_a_profile_ranks_and_lists_its_ops(tmp_path):
    pytest.importorskip("tensorflow")
    from xlarun.capture.launch import capture
    from xlarun.navigate.profile import module_profile, run_times
    from xlarun.store.facade import LocalStore

    spec = tmp_path / "spec.yaml"
    text = (CONFIGS / "tf-jit-compile.yaml").read_text()
    spec.write_text(text.replace("script: examples/", f"script: {CONFIGS}/examples/") + "profile: true\n")
    store = LocalStore.open(tmp_path / "store")
    result = capture(spec, store)
    assert result.ok, result.warnings
    assert not any("profile" in w for w in result.warnings), result.warnings
    step = run_times(store, result.run_id).modules[0]
    assert step.name.startswith("a_inference_train_step") and step.module_id is not None  # joined to the dump
    assert step.ref is not None and step.time.executions == 2  # the example's two training steps, each its own
    assert 0 < step.time.steady_mean_ns < step.time.first_ns  # the first step is the slow one
    found = module_profile(store, store.index.module(result.run_id, step.module_id))
    assert found.ops and found.hlo_note is None
    top = found.ops[0]
    assert top.time.count == 2 and top.opcode  # each op ran once per step, and is known from the optimized module
