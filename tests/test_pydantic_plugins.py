"""The ``xlarun`` program builds its models without pydantic's plugin discovery; the library keeps it.

A real pydantic plugin, installed as pydantic finds plugins (an entry point of group ``pydantic`` in a
distribution's metadata), writes the name of every model pydantic builds while it is active."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_capture_imports import JOB  # writes one small module's dump, as XLA names it

PLUGIN = """import os
class Probe:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        with open(os.environ["PROBE_OUT"], "a") as out:
            out.write(schema_type.__name__ + "\\n")
        return None, None, None
plugin = Probe()
"""


@pytest.fixture
def plugin_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    (site / "probe_plugin-0.dist-info").mkdir(parents=True)
    (site / "probe_plugin.py").write_text(PLUGIN)
    (site / "probe_plugin-0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 0\n")
    (site / "probe_plugin-0.dist-info" / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    return {**env, "PYTHONPATH": path, "PROBE_OUT": str(tmp_path / "seen.txt")}


def _seen(env: dict[str, str]) -> list[str]:
    out = Path(env["PROBE_OUT"])
    return sorted(set(out.read_text().split())) if out.exists() else []


def test_a_capture_by_the_program_runs_no_plugin_and_reads_no_package_metadata(tmp_path, plugin_env):
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "spec.yaml").write_text("name: plain\nscript: job.py\nframework: jax\n")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "xlarun", "capture", "spec.yaml", "--store", "store", "--quiet"],
        cwd=tmp_path, env=plugin_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    bare = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=plugin_env, capture_output=True, text=True)
    at_start = {line.split("|")[-1].strip() for line in bare.stderr.splitlines() if line.startswith("import time:")}
    assert {"pydantic", "xlarun.capture.spec"} <= imported  # the spec's models were built...
    assert "importlib.metadata" not in imported - at_start  # ...without reading every distribution's entry points
    assert _seen(plugin_env) == []


def test_the_library_keeps_pydantic_plugins_for_every_model(plugin_env):
    done = subprocess.run([sys.executable, "-c", "import xlarun.capture.spec"], env=plugin_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert {"RunSpec", "DumpSpec", "DockerOptions"} <= set(_seen(plugin_env))


CHILD = """
import sys
from xlarun.pydantic_plugins import LOADER, skip_plugin_discovery
skipped = skip_plugin_discovery()
from xlarun.capture.spec import RunSpec
spec = RunSpec.model_validate({"name": "n", "script": "s.py"})
loader = sys.modules[LOADER]
print(skipped, spec.name, list(loader.get_plugins()), loader.PYDANTIC_ENTRY_POINT_GROUP, skip_plugin_discovery())
"""


def test_the_stand_in_validates_models_and_gives_the_real_loader_s_other_names(plugin_env):
    done = subprocess.run([sys.executable, "-c", CHILD], env=plugin_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # skipped once; the model validates; no plugin; a name pydantic's loader defines comes from the real module; a
    # second call (pydantic's loader now in place) leaves it as it is
    assert done.stdout.split() == ["True", "n", "[]", "pydantic", "False"]
    assert _seen(plugin_env) == []


def test_pydantic_s_own_switch_is_left_to_the_user(plugin_env):
    env = {**plugin_env, "PYDANTIC_DISABLE_PLUGINS": "other_plugin"}  # disables another plugin only: probe still runs
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "False"
    assert "RunSpec" in _seen(plugin_env)
