"""The container backend: exact translation of jobs (CPU, GPU, IPU) and real runs in a real engine."""

from __future__ import annotations

import _thread
import json
import os
import signal
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

from tests.docker_support import base_image, cpu_image, docker_client, docker_engine, xlarun_containers  # noqa: F401
from xlarun.capture.backends.base import Job, JobPaths
from xlarun.capture.backends.docker import (
    CWD_MOUNT,
    IPUOF_DIR_MOUNT,
    IPUOF_FILE_MOUNT,
    RUN_MOUNT,
    SCRIPT_MOUNT,
    ContainerSpec,
    DockerBackend,
    GpuRequest,
    HostFacts,
    Mount,
    container_path,
    ipu_device_files,
    ipus_of_device_id,
    run_in_image,
    translate_job,
)
from xlarun.capture.backends.docker_options import DockerOptions
from xlarun.errors import EnvironmentProblem, InputError, SpecError
from xlarun.store.rows import RunStatus

HOST = HostFacts(uid=1234, gid=567, env={"PATH": "/usr/bin", "HOME": "/home/me"}, ipu_count=0)


def make_job(tmp_path: Path, *args: str, env: dict | None = None, cwd: Path | None = None, timeout_s=None) -> Job:
    script_dir = tmp_path / "project"
    run_dir = tmp_path / "runs" / "r-20250101-abc"
    script_dir.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    return Job(
        argv=["/opt/venv/bin/python3.11", str(script_dir / "model.py"), *args],
        env=dict(env or {}),  # capture composes a container job's environment from nothing
        cwd=cwd or script_dir,
        run_dir=run_dir,
        timeout_s=timeout_s,
        script_dir=script_dir,
    )


# ------------------------------------------------------------------------------------ translation
def test_job_paths_are_the_run_mount(tmp_path):
    assert DockerBackend("docker-cpu").job_paths(tmp_path) == JobPaths.under("/xlarun/run")


def test_cpu_job_translates_exactly(tmp_path):
    dump = JobPaths.under(RUN_MOUNT).dump_dir
    job = make_job(tmp_path, "--steps", "3", env={"XLA_FLAGS": f"--xla_dump_to={dump}", "TF_CPP_MIN_LOG_LEVEL": "1"})
    spec = translate_job(job, DockerOptions(), "docker-cpu", HOST)
    project, run = str(tmp_path / "project"), str(tmp_path / "runs" / "r-20250101-abc")
    assert spec == ContainerSpec(
        image="xlarun-cpu:latest",
        command=["python3", "/xlarun/script/model.py", "--steps", "3"],
        working_dir=SCRIPT_MOUNT,
        environment={
            "XLA_FLAGS": "--xla_dump_to=/xlarun/run/dump",
            "TF_CPP_MIN_LOG_LEVEL": "1",
            "PYTHONUNBUFFERED": "1",
            "HOME": "/tmp",  # uid 1234 has no home in the image
        },
        user="1234:567",
        mounts=[Mount(project, SCRIPT_MOUNT, True), Mount(run, RUN_MOUNT, False)],
        labels={
            "xlarun.run": "r-20250101-abc",
            "xlarun.owner-pid": "0",
            "xlarun.kind": "docker-cpu",
            "xlarun.version": spec.labels["xlarun.version"],
        },
        memswap_limit=None,
    )
    kwargs = spec.create_kwargs()
    assert kwargs["init"] is True and kwargs["tty"] is False
    assert [dict(m) for m in kwargs["mounts"]] == [
        {"Target": SCRIPT_MOUNT, "Source": project, "Type": "bind", "ReadOnly": True},
        {"Target": RUN_MOUNT, "Source": run, "Type": "bind", "ReadOnly": False},
    ]
    assert "device_requests" not in kwargs and "devices" not in kwargs and "network_mode" not in kwargs


def test_host_paths_in_arguments_and_environment_are_rewritten(tmp_path):
    job = make_job(tmp_path, env={"POPLAR_ENGINE_OPTIONS": "x"})
    run = job.run_dir
    job.argv += [str(run / "out.txt"), f"--data={job.script_dir}/data.npz", "/etc/hosts", f"{run}-sibling"]
    job.env["XLA_FLAGS"] = f"--xla_dump_to={run}/dump --xla_dump_hlo_as_text"
    spec = translate_job(job, DockerOptions(), "docker-cpu", HOST)
    assert spec.command[2:] == ["/xlarun/run/out.txt", "--data=/xlarun/script/data.npz", "/etc/hosts", f"{run}-sibling"]
    assert spec.environment["XLA_FLAGS"] == "--xla_dump_to=/xlarun/run/dump --xla_dump_hlo_as_text"
    assert container_path(run / "dump" / "a.txt", job) == "/xlarun/run/dump/a.txt"
    assert container_path(job.script_dir, job) == SCRIPT_MOUNT
    assert container_path("/elsewhere/file", job) is None


def test_working_directory_outside_the_mounts_is_mounted_read_only(tmp_path):
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    spec = translate_job(make_job(tmp_path, cwd=elsewhere / "."), DockerOptions(), "docker-cpu", HOST)
    assert spec.working_dir == CWD_MOUNT
    assert spec.mounts[2] == Mount(str(elsewhere), CWD_MOUNT, True)


def test_host_specific_variables_stay_behind(tmp_path):
    copied = {"PATH": "/opt/venv/bin:/usr/bin", "PYTHONPATH": "/src", "CUDA_VISIBLE_DEVICES": "3", "EDITOR": "vi"}
    spec = translate_job(
        make_job(tmp_path, env=copied), DockerOptions(env={"PYTHONPATH": "/xlarun/script/lib"}), "docker-cpu", HOST
    )
    assert "PATH" not in spec.environment and "CUDA_VISIBLE_DEVICES" not in spec.environment
    assert spec.environment["EDITOR"] == "vi"
    assert spec.environment["PYTHONPATH"] == "/xlarun/script/lib"  # options.env wins


def test_interpreter_is_the_images_unless_named(tmp_path):
    job = make_job(tmp_path)
    assert translate_job(job, DockerOptions(), "docker-cpu", HOST).command[0] == "python3"
    job.argv[0] = "python3.11"  # a spec's `python:` names the image's interpreter
    assert translate_job(job, DockerOptions(), "docker-cpu", HOST).command[0] == "python3.11"


def test_backend_from_a_spec_section():
    class Section:  # what spec.BackendSpec carries
        kind = "docker-gpu"
        options: ClassVar[dict] = {"gpus": [1], "mem_limit": "32g"}

    backend = DockerBackend.from_spec(Section())
    assert (backend.kind, backend.options.gpus, backend.options.shm_size, backend.options.image) == (
        "docker-gpu",
        [1],
        "8g",
        "xlarun-gpu:latest",
    )
    Section.options = {"gpu": 1}
    with pytest.raises(SpecError, match=r"backend\.options"):
        DockerBackend.from_spec(Section())

    class Inline:  # options written in the section itself
        kind = "docker-cpu"
        options = None
        image = "my/jax:1"

    assert DockerBackend.from_spec(Inline()).options.image == "my/jax:1"


@pytest.mark.parametrize(
    ("user", "expected", "home"),
    [
        ("host", "1234:567", "/tmp"),
        ("image", None, None),
        ("root", "0:0", None),
        ("1000:1000", "1000:1000", "/tmp"),
        ("xlarun", "xlarun", None),
    ],
)
def test_user_modes(tmp_path, user, expected, home):
    spec = translate_job(make_job(tmp_path), DockerOptions(user=user), "docker-cpu", HOST)
    assert spec.user == expected
    assert spec.environment.get("HOME") == home


def test_gpu_kind_asks_for_all_gpus_and_more_shared_memory(tmp_path):
    spec = translate_job(make_job(tmp_path), DockerOptions(), "docker-gpu", HOST)
    assert spec.image == "xlarun-gpu:latest"
    assert spec.device_requests == [GpuRequest(count=-1)]
    assert spec.shm_size == "8g"
    kwargs = spec.create_kwargs()
    assert [dict(r) for r in kwargs["device_requests"]] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert kwargs["shm_size"] == "8g"


@pytest.mark.parametrize(
    ("gpus", "count", "ids"),
    [(2, 2, []), ([0, 3], 0, ["0", "3"]), (["GPU-8f2e0c1a"], 0, ["GPU-8f2e0c1a"])],
)
def test_gpu_count_or_ids(tmp_path, gpus, count, ids):
    spec = translate_job(make_job(tmp_path), DockerOptions(gpus=gpus, shm_size="2g"), "docker-gpu", HOST)
    request = dict(spec.create_kwargs()["device_requests"][0])
    assert (request["Count"], request["DeviceIDs"], request["Capabilities"]) == (count, ids, [["gpu"]])
    assert spec.shm_size == "2g"


def test_generic_kind_needs_an_image_and_takes_gpus(tmp_path):
    with pytest.raises(SpecError, match=r"needs options\.image"):
        DockerBackend("docker")
    spec = translate_job(make_job(tmp_path), DockerOptions(image="nvcr.io/nvidia/jax:25.04-py3", gpus=1), "docker", HOST)
    assert spec.image == "nvcr.io/nvidia/jax:25.04-py3" and spec.device_requests == [GpuRequest(count=1)]
    assert spec.shm_size is None and spec.devices == []


@pytest.mark.parametrize(
    ("count", "table"),
    [
        (4, {0: [0], 3: [3], 4: [0, 1], 5: [2, 3], 6: [0, 1, 2, 3]}),
        (
            16,
            {
                15: [15],
                16: [0, 1],
                23: [14, 15],
                24: [0, 1, 2, 3],
                27: [12, 13, 14, 15],
                28: list(range(8)),
                29: list(range(8, 16)),
                30: list(range(16)),
            },
        ),
    ],
)
def test_multi_ipu_device_ids(count, table):
    assert {device_id: ipus_of_device_id(device_id, count) for device_id in table} == table


def test_unknown_ipu_device_id_is_an_input_error():
    with pytest.raises(InputError, match="device id 7 does not exist on a host with 4 IPUs"):
        ipus_of_device_id(7, 4)


def test_ipu_device_id_adds_what_gc_docker_adds(tmp_path):
    spec = translate_job(make_job(tmp_path), DockerOptions(ipu_device_id=5, ipu_count=4), "docker-ipu", HOST)
    assert spec.devices == [
        "/dev/ipu2:/dev/ipu2:rwm",
        "/dev/ipu2_ex:/dev/ipu2_ex:rwm",
        "/dev/ipu2_mailbox:/dev/ipu2_mailbox:rwm",
        "/dev/ipu2_mem:/dev/ipu2_mem:rwm",
        "/dev/ipu3:/dev/ipu3:rwm",
        "/dev/ipu3_ex:/dev/ipu3_ex:rwm",
        "/dev/ipu3_mailbox:/dev/ipu3_mailbox:rwm",
        "/dev/ipu3_mem:/dev/ipu3_mem:rwm",
    ]
    assert spec.cap_add == [] and spec.ulimits == [] and spec.network_mode is None and spec.ipc_mode is None
    assert spec.image == "xlarun-ipu:latest"
    assert [dict(d) if isinstance(d, dict) else d for d in spec.create_kwargs()["devices"]] == spec.devices


def test_ipu_kind_defaults_to_every_ipu_on_the_host(tmp_path):
    two = HostFacts(uid=0, gid=0, env={}, ipu_count=2)
    spec = translate_job(make_job(tmp_path), DockerOptions(), "docker-ipu", two)
    assert spec.devices == [f"{d}:{d}:rwm" for ipu in (0, 1) for d in ipu_device_files(ipu)]
    assert translate_job(make_job(tmp_path), DockerOptions(), "docker-ipu", HOST).devices == []


def test_ipu_over_fabric_exactly(tmp_path):
    config = tmp_path / "ipuof.conf"
    config.write_text("{}")
    options = DockerOptions(ipu_over_fabric=True, ipuof_config_path=config, cap_add=["SYS_PTRACE"])
    spec = translate_job(make_job(tmp_path), options, "docker-ipu", HOST)
    assert spec.devices == ["/dev/infiniband:/dev/infiniband:rwm"]
    assert spec.cap_add == ["IPC_LOCK", "SYS_PTRACE"]
    assert spec.ulimits == [("memlock", -1, -1)]
    assert (spec.network_mode, spec.ipc_mode) == ("host", "host")
    assert spec.mounts[-1] == Mount(str(config), IPUOF_FILE_MOUNT, True)
    assert spec.environment["IPUOF_CONFIG_PATH"] == IPUOF_FILE_MOUNT
    kwargs = spec.create_kwargs()
    assert [dict(u) for u in kwargs["ulimits"]] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert (kwargs["network_mode"], kwargs["ipc_mode"], kwargs["cap_add"]) == ("host", "host", ["IPC_LOCK", "SYS_PTRACE"])


def test_ipu_over_fabric_takes_the_config_folder_from_the_job_environment(tmp_path):
    folder = tmp_path / "ipuof.conf.d"
    folder.mkdir()
    job = make_job(tmp_path, env={"IPUOF_CONFIG_PATH": str(folder)})
    spec = translate_job(job, DockerOptions(ipu_over_fabric=True), "docker-ipu", HOST)
    assert spec.mounts[-1] == Mount(str(folder), IPUOF_DIR_MOUNT, True)
    assert "IPUOF_CONFIG_PATH" not in spec.environment


def test_poplar_reports_go_to_the_run_folder(tmp_path):
    job = make_job(tmp_path, env={"POPLAR_ENGINE_OPTIONS": '{"autoReport.all": "true"}'})
    spec = translate_job(job, DockerOptions(), "docker-ipu", HOST)
    assert json.loads(spec.environment["POPLAR_ENGINE_OPTIONS"]) == {
        "autoReport.all": "true",
        "autoReport.directory": "/xlarun/run/poplar",
    }
    chosen = json.dumps({"autoReport.all": "true", "autoReport.directory": str(job.run_dir / "reports")})
    spec = translate_job(make_job(tmp_path, env={"POPLAR_ENGINE_OPTIONS": chosen}), DockerOptions(), "docker-ipu", HOST)
    assert json.loads(spec.environment["POPLAR_ENGINE_OPTIONS"])["autoReport.directory"] == "/xlarun/run/reports"


def test_extra_devices_volumes_network_and_memory(tmp_path):
    options = DockerOptions(
        devices=["/dev/fuse"],
        volumes=[f"{tmp_path}/data:/data:ro", "/cache:/cache"],
        network="none",
        ipc="private",
        mem_limit="2g",
        labels={"team": "xla"},
    )
    spec = translate_job(make_job(tmp_path), options, "docker-cpu", HOST)
    assert spec.devices == ["/dev/fuse:/dev/fuse:rwm"]
    assert spec.mounts[2:] == [Mount(f"{tmp_path}/data", "/data", True), Mount("/cache", "/cache", False)]
    assert (spec.network_mode, spec.ipc_mode, spec.mem_limit, spec.memswap_limit) == ("none", "private", "2g", "2g")
    assert spec.labels["team"] == "xla" and spec.labels["xlarun.run"] == "r-20250101-abc"


@pytest.mark.parametrize(
    "bad",
    [
        {"remove": False},
        {"pull": "always"},
        {"shm_size": "lots"},
        {"mem_limit": "8 GB"},
        {"gpus": 0},
        {"gpus": []},
        {"volumes": ["/a"]},
        {"volumes": ["/a:/b:rx"]},
        {"devices": ["ipu0"]},
        {"ipu_over_fabric": True, "network": "bridge"},
        {"user": "a b"},
        {"ipu_device_id": -1},
        {"colour": "red"},
    ],
)
def test_bad_options_are_rejected(bad):
    with pytest.raises(ValidationError):
        DockerOptions(**bad)


def test_ipu_options_need_an_ipu_kind():
    with pytest.raises(SpecError, match="IPU options need kind docker-ipu"):
        DockerBackend("docker-cpu", DockerOptions(ipu_device_id=0))


def test_every_option_is_documented_in_the_schema():
    properties = DockerOptions.model_json_schema()["properties"]
    assert set(properties) == set(DockerOptions.model_fields)
    assert all(len(p.get("description", "")) > 20 for p in properties.values())


def test_daemon_down_is_an_environment_problem(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    with pytest.raises(EnvironmentProblem) as caught:
        DockerBackend("docker-cpu", host=HOST).launch(make_job(tmp_path), lambda s, t: None)
    assert caught.value.message.startswith(f"cannot reach the Docker daemon at unix://{tmp_path}/dead.sock: start it")
    assert "DOCKER_HOST" in caught.value.message
    assert caught.value.exit_code == 3


# ----------------------------------------------------------------------------------- real engine
def real_job(tmp_path: Path, source: str, timeout_s: float | None = 120, env: dict | None = None) -> Job:
    script_dir = tmp_path / "script"
    script_dir.mkdir(exist_ok=True)
    (script_dir / "job.py").write_text(source)
    run_dir = tmp_path / "run-docker-test"
    run_dir.mkdir(exist_ok=True)
    return Job(
        argv=[sys.executable, str(script_dir / "job.py")],
        env=dict(env or {}),
        cwd=script_dir,
        run_dir=run_dir,
        timeout_s=timeout_s,
        script_dir=script_dir,
    )


class Sink:
    def __init__(self):
        self.chunks: list[tuple[float, str, str]] = []

    def __call__(self, stream: str, text: str) -> None:
        self.chunks.append((time.monotonic(), stream, text))

    def text(self, stream: str) -> str:
        return "".join(t for _, s, t in self.chunks if s == stream)


JAX_MODEL = """
import sys, jax, jax.numpy as jnp
def f(x, w):
    return jnp.tanh(x @ w).sum()
print("jax", jax.__version__, "devices", jax.devices())
print(jax.jit(f)(jnp.ones((4, 8)), jnp.ones((8, 2))))
print("done", file=sys.stderr)
"""


@pytest.mark.docker
def test_jax_dump_lands_in_the_host_run_folder(tmp_path, docker_client, cpu_image):
    backend = DockerBackend("docker-cpu", DockerOptions(image=cpu_image))
    dump = backend.job_paths(tmp_path).dump_dir
    job = real_job(tmp_path, JAX_MODEL, env={"XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text"})
    sink = Sink()
    result = backend.launch(job, sink)
    assert result.status is RunStatus.SUCCEEDED, sink.text("stderr")
    assert result.exit_code == 0
    assert sink.text("stdout").startswith(f"jax {version('jax')} devices [CpuDevice(id=0)]\n")
    assert sink.text("stderr") == "done\n"
    files = {p.name for p in (job.run_dir / "dump").iterdir()}
    assert any(n.endswith(".jit_f.before_optimizations.txt") for n in files), sorted(files)
    assert any(n.endswith(".jit_f.cpu_after_optimizations.txt") for n in files), sorted(files)
    for path in (job.run_dir / "dump").rglob("*"):
        assert path.stat().st_uid == os.getuid()
    text = next((job.run_dir / "dump").glob("*jit_f.before_optimizations.txt")).read_text()
    assert "tanh" in text
    assert result.details["image_id"].startswith("sha256:")
    assert result.details["image_labels"]["xlarun.build-arg.jax_version"] == "0.10.2"
    assert result.details["oom_killed"] is False
    assert result.details["versions"] == {
        "jax": version("jax"),
        "jaxlib": version("jaxlib"),
        "tensorflow": version("tensorflow-cpu"),
    }


@pytest.mark.docker
def test_a_non_root_job_hands_its_files_back(tmp_path, docker_client, cpu_image):
    backend = DockerBackend("docker-cpu", DockerOptions(image=cpu_image, user="image"))
    source = "import os\nos.makedirs('/xlarun/run/dump/sub')\nopen('/xlarun/run/dump/sub/x.txt','w').write(str(os.getuid()))\n"
    job = real_job(tmp_path, source)
    result = backend.launch(job, Sink())
    assert result.status is RunStatus.SUCCEEDED, result
    written = job.run_dir / "dump" / "sub" / "x.txt"
    assert written.read_text() == "1000"  # the image's non-root user wrote it
    assert written.stat().st_uid == os.getuid() and written.parent.stat().st_uid == os.getuid()
    assert result.details["run_dir_chowned"] is (os.getuid() != 1000)


@pytest.mark.docker
def test_output_streams_while_the_job_runs(tmp_path, docker_client, cpu_image):
    source = "import time, sys\nprint('first')\nprint('err', file=sys.stderr)\ntime.sleep(3)\nprint('second')\n"
    sink = Sink()
    result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image)).launch(real_job(tmp_path, source), sink)
    assert result.status is RunStatus.SUCCEEDED
    first = next(t for t, s, text in sink.chunks if "first" in text)
    second = next(t for t, s, text in sink.chunks if "second" in text)
    assert second - first > 2.0
    assert sink.text("stdout") == "first\nsecond\n" and sink.text("stderr") == "err\n"


@pytest.mark.docker
def test_failing_job_reports_its_exit_code(tmp_path, docker_client, cpu_image):
    result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image)).launch(
        real_job(tmp_path, "import sys\nsys.exit(3)\n"), Sink()
    )
    assert (result.status, result.exit_code, result.error) == (RunStatus.FAILED, 3, None)


@pytest.mark.docker
def test_deadline_kills_a_sleeping_job(tmp_path, docker_client, cpu_image):
    started = time.monotonic()
    result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image)).launch(
        real_job(tmp_path, "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n", timeout_s=2), Sink()
    )
    assert result.status is RunStatus.TIMED_OUT
    assert result.error == "killed at the 2 s deadline"
    assert time.monotonic() - started < 20
    assert xlarun_containers(docker_client) == []


@pytest.mark.docker
def test_out_of_memory_is_reported(tmp_path, docker_client, cpu_image):
    source = "blocks = []\nfor _ in range(64):\n    blocks.append(b'x' * (16 << 20))\nprint('survived')\n"
    result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image, mem_limit="64m")).launch(
        real_job(tmp_path, source), Sink()
    )
    assert result.status is RunStatus.FAILED
    assert result.details["oom_killed"] is True
    assert (
        result.error == "out of memory: the kernel killed the job when it passed the 64m memory limit (backend.options.mem_limit)"
    )


@pytest.mark.docker
def test_ctrl_c_stops_and_removes_the_container(tmp_path, docker_client, cpu_image):
    # Ctrl-C as in a terminal: under nohup SIGINT is ignored, and interrupt_main then does nothing
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(3, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image)).launch(
            real_job(tmp_path, "import time\ntime.sleep(600)\n"), Sink()
        )
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert result.status is RunStatus.INTERRUPTED
    assert time.monotonic() - started < 20
    assert xlarun_containers(docker_client) == []


@pytest.mark.docker
def test_cancel_from_another_thread_stops_the_job(tmp_path, docker_client, cpu_image):
    job = real_job(tmp_path, "import time\ntime.sleep(600)\n")
    threading.Timer(2, job.cancel.set).start()
    started = time.monotonic()
    result = DockerBackend("docker-cpu", DockerOptions(image=cpu_image)).launch(job, Sink())
    assert (result.status, result.error) == (RunStatus.INTERRUPTED, "cancelled")
    assert time.monotonic() - started < 20


@pytest.mark.docker
def test_missing_image_names_the_build_command(tmp_path, docker_client):
    backend = DockerBackend("docker-cpu", DockerOptions(image="xlarun-cpu:no-such-tag"))
    with pytest.raises(EnvironmentProblem) as caught:
        backend.launch(real_job(tmp_path, "print(1)\n"), Sink())
    assert caught.value.message == "image xlarun-cpu:no-such-tag is not on this Docker host"
    assert caught.value.hint == "build it with `xlarun images build cpu`"


@pytest.mark.docker
def test_gpus_without_the_nvidia_runtime_get_a_clear_error(tmp_path, docker_client, base_image):
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this Docker host has the NVIDIA runtime")
    backend = DockerBackend("docker-gpu", DockerOptions(image=base_image))
    with pytest.raises(EnvironmentProblem) as caught:
        backend.launch(real_job(tmp_path, "print(1)\n"), Sink())
    assert caught.value.message.startswith("no NVIDIA container runtime on this Docker host")
    assert "nvidia-container-toolkit" in caught.value.hint
    assert xlarun_containers(docker_client) == []


@pytest.mark.docker
def test_missing_ipu_device_gets_a_clear_error(tmp_path, docker_client, base_image):
    if Path("/dev/ipu0").exists():
        pytest.skip("this host has IPUs")
    backend = DockerBackend("docker-ipu", DockerOptions(image=base_image, ipu_device_id=0, ipu_count=1))
    with pytest.raises(EnvironmentProblem, match="device /dev/ipu0 does not exist on the Docker host"):
        backend.launch(real_job(tmp_path, "print(1)\n"), Sink())
    assert xlarun_containers(docker_client) == []


@pytest.mark.docker
def test_missing_volume_source_is_an_input_error(tmp_path, docker_client, cpu_image):
    backend = DockerBackend("docker-cpu", DockerOptions(image=cpu_image, volumes=[f"{tmp_path}/absent:/data:ro"]))
    with pytest.raises(InputError, match=f"cannot mount {tmp_path}/absent into the container: it does not exist"):
        backend.launch(real_job(tmp_path, "print(1)\n"), Sink())
    assert xlarun_containers(docker_client) == []


@pytest.mark.docker
def test_run_a_tool_in_an_image_with_host_folders_at_their_own_paths(tmp_path, docker_client, base_image):
    dump, out = tmp_path / "dump", tmp_path / "out"
    dump.mkdir()
    out.mkdir()
    (dump / "module.txt").write_text("HloModule m\n")
    sink = Sink()
    result = run_in_image(
        base_image,
        ["/bin/sh", "-c", f"cat {dump}/module.txt; id -u; touch {out}/literals.pb; exit 4"],
        read_only=[dump],
        writable=[out],
        sink=sink,
        timeout_s=60,
    )
    assert (result.status, result.exit_code) == (RunStatus.FAILED, 4)
    assert sink.text("stdout") == f"HloModule m\n{os.getuid()}\n"
    assert (out / "literals.pb").stat().st_uid == os.getuid()
    slow = run_in_image(base_image, ["/bin/sleep", "600"], timeout_s=1)
    assert slow.status is RunStatus.TIMED_OUT
    assert xlarun_containers(docker_client) == []
