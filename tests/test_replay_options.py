"""replay/options.py and bisect/bisect_options.py: the options declared in xlarun/declared_options.py, built and
checked once for ``xlarun replay``/``bisect`` and the Python API."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from xlarun.api.module import Module
from xlarun.bisect.bisect_options import BisectOptions, bisect_options
from xlarun.errors import InputError
from xlarun.replay.options import ReplayOptions, replay_options


def test_replay_options_maps_what_a_user_gives():
    options = replay_options(runner=Path("/opt/xla/run_hlo_module"), max_data_size="512M", in_process=True, timeout=None)
    assert options.runner_path == "/opt/xla/run_hlo_module"
    assert options.max_data_bytes == 512 << 20 and options.isolate == "never"
    assert replay_options(max_data_size=1000).max_data_bytes == 1000
    assert replay_options(max_data_size="0").max_data_bytes == 0  # no limit
    default = replay_options()
    assert default == ReplayOptions() and default.isolate == "auto" and default.runner_path is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"engine": "tpu_runner"}, "unknown engine 'tpu_runner'"),
        ({"iterations": 0}, "iterations must be at least 1"),
        ({"max_data_size": "lots"}, "not a size: 'lots'"),
        ({"in_process": True, "timeout": 5}, "--timeout cannot be kept with --in-process"),
    ],
)
def test_replay_options_are_checked_when_built(given, message):
    with pytest.raises(InputError, match=message):
        replay_options(**given)


def test_bisect_options_one_tolerance_for_both_bounds_and_checked():
    options = bisect_options(tolerance=1e-3, reference="snapshot", linear=True)
    assert (options.abs_tolerance, options.rel_tolerance, options.reference, options.linear) == (1e-3, 1e-3, "snapshot", True)
    assert bisect_options() == BisectOptions()
    with pytest.raises(InputError, match="unknown recompile 'some'"):
        bisect_options(recompile="some")
    with pytest.raises(InputError, match="unknown inputs 'real'"):
        bisect_options(inputs="real")


class _Stop(InputError):
    """Raised by the recording builder: a usage error, so the CLI exits 2 without running anything."""


REPLAY_GIVEN = {
    "engine": "run_hlo_module",
    "platform": "cuda",
    "reference_platform": "cpu",
    "abs_error_bound": 0.5,
    "rel_error_bound": 0.25,
    "iterations": 3,
    "seed": 7,
    "inputs": "fake",
    "print_literals": True,
    "runner": "/opt/xla/run_hlo_module",
    "image": "nvcr.io/nvidia/jax:25.04",
    "timeout": 30.0,
    "max_data_size": "1G",
    "in_process": True,
    "save_outputs": "/tmp/outputs.npz",
    "profile": True,
}
BISECT_GIVEN = {
    "tolerance": 0.125,
    "reference": "snapshot",
    "reference_platform": "cuda",
    "platform": "rocm",
    "linear": True,
    "recompile": "all",
    "inputs": "fake",
    "seed": 3,
    "ops": False,
}


def _recording(monkeypatch, module, name):
    seen: dict = {}

    @functools.wraps(getattr(module, name))  # the builder's signature, which keywords_for reads
    def record(**given):
        seen.update(given)
        raise _Stop("stopped by the test")

    monkeypatch.setattr(module, name, record)
    return seen


def _cli_args(given: dict) -> list[str]:
    args = []
    for name, value in given.items():
        flag = "--" + name.replace("_", "-")
        args += [flag] if value is True else ["--no-" + name.replace("_", "-")] if value is False else [flag, str(value)]
    return args


def test_every_replay_option_reaches_the_builder_from_the_command_and_the_python_call(monkeypatch, cli):
    import xlarun.replay.options

    seen = _recording(monkeypatch, xlarun.replay.options, "replay_options")
    with pytest.raises(_Stop):
        Module.replay(None, file="x.txt", **REPLAY_GIVEN)  # type: ignore[arg-type]
    assert seen == REPLAY_GIVEN
    seen.clear()
    assert cli("replay", "x.txt", *_cli_args(REPLAY_GIVEN)).exit_code == 2
    paths = {"runner": Path(REPLAY_GIVEN["runner"]), "save_outputs": Path(REPLAY_GIVEN["save_outputs"])}
    assert seen == {**REPLAY_GIVEN, **paths}  # typer gives paths as Paths


def test_every_bisect_option_reaches_the_builder_from_the_command_and_the_python_call(monkeypatch, cli):
    import xlarun.bisect.bisect_options

    seen = _recording(monkeypatch, xlarun.bisect.bisect_options, "bisect_options")
    with pytest.raises(_Stop):
        Module.bisect(None, **BISECT_GIVEN)  # type: ignore[arg-type]
    assert seen == BISECT_GIVEN
    seen.clear()
    assert cli("bisect", "jit_f", *_cli_args(BISECT_GIVEN)).exit_code == 2
    assert seen == BISECT_GIVEN
