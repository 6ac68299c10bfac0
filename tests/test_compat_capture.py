"""Real captures with other framework versions, each in its own venv (built by `scripts/compat.py venvs --ends`).

The job runs under the venv's python; xlarun (this process) archives and indexes what that version's XLA wrote.
Instruction counts are checked against XLA's own parser (jaxlib in this venv), not against xlarun's reading.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from xlarun.capture.launch import capture
from xlarun.store.facade import LocalStore

from .compat_support import REPO, require_compat

# Marked per test: captures with other framework versions


def capture_in(python: Path, spec: str, folder: Path):
    """configs/<spec> captured with `python` running its script: (store, result, modules ranked)."""
    source = REPO / "configs" / spec
    data = yaml.safe_load(source.read_text())
    data["script"] = str((source.parent / data["script"]).resolve())
    data["python"] = str(python)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(yaml.safe_dump(data))
    store = LocalStore.open(folder / "store")
    result = capture(folder / "spec.yaml", store)
    assert result.status.value == "succeeded", result
    return store, result, store.index.modules(result.run_id)


def xla_count(text: str) -> int:
    """Instructions as XLA's own parser builds them (every computation, parameters and fused bodies included)."""
    xla_client = pytest.importorskip("jax._src.lib").xla_client
    parse = getattr(getattr(xla_client, "hlo", None), "hlo_module_from_text", None) or xla_client._xla.hlo_module_from_text
    return sum(len(c.instructions()) for c in parse(text).computations())


def stage_text(store: LocalStore, run_id: str, module, stage: str) -> str:
    path = next(
        f
        for f in store.stored_files(run_id)
        if f.path.startswith(f"module_{module.module_id:04d}.") and f.path.endswith(f".{stage}.txt")
    )
    return store.read_file(run_id, path.path).decode()


@pytest.fixture(scope="module")
def torch_xla_run(tmp_path_factory):
    return capture_in(require_compat("torch_xla-2.9.0"), "torch-xla.yaml", tmp_path_factory.mktemp("torch_xla"))


@pytest.fixture(scope="module")
def jax_0_4_30_run(tmp_path_factory):
    return capture_in(require_compat("jax-0.4.30"), "jax-cpu.yaml", tmp_path_factory.mktemp("jax-0.4.30"))


@pytest.mark.slow
def test_pytorch_xla_training_step_is_ranked_first(torch_xla_run):
    _store, _result, modules = torch_xla_run
    # the example compiles the training step first (module 0), then its evaluation
    assert [m.name.split(".")[0] for m in modules] == ["SyncTensorsGraph"] * 2
    assert modules[0].module_id == 0 and modules[0].compute_ops > modules[1].compute_ops > 0


@pytest.mark.slow
def test_pytorch_xla_graphs_are_indexed_with_xlas_counts(torch_xla_run):
    store, result, modules = torch_xla_run
    for module in modules:
        assert module.parse_error is None
        assert module.instr_before == xla_count(stage_text(store, result.run_id, module, "before_optimizations"))
        assert module.instr_after == xla_count(stage_text(store, result.run_id, module, "cpu_after_optimizations"))


@pytest.mark.slow
def test_pytorch_xla_files_are_all_decoded(torch_xla_run):
    store, result, _ = torch_xla_run
    assert [f.path for f in store.index.run_files(result.run_id) if f.kind == "unknown"] == []


@pytest.mark.slow
def test_jax_0_4_30_ranks_jit_train_step_first_with_xlas_counts(jax_0_4_30_run):
    store, result, modules = jax_0_4_30_run
    main = modules[0]
    assert main.name == "jit_train_step", f"{main.name} ranked first; {[m.parse_error for m in modules if m.parse_error][:1]}"
    assert main.instr_before == xla_count(stage_text(store, result.run_id, main, "before_optimizations"))
    assert main.instr_after == xla_count(stage_text(store, result.run_id, main, "cpu_after_optimizations"))
    assert all(m.instr_before is not None for m in modules)
