"""The zoo (examples/zoo): every xlarun feature on every real program, through scripts/zoo.py's harness.

One slow test per program: it captures the program twice into its own store and runs modules, show, replay,
render, diff, bisect, bundle -> import -> replay and report on the program's step. Cells that fail today because
of xlarun bugs are xfail(strict=True) so they flip when the fix lands.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from xlarun.capture.spec_yaml import load_spec

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("zoo_harness", ROOT / "scripts" / "zoo.py")
assert _spec and _spec.loader
zoo = importlib.util.module_from_spec(_spec)
sys.modules["zoo_harness"] = zoo
_spec.loader.exec_module(zoo)

# program -> the features that fail today, and why (the bug xlarun has to fix)
KNOWN_BUGS: dict[str, dict[str, str]] = {}  # none today; a documented refusal is zoo.EXPECTED_BISECT's, not a bug


def test_every_zoo_folder_has_a_valid_spec_and_a_step_name():
    folders = sorted(p.name for p in zoo.ZOO.iterdir() if (p / "spec.yaml").is_file())
    assert folders == sorted(zoo.STEPS)
    for name in folders:
        loaded = load_spec(zoo.ZOO / name / "spec.yaml")
        assert loaded.spec.name == "zoo-" + name.replace("_", "-")
        assert loaded.script == zoo.ZOO / name / "program.py"


def _params():
    for name in zoo.STEPS:
        marks = [pytest.mark.slow]
        if name in KNOWN_BUGS:
            reason = "; ".join(f"{f}: {why}" for f, why in KNOWN_BUGS[name].items())
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_params()))
def test_every_feature_on_the_zoo_program(name, tmp_path):
    pytest.importorskip("tensorflow" if name.startswith("tf") else "jax")
    runner = zoo.Runner(tmp_path / "store", timeout=300)
    result = zoo.run_program(name, runner, tmp_path)
    cells = result["cells"]
    failing = {f: c["note"] for f, c in cells.items() if not c["ok"] and not c.get("refused")}
    assert not failing, f"{name}: {failing}"
    assert set(cells) == set(zoo.FEATURES)
    assert zoo.STEPS[name] in result["step"]
    assert cells["modules"]["note"].startswith(f"first '{result['step']}'")
    replay = cells["replay"]["note"]
    assert "compared with" in replay
    if "compared with  nothing" not in replay:  # a snapshot or a reference platform was compared: it must match
        assert replay.startswith("match")
    expected = zoo.EXPECTED_BISECT.get(name)
    if expected is None:
        assert cells["bisect"]["note"].startswith("no step diverges")
    elif expected[0] == "culprit":  # bf16: a true culprit that must stay on, named as such
        assert cells["bisect"]["ok"] and cells["bisect"]["note"] == f"culprit {expected[1]}, as expected"
    else:  # a documented refusal: one line, exit 2
        assert cells["bisect"]["refused"] and cells["bisect"]["rc"] == 2
    if name == "sharded":  # bisected on its 8 devices (steps after the SPMD partitioner), not refused
        assert "steps run on 8 devices" in cells["bisect"]["note"]
    assert [f for f, c in cells.items() if c.get("refused")] == (["bisect"] if expected and expected[0] == "refused" else [])
