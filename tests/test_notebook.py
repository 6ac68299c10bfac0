"""examples/xlarun_in_a_notebook.ipynb, executed for real in a Jupyter kernel so that it cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

# Marked per test: executes a notebook in a Jupyter kernel with JAX

pytest.importorskip("jax")
nbclient = pytest.importorskip("nbclient", reason="needs nbclient, ipykernel and nbformat (the dev extra)")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "xlarun_in_a_notebook.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    store = tmp_path_factory.mktemp("notebook") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XLARUN_STORE", str(store))  # the kernel inherits it
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(
            notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
        )
        client.execute()
    return notebook, store


def _outputs(cell) -> list[dict]:
    return list(cell.get("outputs", []))


def _cell(notebook, source_start: str):
    return next(c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(source_start))


@pytest.mark.slow
def test_every_cell_runs_without_error(executed):
    notebook, store = executed
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not [o for o in _outputs(cell) if o["output_type"] == "error"], cell.source
    assert (store / "VERSION").is_file()  # it wrote where XLARUN_STORE points, not next to the notebook
    assert not (NOTEBOOK.parent / ".xlarun").exists()


@pytest.mark.slow
def test_the_displays_are_html_with_the_clis_text_beside(executed):
    notebook, _store = executed
    run_cell = _outputs(_cell(notebook, "run = xlarun.jax.capture"))[0]["data"]
    assert "jit_train_step" in run_cell["text/html"] and run_cell["text/plain"].startswith("run ")
    module = _outputs(_cell(notebook, "step = run.main"))[0]["data"]
    assert "<svg" in module["text/html"] and "<script" not in module["text/html"]
    assert module["text/plain"].startswith("module_") and "jit_train_step" in module["text/plain"]
    facts = _outputs(_cell(notebook, "print(run.kind"))[0]["text"]
    assert facts.startswith("inline jax_mlp.train_step jax_mlp.py ")


@pytest.mark.slow
def test_find_replay_and_the_fusion_diff(executed):
    notebook, _store = executed
    assert _outputs(_cell(notebook, 'store.module("train_step")'))[0]["data"]["text/plain"] == "True"
    found = _outputs(_cell(notebook, "store.find("))[0]["data"]["text/plain"]
    assert "jit_train_step" in found and "op_name" in found
    replay = _outputs(_cell(notebook, "replay = step.replay()"))[0]["data"]["text/plain"]
    assert replay.splitlines()[-1] == "match"
    fusion = _cell(notebook, "passes = xlarun.jax.capture")
    printed = _outputs(fusion)[0]["text"]
    assert printed.startswith("instructions: 117 -> 199 (+82)\nadded: 15 (15 fusion)")  # as the README's CLI capture shows
    shown = _outputs(fusion)[1]["data"]
    assert "after fusion" in shown["text/plain"].splitlines()[0] and "fusions formed: 15" in shown["text/plain"]
    assert 'class="line diff-add"' in shown["text/html"]
