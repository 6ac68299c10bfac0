"""XLA's runners inside a container image, found there and driven through the real Docker engine.

No image with a real hlo_runner_main can be had here (NVIDIA's JAX images are not reachable), so the test builds
one on the local base with a stand-in runner at /usr/local/bin/hlo_runner_main that prints its argv and the
`## Execution time` lines the real one prints, and exits as told.
"""

from __future__ import annotations

import json
import textwrap

import pytest

# Marked per test: real Docker and a real JAX capture

STAND_IN = textwrap.dedent(
    """\
    #!/usr/bin/python3
    import json, os, sys
    print("ARGV " + json.dumps(sys.argv), flush=True)
    assert os.path.exists(sys.argv[-1]), "the dump file is mounted"
    for i in range(3):
        print(f"## Execution time, file={sys.argv[-1]} repeat={i} duration={(i + 1) * 1000}ns", flush=True)
    sys.exit(int(os.environ.get("STAND_IN_EXIT", "0")))
    """
)


@pytest.fixture(scope="module")
def runner_image(docker_engine, base_image, tmp_path_factory):
    folder = tmp_path_factory.mktemp("runner-image")
    (folder / "hlo_runner_main").write_text(STAND_IN)
    (folder / "Dockerfile").write_text(
        f"FROM {base_image}\nCOPY hlo_runner_main /usr/local/bin/hlo_runner_main\nRUN chmod 755 /usr/local/bin/hlo_runner_main\n"
    )
    tag = "xlarun-test-runner:latest"
    docker_engine.images.build(path=str(folder), tag=tag, rm=True, labels={"xlarun.kind": "test"})
    yield tag
    docker_engine.images.remove(tag, force=True)


@pytest.mark.slow
def test_runner_is_found_in_the_image_and_replays_a_dump(cli, jax_run, runner_image, docker_client):
    from xlarun.capture.images import find_runner_in_image

    store, result = jax_run
    assert find_runner_in_image(runner_image, "hlo_runner_main") == "/usr/local/bin/hlo_runner_main"
    assert find_runner_in_image(runner_image, "run_hlo_module") is None
    out = cli(
        "replay",
        "jit_accuracy",
        "--engine",
        "hlo_runner_main",
        "--image",
        runner_image,
        "--file",
        next(
            f.path
            for f in store.index.module(result.run_id, result.modules[1].module_id).files
            if f.stage == "before_optimizations" and f.format == "text"
        ),
        "--store",
        store.root,
        "--json",
    )
    assert out.exit_code == 0, out.stderr + out.stdout
    data = json.loads(out.stdout)
    assert data["engine"] == "hlo_runner_main" and data["verdict"] == "ran"
    argv = data["command"]
    assert argv[0] == "/usr/local/bin/hlo_runner_main"
    assert "--input_format=text" in argv and "--device_type=host" in argv
    assert [round(t * 1e9) for t in data["run_times_s"]] == [1000, 2000, 3000]


@pytest.mark.slow
def test_an_image_without_the_runner_is_a_clear_error(cli, jax_run, base_image, docker_client):
    store, _ = jax_run
    out = cli("replay", "jit_accuracy", "--engine", "run_hlo_module", "--image", base_image, "--store", store.root)
    assert out.exit_code == 3
    assert f"image {base_image} has no run_hlo_module" in out.stderr
