"""Shared fixtures: real captures of the bundled examples, made once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"


@pytest.fixture(autouse=True)
def _no_user_store(monkeypatch, tmp_path_factory):
    # never touch a developer's ./.xlarun; every test names its store or gets a fresh one
    monkeypatch.setenv("XLARUN_STORE", str(tmp_path_factory.mktemp("default-store") / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def store_path(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def cli():
    """Invoke the CLI: cli(*args) -> click Result with .exit_code, .stdout, .stderr."""
    from xlarun.cli import app

    runner = CliRunner()

    def invoke(*args: str, env: dict | None = None):
        return runner.invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)

    return invoke


def _capture(spec: Path, store_root: Path):
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(store_root)
    result = capture(spec, store)
    return store, result


@pytest.fixture(scope="session")
def jax_run(tmp_path_factory):
    """The bundled JAX example (configs/jax-cpu.yaml) captured for real on CPU: (store, CaptureResult)."""
    pytest.importorskip("jax")
    return _capture(CONFIGS / "jax-cpu.yaml", tmp_path_factory.mktemp("jax") / "store")


@pytest.fixture(scope="session")
def jax_profiled_run(tmp_path_factory):
    """configs/jax-cpu.yaml with ``profile: true``, captured for real: (store path, store, CaptureResult)."""
    pytest.importorskip("jax")
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    folder = tmp_path_factory.mktemp("profiled")
    text = (CONFIGS / "jax-cpu.yaml").read_text().replace("examples/jax_mlp.py", str(CONFIGS / "examples" / "jax_mlp.py"))
    spec = folder / "spec.yaml"
    spec.write_text(text + "profile: true\n")
    store = LocalStore.open(folder / "store")
    return folder / "store", store, capture(spec, store)


@pytest.fixture(scope="session")
def jax_passes_run(tmp_path_factory):
    """configs/jax-passes.yaml: a pass-by-pass capture."""
    pytest.importorskip("jax")
    return _capture(CONFIGS / "jax-passes.yaml", tmp_path_factory.mktemp("jaxpasses") / "store")


@pytest.fixture(scope="session")
def tf_run(tmp_path_factory):
    """configs/tf-jit-compile.yaml captured for real."""
    pytest.importorskip("tensorflow")
    return _capture(CONFIGS / "tf-jit-compile.yaml", tmp_path_factory.mktemp("tf") / "store")


@pytest.fixture(scope="session")
def tf1_run(tmp_path_factory):
    """configs/tf1-autojit.yaml: TF1 graph, auto-jit, clustering debug, GraphDef dumps."""
    pytest.importorskip("tensorflow")
    return _capture(CONFIGS / "tf1-autojit.yaml", tmp_path_factory.mktemp("tf1") / "store")


def at_once(target, count: int) -> None:
    """Call ``target()`` in ``count`` threads released together by one barrier (a race made likely); wait for all."""
    import threading

    start = threading.Barrier(count)

    def run() -> None:
        start.wait()
        target()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def write_spec(folder: Path, text: str, script: str | None = None, script_name: str = "job.py") -> Path:
    """A spec file (and its script) in ``folder``; returns the spec path."""
    folder.mkdir(parents=True, exist_ok=True)
    if script is not None:
        (folder / script_name).write_text(script)
    spec = folder / "spec.yaml"
    spec.write_text(text)
    return spec


# real-Docker fixtures (docker_engine, docker_client, base_image, cpu_image) for every test module
from .corpus_support import xla_corpus  # noqa: E402,F401
from .docker_support import base_image, cpu_image, docker_client, docker_engine  # noqa: E402,F401


def pytest_addoption(parser):
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="torture tests: the long mode (hundreds of injected kills), run by hand",
    )


@pytest.fixture
def soak(request) -> bool:
    """Whether the torture suite runs its long mode (``pytest tests/torture --soak``)."""
    return bool(request.config.getoption("--soak"))


#: Fixtures that make a real framework capture or need Docker: a test using one is slow however short its body
#: (bisect_store, captured, raw_dump and real_dump are those of test_bisect, test_api, test_import and torture).
_SLOW_FIXTURES = frozenset(
    {
        "jax_run",
        "jax_passes_run",
        "tf_run",
        "tf1_run",
        "bisect_store",
        "zoo_runs",
        "captured",
        "raw_dump",
        "real_dump",
        "docker_engine",
        "docker_client",
        "base_image",
        "cpu_image",
        "cluster",  # a real Ray cluster (tests/test_batch_ray.py)
    }
)


def pytest_collection_modifyitems(config, items):
    # the fast tier (`pytest -m "not slow"`) leaves out real captures, Docker, browsers and TensorFlow without
    # each such test having to say so
    for item in items:
        if _SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            item.get_closest_marker(m) for m in ("docker", "browser", "tf")
        ):
            item.add_marker(pytest.mark.slow)


#: Skips that say a test does not apply to this host (it has what the test checks the absence of); every other
#: skip under ``CI=true`` is a failure: the CI installs everything the suite needs, so a skip there hides a broken set-up.
_SKIPS_THAT_APPLY_EVERYWHERE = ("this Docker host has the NVIDIA runtime", "this host has IPUs")


def _under_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (_under_ci() and report.skipped and not hasattr(report, "wasxfail")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(allowed in reason for allowed in _SKIPS_THAT_APPLY_EVERYWHERE):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, where nothing the suite needs may be missing: {reason}"


@pytest.fixture(scope="session")
def bisect_store(tmp_path_factory):
    """One store holding pass-by-pass captures of the three bisect examples."""
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    path = tmp_path_factory.mktemp("bisect") / "store"
    store = LocalStore.open(path, create=True)
    for name in ("bf16", "algsimp", "stable", "bf16-attention"):
        result = capture(CONFIGS / f"bisect-{name}.yaml", store)
        assert result.ok, result.warnings
    return path


@pytest.fixture(scope="session")
def zoo_runs(tmp_path_factory):
    """The zoo's programs (examples/zoo), each captured once, on demand, into one store:
    ``zoo_runs(name) -> (store path, run id)``; a program whose framework is missing is skipped."""
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    path = tmp_path_factory.mktemp("zoo") / "store"
    runs: dict[str, str] = {}

    def run_of(name: str) -> tuple[Path, str]:
        pytest.importorskip("tensorflow" if name.startswith("tf") else "jax")
        if name not in runs:
            store = LocalStore.open(path, create=True)
            result = capture(REPO / "examples" / "zoo" / name / "spec.yaml", store)
            assert result.ok, result.warnings
            runs[name] = result.run_id
        return path, runs[name]

    return run_of
