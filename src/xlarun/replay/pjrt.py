"""The one place that touches jaxlib's private XLA bindings.

Everything the built-in engine and ``xlarun convert`` need from jaxlib goes through here:
HLO text <-> HloModuleProto, HloModuleProto -> StableHLO, compile on a PJRT client, execute,
and DOT rendering. These names are private and move between jaxlib releases (0.6.1
``jaxlib._jax``, 0.6.2 ``compile_and_load``, 0.10 ``jaxlib._hlo``); each is looked up in the
places it has lived, and a missing one raises :class:`EnvironmentProblem` naming the installed
jaxlib, so an upgrade breaks one module with one clear message. Supported: jaxlib 0.10.x.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import EngineError, EnvironmentProblem, InputError

SUPPORTED_JAXLIB = "0.10"
#: xlarun platform name -> names jax may register the backend under.
_PLATFORM_ALIASES = {"cpu": ("cpu",), "cuda": ("cuda", "gpu"), "rocm": ("rocm", "gpu")}


def jaxlib_version() -> str | None:
    """The installed jaxlib version, or ``None`` when jaxlib is missing."""
    try:
        import jaxlib.version
    except ImportError:
        return None
    return jaxlib.version.__version__


def _resolve(root, *dotted_paths: str):
    for path in dotted_paths:
        obj = root
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    return None


@dataclass(frozen=True)
class _Bindings:
    xla_client: Any
    hlo_module_from_text: Any
    hlo_module_from_proto: Any
    hlo_to_stablehlo: Any
    hlo_module_to_dot_graph: Any
    print_options: Any
    device_list: Any
    compile_options: Any


@functools.lru_cache(maxsize=1)
def bindings() -> _Bindings:
    """Look up every private name once; raise EnvironmentProblem naming what is missing."""
    version = jaxlib_version()
    if version is None:
        raise EnvironmentProblem(
            "the built-in replay engine needs jaxlib, which is not installed",
            "pip install jax jaxlib, or use --engine run_hlo_module / hlo_runner_main",
        )
    try:
        from jax._src.lib import xla_client
    except ImportError as exc:
        raise EnvironmentProblem(f"jaxlib {version}: cannot import jax's xla_client ({exc})") from exc
    return resolve_bindings(xla_client, version)


def resolve_bindings(xla_client, version: str) -> _Bindings:
    """Find every name in ``xla_client``; raise EnvironmentProblem naming the missing ones and ``version``."""
    found = {
        "hlo_module_from_text": _resolve(xla_client, "hlo.hlo_module_from_text", "_xla.hlo_module_from_text"),
        "hlo_module_from_proto": _resolve(
            xla_client, "hlo.HloModule.from_serialized_hlo_module_proto", "_xla.HloModule.from_serialized_hlo_module_proto"
        ),
        "hlo_to_stablehlo": _resolve(xla_client, "_xla.mlir.hlo_to_stablehlo"),
        "hlo_module_to_dot_graph": _resolve(xla_client, "hlo.hlo_module_to_dot_graph", "_xla.hlo_module_to_dot_graph"),
        "print_options": _resolve(xla_client, "hlo.HloPrintOptions", "_xla.HloPrintOptions"),
        "device_list": _resolve(xla_client, "DeviceList"),
        "compile_options": _resolve(xla_client, "CompileOptions"),
    }
    missing = sorted(name for name, value in found.items() if value is None)
    if missing:
        raise EnvironmentProblem(
            f"jaxlib {version} lacks {', '.join(missing)}, which the built-in replay engine needs",
            f"xlarun supports jaxlib {SUPPORTED_JAXLIB}.x: pip install 'jax~={SUPPORTED_JAXLIB}.0' "
            f"'jaxlib~={SUPPORTED_JAXLIB}.0', or use --engine run_hlo_module",
        )
    return _Bindings(xla_client=xla_client, **found)


# ---- HLO format conversions ----


def text_to_module_proto(text: str) -> bytes:
    """Parse HLO text into a serialized HloModuleProto (XLA's own parser)."""
    try:
        module = bindings().hlo_module_from_text(text)
    except Exception as exc:  # jaxlib raises its own XlaRuntimeError family
        raise InputError(f"HLO text does not parse: {_first_line(exc)}", "is this an HLO text dump?") from exc
    return module.as_serialized_hlo_module_proto()


def module_proto_to_text(module_proto: bytes, *, print_large_constants: bool = True) -> str:
    """Print a serialized HloModuleProto as HLO text (large constants in full by default)."""
    b = bindings()
    try:
        module = b.hlo_module_from_proto(module_proto)
    except Exception as exc:
        raise InputError(f"not an HloModuleProto: {_first_line(exc)}") from exc
    options = b.print_options()
    options.print_large_constants = print_large_constants
    return module.to_string(options)


def module_proto_to_stablehlo(module_proto: bytes) -> bytes:
    """Convert a serialized HloModuleProto to a StableHLO module (MLIR bytecode)."""
    try:
        return bindings().hlo_to_stablehlo(module_proto)
    except Exception as exc:
        raise EngineError(f"HLO -> StableHLO conversion failed: {_first_line(exc)}") from exc


def module_to_dot(module_proto: bytes) -> str:
    """Render a serialized HloModuleProto as a Graphviz DOT graph."""
    b = bindings()
    return b.hlo_module_to_dot_graph(b.hlo_module_from_proto(module_proto))


def module_name(module_proto: bytes) -> str:
    """The module's name, read by XLA."""
    return bindings().hlo_module_from_proto(module_proto).name


# ---- platforms, compile, execute ----


def available_platforms() -> list[str]:
    """The xlarun platform names (cpu, cuda, rocm) jax can reach on this machine."""
    import jax.extend.backend

    registered = set(jax.extend.backend.backends())
    platforms = []
    for name, aliases in _PLATFORM_ALIASES.items():
        for alias in aliases:
            if alias in registered and _backend_platform(alias) == name:
                platforms.append(name)
                break
    return platforms


def _backend_platform(alias: str) -> str:
    import jax.extend.backend

    client = jax.extend.backend.get_backend(alias)
    version = (client.platform_version or "").lower()
    if client.platform == "gpu" or alias == "gpu":
        return "rocm" if "rocm" in version or "hip" in version else "cuda"
    return client.platform


@functools.lru_cache(maxsize=1)
def _register_jax_custom_calls() -> None:
    """Make jax's custom-call kernels usable, as ``jax.export`` does before running foreign modules.

    JAX lowers linear algebra to custom calls (``lapack_spotrf_ffi``...) whose LAPACK function
    pointers are only filled in by ``initialize_lapack``; executing such a module without it
    segfaults. Importing jax's linalg module also registers the GPU solver targets.
    """
    import importlib

    linalg = importlib.import_module("jax._src.lax.linalg")
    initialize = getattr(linalg, "initialize_lapack", None)
    if initialize is None:
        lapack = importlib.import_module("jaxlib.lapack")
        initialize = _resolve(lapack, "_lapack.initialize")
    if initialize is None:
        raise EnvironmentProblem(
            f"jaxlib {jaxlib_version()} has no LAPACK initializer where xlarun looks for it",
            f"xlarun supports jaxlib {SUPPORTED_JAXLIB}.x",
        )
    initialize()


@dataclass
class CompiledModule:
    """A loaded executable on one device, with the seconds its compile took."""

    executable: Any
    device: Any
    compile_s: float

    def upload(self, arguments: list[np.ndarray]) -> list:
        """Copy host arrays to the device once, outside the timed loop."""
        import jax

        with jax.enable_x64(True):  # keep 64-bit arguments 64-bit: the module's types are fixed
            return [jax.device_put(np.asarray(a), self.device) for a in arguments]

    def run(self, device_arguments: list) -> tuple[list, float]:
        """Execute once; return the device outputs (tuples flattened) and the seconds it took."""
        start = time.perf_counter()
        try:
            outputs = self.executable.execute(device_arguments)
            for out in outputs:
                out.block_until_ready()
        except Exception as exc:
            raise EngineError(f"execution failed: {_first_line(exc)}") from exc
        return outputs, time.perf_counter() - start

    @staticmethod
    def download(outputs: list) -> list[np.ndarray]:
        return [np.asarray(out) for out in outputs]


class Platform:
    """One PJRT client and its first device, named as xlarun names platforms (cpu, cuda, rocm)."""

    def __init__(self, name: str):
        import jax.extend.backend

        bindings()
        name = name.lower()
        if name in ("host", "gpu"):
            name = "cpu" if name == "host" else "cuda"
        available = available_platforms()
        if name not in available:
            raise EnvironmentProblem(
                f"platform {name!r} is not available to jax here (available: {', '.join(available) or 'none'})",
                "install the matching jax plugin (jax[cuda12], jax[rocm]) or pick another --platform",
            )
        alias = next(a for a in _PLATFORM_ALIASES[name] if a in jax.extend.backend.backends())
        _register_jax_custom_calls()
        self.name = name
        self.client = jax.extend.backend.get_backend(alias)
        self.device = self.client.local_devices()[0]

    def compile(self, stablehlo: bytes) -> CompiledModule:
        """Compile a StableHLO module for this platform's first device."""
        b = bindings()
        start = time.perf_counter()
        try:
            executable = self.client.compile_and_load(stablehlo, b.device_list((self.device,)), b.compile_options())
        except Exception as exc:
            raise EngineError(f"compile on {self.name} failed: {_first_line(exc)}") from exc
        return CompiledModule(executable, self.device, time.perf_counter() - start)

    def describe(self) -> str:
        return f"{self.name} ({self.device.device_kind}, jaxlib {jaxlib_version()})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
