"""The one place that touches jaxlib's private XLA bindings.

Everything the built-in engine and ``xlarun convert`` need from jaxlib goes through here:
HLO text <-> HloModuleProto, HloModuleProto -> StableHLO, compile on a PJRT client, execute,
and DOT rendering. These names are private and move between jaxlib releases; each is looked up
in the places it has lived, and a missing one raises :class:`EnvironmentProblem` naming the
installed jaxlib, so an upgrade breaks one module with one clear message.

Supported: jaxlib 0.4.30 to 0.12. What differs between them (checked in one venv per version):

- HLO -> StableHLO: ``_xla.mlir.hlo_to_stablehlo(proto)`` (bytecode) from 0.6; before it,
  ``_xla.mlir.xla_computation_to_mlir_module(XlaComputation(proto))`` (MLIR text);
- compile: ``client.compile_and_load(mlir, DeviceList, options)`` from 0.6.2,
  ``client.compile(mlir, options)`` to 0.5.3 (the device comes from the options), and
  ``client.compile(mlir, DeviceList, options)`` between, where its signature names the devices;
- the 64-bit switch: ``jax.enable_x64`` from jax 0.8, ``jax.experimental.enable_x64`` before;
- backends: ``jax.extend.backend.get_backend`` (not in 0.4.30: ``jax._src.xla_bridge``);
- the parser and printer: ``xla_client._xla`` until 0.10, ``xla_client.hlo`` after.
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from xlarun.errors import EngineError, EnvironmentProblem, InputError

#: The jaxlib versions the engine is proven on (the compat tests replay on both ends and one between).
SUPPORTED_JAXLIB = ("0.4.30", "0.12")
SUPPORTED_RANGE = f"jaxlib {SUPPORTED_JAXLIB[0]} to {SUPPORTED_JAXLIB[1]}.x"
#: xlarun platform name -> names jax may register the backend under.
_PLATFORM_ALIASES = {"cpu": ("cpu",), "cuda": ("cuda", "gpu"), "rocm": ("rocm", "gpu")}
#: How a module proto becomes MLIR the client compiles, by the name that does it.
ROUTE_STABLEHLO = "hlo_to_stablehlo"
ROUTE_COMPUTATION = "xla_computation_to_mlir_module"


def jaxlib_version() -> str | None:
    """The installed jaxlib version, or ``None`` when jaxlib is missing."""
    try:
        import jaxlib.version
    except ImportError:
        return None
    return jaxlib.version.__version__


def _resolve(root: Any, *dotted_paths: str) -> Any:
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
    version: str
    hlo_module_from_text: Any
    hlo_module_from_proto: Any
    hlo_to_stablehlo: Any  # None where only the XlaComputation route exists
    computation_to_mlir: Any
    xla_computation: Any
    hlo_module_to_dot_graph: Any
    print_options: Any
    device_list: Any
    compile_options: Any

    @property
    def mlir_route(self) -> str:
        """The name that turns a module proto into MLIR on this jaxlib."""
        return ROUTE_STABLEHLO if self.hlo_to_stablehlo is not None else ROUTE_COMPUTATION


@functools.lru_cache(maxsize=1)
def bindings() -> _Bindings:
    """Look up every private name once; raise EnvironmentProblem naming what is missing."""
    version = jaxlib_version()
    if version is None:
        raise EnvironmentProblem(
            "the built-in replay engine needs jaxlib, which is not installed",
            "pip install 'xlarun[jax]' (jax and jaxlib), or use --engine run_hlo_module / hlo_runner_main",
        )
    try:
        from jax._src.lib import xla_client
    except ImportError as exc:
        raise EnvironmentProblem(f"jaxlib {version}: cannot import jax's xla_client ({exc})") from exc
    return resolve_bindings(xla_client, version)


def resolve_bindings(xla_client: Any, version: str) -> _Bindings:
    """Find every name in ``xla_client``; raise EnvironmentProblem naming the missing ones and ``version``."""
    found = {
        "hlo_module_from_text": _resolve(xla_client, "hlo.hlo_module_from_text", "_xla.hlo_module_from_text"),
        "hlo_module_from_proto": _resolve(
            xla_client, "hlo.HloModule.from_serialized_hlo_module_proto", "_xla.HloModule.from_serialized_hlo_module_proto"
        ),
        "hlo_module_to_dot_graph": _resolve(xla_client, "hlo.hlo_module_to_dot_graph", "_xla.hlo_module_to_dot_graph"),
        "print_options": _resolve(xla_client, "hlo.HloPrintOptions", "_xla.HloPrintOptions"),
        "device_list": _resolve(xla_client, "DeviceList", "_xla.DeviceList"),
        "compile_options": _resolve(xla_client, "CompileOptions"),
    }
    route = {
        "hlo_to_stablehlo": _resolve(xla_client, "_xla.mlir.hlo_to_stablehlo"),
        "computation_to_mlir": _resolve(xla_client, "_xla.mlir.xla_computation_to_mlir_module"),
        "xla_computation": _resolve(xla_client, "XlaComputation", "_xla.XlaComputation"),
    }
    missing = sorted(name for name, value in found.items() if value is None)
    if route["hlo_to_stablehlo"] is None and (route["computation_to_mlir"] is None or route["xla_computation"] is None):
        missing.append("hlo_to_stablehlo and xla_computation_to_mlir_module")
    if missing:
        raise EnvironmentProblem(
            f"jaxlib {version} lacks {', '.join(missing)}, which the built-in replay engine needs",
            f"xlarun's engine runs on {SUPPORTED_RANGE}: pip install 'jax[cpu]>={SUPPORTED_JAXLIB[0]}', "
            "or use --engine run_hlo_module",
        )
    return _Bindings(xla_client=xla_client, version=version, **found, **route)


# ---- HLO format conversions ----


def text_to_module_proto(text: str) -> bytes:
    """Parse HLO text into a serialized HloModuleProto (XLA's own parser).

    Text from a newer XLA that this parser refuses is parsed again without its debug info
    (stack-frame tables, metadata; :mod:`.downgrade`), which never changes what it computes.
    """
    parse = bindings().hlo_module_from_text
    try:
        module = parse(text)
    except Exception as exc:  # jaxlib raises its own XlaRuntimeError family
        module = _parse_without_debug_info(parse, text)
        if module is None:
            raise InputError(f"HLO text does not parse: {_first_line(exc)}", "is this an HLO text dump?") from exc
    return module.as_serialized_hlo_module_proto()


def _parse_without_debug_info(parse: Any, text: str) -> Any:
    from xlarun.replay.downgrade import strip_debug_info

    stripped = strip_debug_info(text)
    if stripped == text:
        return None
    try:
        return parse(stripped)
    except Exception:
        return None  # the original error says more


def _with_narrow_ids(convert: Any, module_proto: bytes) -> Any:
    """``convert(module_proto)``, retried with instructions renumbered when the proto's ids are too wide for this XLA."""
    try:
        return convert(module_proto)
    except Exception:
        from xlarun.replay.downgrade import has_wide_instruction_ids, renumber_instructions

        if not has_wide_instruction_ids(module_proto):
            raise
        return convert(renumber_instructions(module_proto))


def _module(module_proto: bytes) -> Any:
    try:
        return _with_narrow_ids(bindings().hlo_module_from_proto, module_proto)
    except Exception as exc:
        raise InputError(f"not an HloModuleProto: {_first_line(exc)}") from exc


def module_proto_to_text(module_proto: bytes, *, print_large_constants: bool = True) -> str:
    """Print a serialized HloModuleProto as HLO text (large constants in full by default)."""
    module = _module(module_proto)
    options = bindings().print_options()
    options.print_large_constants = print_large_constants
    return module.to_string(options)


def module_proto_to_stablehlo(module_proto: bytes) -> bytes:
    """Convert a serialized HloModuleProto to a StableHLO module the client compiles.

    MLIR bytecode from ``hlo_to_stablehlo``, or MLIR text (UTF-8) on jaxlib before 0.6, which
    goes through ``XlaComputation``; every compile entry point takes either.
    """
    b = bindings()

    def convert(proto: bytes) -> Any:
        if b.hlo_to_stablehlo is not None:
            return b.hlo_to_stablehlo(proto)
        return b.computation_to_mlir(b.xla_computation(proto))

    try:
        mlir = _with_narrow_ids(convert, module_proto)
    except Exception as exc:
        raise EngineError(f"HLO -> StableHLO conversion failed: {_first_line(exc)}") from exc
    return mlir.encode("utf-8") if isinstance(mlir, str) else mlir


def module_to_dot(module_proto: bytes) -> str:
    """Render a serialized HloModuleProto as a Graphviz DOT graph."""
    return bindings().hlo_module_to_dot_graph(_module(module_proto))


def module_name(module_proto: bytes) -> str:
    """The module's name, read by XLA."""
    return _module(module_proto).name


# ---- platforms, compile, execute ----


def _backend_api() -> Any:
    """``(backends, get_backend)``: jax.extend's where it has them (not 0.4.30), else xla_bridge's."""
    import jax.extend.backend

    public = jax.extend.backend
    if hasattr(public, "backends") and hasattr(public, "get_backend"):
        return public.backends, public.get_backend
    from jax._src import xla_bridge

    return xla_bridge.backends, xla_bridge.get_backend


def available_platforms() -> list[str]:
    """The xlarun platform names (cpu, cuda, rocm) jax can reach on this machine."""
    backends, _ = _backend_api()
    registered = set(backends())
    platforms = []
    for name, aliases in _PLATFORM_ALIASES.items():
        for alias in aliases:
            if alias in registered and _backend_platform(alias) == name:
                platforms.append(name)
                break
    return platforms


def _backend_platform(alias: str) -> str:
    _, get_backend = _backend_api()
    client = get_backend(alias)
    version = (client.platform_version or "").lower()
    if client.platform == "gpu" or alias == "gpu":
        return "rocm" if "rocm" in version or "hip" in version else "cuda"
    return client.platform


def prepare_custom_calls(module_proto: bytes) -> None:
    """Make jax's custom-call kernels runnable before a module that calls any is executed.

    Skipped for modules without custom calls: filling in the LAPACK pointers costs about a
    second (``xlarun doctor`` replays a module without any). The opcode is stored as a string
    in the proto, so a byte search finds every ``custom-call``.
    """
    if b"custom-call" in module_proto:
        _register_jax_custom_calls()


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
            f"xlarun's engine runs on {SUPPORTED_RANGE}",
        )
    initialize()


@functools.lru_cache(maxsize=1)
def _x64_switch() -> Any:
    """The context manager that lets jax make 64-bit arrays: top-level from jax 0.8, experimental before."""
    import jax
    import jax.experimental

    switch = _resolve(jax, "enable_x64", "experimental.enable_x64")
    if switch is None:
        raise EnvironmentProblem(
            f"jax {jax.__version__} has neither jax.enable_x64 nor jax.experimental.enable_x64",
            f"xlarun's engine runs on {SUPPORTED_RANGE}",
        )
    return switch


@dataclass
class CompiledModule:
    """A loaded executable on one device, with the seconds its compile took."""

    executable: Any
    device: Any
    compile_s: float

    def upload(self, arguments: list) -> list:
        """Copy host arrays to the device once, outside the timed loop.

        Tuple-shaped parameters (lists, nested too) are flattened, as the StableHLO route flattens
        them into one parameter per element; a token (``None``) becomes the empty array PJRT takes for it.
        """
        import jax

        switch = _x64_switch()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the experimental switch warns on some versions
            with switch(True):  # keep 64-bit arguments 64-bit: the module's types are fixed
                return [jax.device_put(_host_array(a), self.device) for a in _flat_arguments(arguments)]

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
    def download(outputs: list) -> list[np.ndarray | None]:
        """Host copies of the outputs; ``None`` for a token (it has no value)."""
        return [_download_one(out) for out in outputs]


def _flat_arguments(arguments: list) -> list:
    flat = []
    for argument in arguments:
        flat.extend(_flat_arguments(argument) if isinstance(argument, list) else [argument])
    return flat


def _host_array(value: Any) -> np.ndarray:
    return np.zeros((0,), np.bool_) if value is None else np.asarray(value)


def _download_one(output: Any) -> np.ndarray | None:
    try:
        return np.asarray(output)
    except Exception as exc:  # jaxlib's runtime error: a token buffer has no array
        if "token" in str(exc).lower():
            return None
        raise EngineError(f"reading an output back failed: {_first_line(exc)}") from exc


class Platform:
    """One PJRT client and its first device, named as xlarun names platforms (cpu, cuda, rocm)."""

    def __init__(self, name: str):
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
        backends, get_backend = _backend_api()
        alias = next(a for a in _PLATFORM_ALIASES[name] if a in backends())
        self.name = name
        self.client = get_backend(alias)
        self.device = self.client.local_devices()[0]

    def compile(self, stablehlo: bytes, debug_options: dict | None = None) -> CompiledModule:
        """Compile a StableHLO module (bytecode or text) for this platform's first device.

        ``debug_options``: DebugOptions fields for this compile only, e.g.
        ``{"xla_disable_hlo_passes": "algsimp,cse"}`` (XLA_FLAGS is read once per process).
        """
        start = time.perf_counter()
        try:
            executable = self._compile(stablehlo, debug_options or {})
        except Exception as exc:
            raise EngineError(f"compile on {self.name} failed: {_first_line(exc)}") from exc
        return CompiledModule(executable, self.device, time.perf_counter() - start)

    def _compile(self, stablehlo: bytes, debug_options: dict) -> Any:
        b = bindings()
        devices = b.device_list((self.device,))
        if hasattr(self.client, "compile_and_load"):  # jaxlib 0.6.2+: compile() no longer loads
            return self.client.compile_and_load(stablehlo, devices, _compile_options(b, debug_options))
        if _takes_devices(self.client.compile):  # jaxlib 0.6.0-0.6.1
            return self.client.compile(stablehlo, devices, _compile_options(b, debug_options))
        options = _compile_options(b, debug_options)  # jaxlib 0.4.30-0.5.3: the device comes from the options' assignment
        options.device_assignment = _single_device_assignment(b.xla_client, self.device)
        return self.client.compile(stablehlo, options)

    def describe(self) -> str:
        return f"{self.name} ({self.device.device_kind}, jaxlib {jaxlib_version()})"


def _compile_options(b: _Bindings, debug_options: dict) -> Any:
    """CompileOptions with ``debug_options`` set: bound DebugOptions fields directly, the rest as
    environment overrides (``xla_disable_all_hlo_passes`` is only reachable that way on jaxlib 0.10)."""
    options = b.compile_options()
    bound = options.executable_build_options.debug_options
    overrides = []
    for name, value in debug_options.items():
        if hasattr(bound, name):
            setattr(bound, name, value)
        else:
            overrides.append((name, value))
    if overrides:
        options.env_option_overrides = overrides
    return options


def _takes_devices(compile_method: Any) -> bool:
    # nanobind writes every overload's signature into the docstring; the first parameter after the module names it
    return "executable_devices" in (getattr(compile_method, "__doc__", None) or "")


def _single_device_assignment(xla_client: Any, device: Any) -> Any:
    assignment = _resolve(xla_client, "DeviceAssignment", "_xla.DeviceAssignment")
    return assignment.create(np.array([[device.id]]))


def _first_line(exc: BaseException) -> str:
    """The error's first line, and the line after it when the first is only a status or a location.

    XLA often writes ``INVALID_ARGUMENT: ...:`` or ``<unknown>:0: error: loc(...)`` first and the
    explanation on the next line; a message without it names no cause.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    if len(lines) > 1 and (first.endswith(":") or len(first) < 48):
        return f"{first} {lines[1]}"
    return first


#: For :mod:`.multidevice`, the other module that drives jaxlib: the same lookups, one definition each.
first_line, hlo_module, x64_switch, compile_options = _first_line, _module, _x64_switch, _compile_options
