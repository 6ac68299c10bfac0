"""What `xlarun capture` and `xlarun flags` answer is made in the library (capture/answers.py): the command prints it,
and a Python caller gets the same document."""

from __future__ import annotations

import json

import pytest

from xlarun.capture.answers import capture_document, spec_flags

from .conftest import CONFIGS


@pytest.mark.slow
def test_flags_json_is_the_librarys_answer(cli, tmp_path):
    spec = CONFIGS / "jax-cpu.yaml"
    printed = cli("flags", spec, "--out", tmp_path / "out", "--json")
    assert printed.exit_code == 0, printed.output
    answer = spec_flags(spec, tmp_path / "out").to_json()
    assert json.loads(printed.stdout) == json.loads(json.dumps(answer, default=str))
    assert f"--xla_dump_to={tmp_path / 'out' / 'dump'}" in answer["xla_flags"]


@pytest.mark.slow
def test_capture_json_is_the_librarys_document(cli, tmp_path):
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(tmp_path / "store")  # its own: the session's captured store is shared by other tests
    result = capture(CONFIGS / "jax-cpu.yaml", store)
    document = capture_document(result)
    assert document["run_id"] == result.run_id and document["error"] is None and document["hint"] is None
    assert [m.name for m in document["modules"]] == [m.name for m in result.modules]
    printed = json.loads(cli("capture", CONFIGS / "jax-cpu.yaml", "--store", store.root, "--json").stdout)
    assert set(printed) == set(document) and printed["status"] == "succeeded" and printed["error"] is None
