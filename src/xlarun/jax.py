"""In-process JAX capture: dump one function's compilation, in the process where the model lives.

``xlarun.jax.capture(f, *args)`` compiles ``f`` with XLA dump options passed for that compilation only
(``jax.jit(f).lower(*args).compile(compiler_options={"xla_dump_to": ...})``), then archives and indexes
what XLA wrote as a run of kind ``inline``. Nothing else the process compiles is dumped, ``XLA_FLAGS``
is not read or changed, and JAX's persistent compilation cache is off for that compile (a cache hit
compiles nothing, so it would dump nothing). ``with xlarun.jax.capturing(...) as session`` captures
several functions, one run each, tagged with one batch id.

This module is ``xlarun.jax``; ``import jax`` inside it is the JAX package (imports are absolute).
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xlarun.api import Run, Store

__all__ = ["Session", "capture", "capturing", "compiler_options_for"]

RUN_KIND = "inline"


def compiler_options_for(
    dump_dir: str | Path,
    *,
    pass_re: str | None = None,
    snapshots: bool = False,
    formats: tuple[str, ...] = ("text", "proto"),
    large_constants: bool = True,
    extra_xla_flags: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The per-compile options of a dump into ``dump_dir``: the flags a spec's ``dump:`` section sets, as
    ``{"xla_dump_to": ..., "xla_dump_hlo_as_text": True, ...}`` for ``Lowered.compile(compiler_options=...)``."""
    from types import SimpleNamespace

    from xlarun.capture.flags import xla_flags_for
    from xlarun.capture.spec import DumpSpec

    dump = DumpSpec(
        formats=list(formats),
        pass_re=pass_re,
        snapshots=snapshots,
        large_constants=large_constants,
        extra_xla_flags=list(extra_xla_flags),
    )
    options: dict[str, Any] = {}
    for flag in xla_flags_for(SimpleNamespace(dump=dump, framework="jax"), str(dump_dir)):  # type: ignore[arg-type]
        name, sep, value = flag.lstrip("-").partition("=")
        options[name] = _option_value(value) if sep else True
    return options


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lstrip("-").isdigit():
        return int(text)
    return text


@dataclass(frozen=True)
class FunctionFacts:
    """Where a captured function comes from: its qualified name, source file and first line."""

    qualname: str
    source_file: str | None
    source_line: int | None


def describe_function(f: Callable[..., Any]) -> FunctionFacts:
    target = inspect.unwrap(f) if hasattr(f, "__wrapped__") else f
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    module = getattr(target, "__module__", None)
    if module and module not in ("__main__", "builtins"):
        qualname = f"{module}.{qualname}"
    try:
        source_file = inspect.getsourcefile(target)
        source_line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        source_file, source_line = None, None
    return FunctionFacts(qualname, source_file, source_line)


def _jax_versions() -> dict[str, str]:
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for package in ("jax", "jaxlib", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


@contextlib.contextmanager
def _compilation_cache_off() -> Iterator[None]:
    """JAX's persistent cache off for this compile only: a hit would compile (and dump) nothing."""
    import jax

    before = getattr(jax.config, "jax_enable_compilation_cache", None)
    if before is None:  # a JAX without the switch has no persistent cache on by default
        yield
        return
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", before)


def _lowered(f: Callable[..., Any], args: tuple, kwargs: dict[str, Any], jit_kwargs: dict[str, Any]) -> Any:
    import jax

    from xlarun.errors import EnvironmentProblem, InputError

    if hasattr(f, "lower") and not jit_kwargs:
        jitted = f  # already jax.jit(...): lower it as it is (jitting it again would nest a call)
    elif hasattr(f, "lower"):
        raise InputError(
            "jit options were given for a function that is already jitted", "pass the plain function, or drop the options"
        )
    else:
        jitted = jax.jit(f, **jit_kwargs)
    if "compiler_options" not in inspect.signature(jax.stages.Lowered.compile).parameters:
        raise EnvironmentProblem(
            f"jax {jax.__version__} cannot pass dump options to one compilation (Lowered.compile has no compiler_options)",
            "upgrade jax (0.4.30 and later have it), or capture the script with `xlarun capture SPEC`",
        )
    return jitted.lower(*args, **kwargs)


def _undonated(compiled: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with each donated array replaced by a copy, so that running ``compiled`` once for its
    snapshot leaves the caller's arrays as they were. Copies, rather than a compile without donation, keep the dumped
    module the one the program runs (its input-output aliasing included); only the donated arrays are copied."""
    import jax

    from xlarun.capture.flags import snapshots_abort_on_donation
    from xlarun.errors import InputError

    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    try:
        donated = [bool(info.donated) for info in jax.tree_util.tree_leaves(compiled.args_info)]
    except Exception:  # no args_info (old jax), or a wrapper's that raises (nnx.jit's: a TypeError)
        donated = []
    known = len(donated) == len(leaves)
    if not known:  # cannot tell which are donated: copy every array
        donated = [True] * len(leaves)
    jaxlib = _jax_versions().get("jaxlib", jax.__version__)
    if known and any(donated) and snapshots_abort_on_donation(jaxlib):
        raise InputError(
            f"jaxlib {jaxlib} aborts the process writing a snapshot of a call with donated arguments",
            "capture with snapshots=False, or without donate_argnums (or use jaxlib 0.10 or later)",
        )
    copies = [_copy(leaf) if gives and isinstance(leaf, jax.Array) else leaf for leaf, gives in zip(leaves, donated, strict=True)]
    return jax.tree_util.tree_unflatten(tree, copies)


def _copy(array: Any) -> Any:
    import jax
    import jax.numpy as jnp

    copy = jnp.array(array, copy=True)
    return copy if copy.sharding == array.sharding else jax.device_put(copy, array.sharding)


def capture(
    f: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    pass_re: str | None = None,
    snapshots: bool = False,
    store: Store | str | Path | None = None,
    formats: tuple[str, ...] = ("text", "proto"),
    large_constants: bool = True,
    extra_xla_flags: tuple[str, ...] = (),
    kwargs: dict[str, Any] | None = None,
    batch_id: str | None = None,
    profile: bool | int = False,
    **jit_kwargs: Any,
) -> Run:
    """Compile ``f(*args)`` with XLA dumps for that compilation only, and archive it as a run of kind ``inline``.

    ``pass_re`` (``".*"``: around every pass), ``snapshots`` (the compiled function is run once on ``args``
    to record its real arguments and result; donated arguments are copied first, so the caller's arrays are left as
    they were, and a jaxlib before 0.10, whose XLA aborts on such a snapshot, is refused with an InputError), ``formats`` and ``large_constants``
    mean what they mean in a spec's ``dump:``. ``jit_kwargs`` go to ``jax.jit`` (``static_argnums``...);
    ``kwargs`` are keyword arguments of ``f``. ``profile`` (True: 3 calls, or a number of calls) runs the compiled
    function that often under ``jax.profiler`` after a warm-up call, and archives and indexes the trace with the
    dump (``run.times()``, ``run.main.profile()``). Returns the run; ``run.main`` is the function's module."""
    from xlarun import api

    the_store = store if isinstance(store, api.Store) else api.open_store(store)
    facts = describe_function(f)
    lib = the_store.store
    run_id, staging = _begin_run(lib)
    started, t0 = _utc_now(), time.monotonic()
    options = compiler_options_for(
        staging / "dump",
        pass_re=pass_re,
        snapshots=snapshots,
        formats=formats,
        large_constants=large_constants,
        extra_xla_flags=extra_xla_flags,
    )
    error: str | None = None
    try:
        with _compilation_cache_off():
            compiled = _lowered(f, args, kwargs or {}, jit_kwargs).compile(compiler_options=options)
            if snapshots:  # XLA writes a snapshot when the executable runs
                import jax

                call_args, call_kwargs = _undonated(compiled, args, kwargs or {})
                jax.block_until_ready(compiled(*call_args, **call_kwargs))
                error = _missing_snapshot(staging / "dump", f)
            if profile:
                _profiled_calls(compiled, args, kwargs or {}, staging / "dump", 3 if profile is True else int(profile))
    except BaseException as exc:
        from xlarun.errors import XlarunError

        if isinstance(exc, (XlarunError, KeyboardInterrupt)) or not any((staging / "dump").iterdir()):
            shutil.rmtree(staging, ignore_errors=True)
            raise
        error = (
            f"{type(exc).__name__}: {exc}"  # compiled, then failed: what XLA dumped is kept, as a capture keeps a failed job's
        )
    took = time.monotonic() - t0
    return _commit(
        the_store, run_id, staging, name or facts.qualname.rsplit(".", 1)[-1], facts, options, started, took, error, batch_id
    )


def _missing_snapshot(dump_dir: Path, f: Callable[..., Any]) -> str | None:
    """Why a capture with ``snapshots=True`` has none, when the call ran but XLA wrote no snapshot (a wrapper whose
    compiled object runs another executable than the one compiled with the dump options); None when one is there."""
    if any(dump_dir.glob("*.snapshot.*.pb")):
        return None
    return (
        f"snapshots=True, but calling the compiled {type(f).__name__} wrote no snapshot (it ran another executable "
        "than the one compiled with the dump options); capture the plain function with jax.jit's options instead"
    )


def _profiled_calls(compiled: Any, args: tuple, kwargs: dict, dump_dir: Path, calls: int) -> None:
    """Call ``compiled`` ``calls`` times under JAX's profiler (after one call outside it: first-call set-up is not
    the function's time), the trace written where a spec's ``profile:`` writes it, so it is indexed the same way."""
    import jax

    from xlarun.capture.profile_job import PROFILE_DIR

    def call() -> None:
        call_args, call_kwargs = _undonated(compiled, args, kwargs)  # the caller's donated arrays are left as they were
        jax.block_until_ready(compiled(*call_args, **call_kwargs))

    call()
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(dump_dir / PROFILE_DIR), profiler_options=options)
    try:
        for _ in range(calls):
            call()
    finally:
        jax.profiler.stop_trace()


def _begin_run(lib: Any) -> tuple[str, Path]:
    """A staging folder whose run id sorts in capture order even within one second (in-process captures
    take well under one): the id's last 4 hex digits are the fraction of the second, not random."""
    from datetime import datetime, timezone

    now = datetime.now(timezone.utc)
    fraction = int(now.microsecond * 65536 / 1_000_000)
    for bump in range(64):
        try:
            return lib.begin_run(f"{now:%Y%m%d-%H%M%S}-{min(fraction + bump, 0xFFFF):04x}")
        except FileExistsError:
            continue
    return lib.begin_run()


def _utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _commit(
    the_store: Store,
    run_id: str,
    staging: Path,
    name: str,
    facts: FunctionFacts,
    options: dict[str, Any],
    started: str,
    took: float,
    error: str | None,
    batch_id: str | None,
) -> Run:
    from xlarun.errors import InputError
    from xlarun.store.manifest import Manifest, host_facts

    lib = the_store.store
    try:
        files = lib.archiver(staging).finish()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not files:
        shutil.rmtree(staging, ignore_errors=True)
        raise InputError(f"compiling {facts.qualname} dumped nothing", "is it a JAX function that XLA compiles?")
    flags = [f"--{k}" if v is True else f"--{k}={v}" for k, v in options.items()]
    manifest = Manifest(
        run_id=run_id,
        name=name,
        status="failed" if error else "succeeded",
        error=error,
        started=started,
        ended=_utc_now(),
        duration_s=round(took, 3),
        command=[facts.qualname],
        xlarun_command=list(sys.argv),
        cwd=str(Path.cwd()),
        backend="in-process",
        framework="jax",
        xla_flags=flags,
        versions=_jax_versions(),
        host=host_facts(),
        batch_id=batch_id,
        files=len(files),
        dump_bytes=sum(f.size for f in files),
        kind=RUN_KIND,
        tags={"function": facts.qualname, "source_file": facts.source_file or "", "source_line": str(facts.source_line or "")},
    )
    lib.commit_indexed(run_id, staging, files, {"manifest.json": manifest.to_json()})
    return the_store.run(run_id)  # an index still in trouble says so here; the run is committed either way


@dataclass
class Session:
    """Several functions captured with the same options into one store, one run each, tagged with one batch id."""

    store: Store
    options: dict[str, Any]
    batch_id: str
    runs: list[Run] = field(default_factory=list)

    def capture(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> Run:
        """``xlarun.jax.capture`` with this session's options (a keyword given here wins)."""
        run = capture(f, *args, **{**self.options, "store": self.store, "batch_id": self.batch_id, **kwargs})
        self.runs.append(run)
        return run


@contextlib.contextmanager
def capturing(
    store: Store | str | Path | None = None,
    *,
    pass_re: str | None = None,
    snapshots: bool = False,
    formats: tuple[str, ...] = ("text", "proto"),
    large_constants: bool = True,
) -> Iterator[Session]:
    """``with xlarun.jax.capturing() as session: session.capture(f, x); session.capture(g, y)``: one run per
    function, all tagged with the session's batch id (``xlarun runs --batch ID``, ``store.runs(batch=ID)``)."""
    from xlarun import api
    from xlarun.batch import new_batch_id

    the_store = store if isinstance(store, api.Store) else api.open_store(store)
    yield Session(
        the_store,
        {"pass_re": pass_re, "snapshots": snapshots, "formats": formats, "large_constants": large_constants},
        new_batch_id(),
    )
