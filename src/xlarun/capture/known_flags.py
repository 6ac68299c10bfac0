"""Which XLA flags a job's framework knows, read from its native library without importing it.

XLA aborts a job at start when XLA_FLAGS holds a flag its registry lacks (``Unknown flags in
XLA_FLAGS: ...``), and the registry differs by version: TF 2.16's XLA lacks
``--xla_dump_large_constants``. Importing the framework to ask would cost seconds per capture, so
the names are read from the library that registers the flags: there a registered flag's name is a
NUL-terminated C string, while the DebugOptions proto descriptor, which also carries every field
name, stores them length-prefixed (and its oneof names start with ``_``). One scan of a library's
read-only data takes 10-100 ms; :class:`FlagNameCache` keeps the answer, keyed by the library's
path, size and mtime.

:func:`find_flag_rejection` reads the other side: a job's log saying which flags its XLA refused.
"""

from __future__ import annotations

import glob
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from xlarun.capture.cache_entries import entry_path, read_entry, write_entry

#: Bump when the scan's rule changes: older cache entries are then ignored.
SCAN_VERSION = 1
#: A flag every XLA registry since 2019 has and that no proto stores as a C string: marks a registry.
REGISTRY_MARK = "xla_dump_hlo_as_text"
#: Libraries smaller than this are stubs (jaxlib 0.10's ``_jax.so`` is 3.5 KB); XLA is hundreds of MB.
MIN_LIBRARY_BYTES = 1 << 20

_NAME = re.compile(rb"xla_[a-z0-9_]{2,120}\x00")
_IDENTIFIER_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True)
class KnownXlaFlags:
    """The XLA flags one framework install registers; its XLA aborts a job on any other ``--xla_*`` flag."""

    owner: str  # who knows them, as a user reads it: "tensorflow 2.16.2"
    libraries: tuple[str, ...]  # the native libraries holding a flag registry
    names: frozenset[str]  # "xla_dump_to", ...

    def knows(self, flag: str) -> bool:
        """Whether ``--name[=value]`` is registered; a name outside ``xla_*`` is not XLA's to judge, so True."""
        name = flag.lstrip("-").split("=", 1)[0]
        return not name.startswith("xla_") or name in self.names


@dataclass(frozen=True)
class _Layout:
    anchor: str  # glob, relative to a site folder, that marks where the framework is installed
    libraries: tuple[str, ...]  # globs of the native libraries that may register XLA's flags
    distributions: tuple[str, ...]  # dist-info names that carry the version
    label: str


_LAYOUTS = {
    # jax: jaxlib's xla_extension.so (<= 0.4.3x) or libjax_common.so (later); a PJRT plugin registers its own copy
    "jax": _Layout("jaxlib", ("jaxlib/*.so*", "jax_plugins/*/*.so*"), ("jaxlib",), "jaxlib"),
    "tensorflow": _Layout(
        "tensorflow",
        ("tensorflow/*.so*", "tensorflow/python/_pywrap_tensorflow_internal*.so"),
        ("tensorflow", "tensorflow_cpu", "tensorflow_gpu", "tensorflow_intel", "tf_nightly", "tf_nightly_cpu"),
        "tensorflow",
    ),
    "torch_xla": _Layout("_XLAC*.so", ("_XLAC*.so", "torch_xla/lib/*.so*"), ("torch_xla",), "torch_xla"),
}


def scan_flag_names(path: str | os.PathLike[str]) -> frozenset[str]:
    """Every ``xla_*`` name stored as a whole C string in the library at ``path``.

    Only the ELF read-only data sections are read when there are any (the whole file otherwise).
    A name counts when a NUL ends it and no identifier character comes before it: that keeps the
    flag names and drops the proto descriptor's length-prefixed copies, ``_xla_*`` oneof names,
    mangled symbols and help texts that mention a flag mid-sentence.
    """
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return frozenset()
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            names = set()
            for start, end in _read_only_ranges(data):
                for match in _NAME.finditer(data, start, end):
                    at = match.start()
                    if at == 0 or data[at - 1] not in _IDENTIFIER_BYTES:
                        names.add(match.group()[:-1].decode("ascii"))
            return frozenset(names)


def _read_only_ranges(data: mmap.mmap) -> list[tuple[int, int]]:
    """(start, end) of each read-only data section (``.rodata*``, ``.lrodata*``) of a 64-bit little-endian
    ELF file; the whole file for anything else (Mach-O, a damaged header)."""
    whole = [(0, len(data))]
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return whole
    try:
        (table,) = struct.unpack_from("<Q", data, 0x28)
        entry_size, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
        sections = [struct.unpack_from("<I4xQ8xQQ", data, table + i * entry_size) for i in range(count)]
        names_at = sections[names_index][2]
        ranges = []
        for name_at, _flags, offset, size in sections:
            start = names_at + name_at
            name = data[start : data.find(b"\0", start)]
            if name.startswith((b".rodata", b".lrodata")) and size and offset + size <= len(data):
                ranges.append((offset, offset + size))
    except (struct.error, IndexError):
        return whole
    return ranges or whole


class FlagNameCache:
    """The names :func:`scan_flag_names` found per library, one small JSON file per (path, size, mtime).

    ``writable=False`` reads entries but never writes one (``xlarun flags`` promises no side effects).
    """

    def __init__(self, folder: str | os.PathLike[str], *, writable: bool = True):
        self.folder = Path(folder)
        self.writable = writable

    @classmethod
    def default(cls, *, writable: bool = True) -> FlagNameCache:
        """The cache under xlarun's cache folder (``$XDG_CACHE_HOME/xlarun`` or ``~/.cache/xlarun``)."""
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlarun"
        return cls(root / "xla-flag-names", writable=writable)

    def names(self, library: str) -> frozenset[str]:
        """The library's flag names: from the cache when its path, size and mtime match, else scanned (and stored)."""
        info = os.stat(library)
        key = f"{SCAN_VERSION}\0{os.path.abspath(library)}\0{info.st_size}\0{info.st_mtime_ns}"
        entry = entry_path(self.folder, key)
        stored = read_entry(entry, key)
        names = stored.get("names") if stored is not None else None
        if isinstance(names, list) and all(isinstance(name, str) for name in names):  # else damaged: scanned again
            return frozenset(names)
        names = scan_flag_names(library)
        if self.writable:
            write_entry(entry, {"key": key, "library": library, "names": sorted(names)})
        return names


def job_search_path(python: str, env: Mapping[str, str], script_dir: str | None = None) -> list[str]:
    """The folders the job's ``python script.py`` will import from, found without importing anything there.

    The script's folder, then ``PYTHONPATH``, then the interpreter's own: this process's ``sys.path``
    when it is this interpreter, a venv's ``site-packages`` read from its layout, and otherwise the
    interpreter asked once for its ``sys.path`` (a bare start, some 20 ms).
    """
    dirs = [script_dir] if script_dir else []
    dirs += [d for d in env.get("PYTHONPATH", "").split(os.pathsep) if d]
    return dirs + _interpreter_path(python, env)


def _interpreter_path(python: str, env: Mapping[str, str]) -> list[str]:
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return [p for p in sys.path[1:] if p]  # sys.path[0] is xlarun's own entry point
    venv = Path(python).parent.parent
    config = _venv_config(venv / "pyvenv.cfg")
    if config is not None and config.get("include-system-site-packages", "false").lower() != "true":
        version = ".".join(config.get("version", config.get("version_info", "")).split(".")[:2])
        pattern = f"python{version}" if version else "python3*"
        return sorted(glob.glob(str(venv / "lib*" / pattern / "site-packages")))
    try:
        done = subprocess.run(
            [python, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return [p for p in json.loads(done.stdout.strip().splitlines()[-1]) if p]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return []


def _venv_config(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip().lower(): value.strip() for key, sep, value in pairs if sep}


def resolve_python(python: str, env: Mapping[str, str], cwd: str | None = None) -> str | None:
    """The interpreter's path as the job will start it: a bare name through the job's PATH, a relative path from ``cwd``."""
    if os.sep not in python:
        return shutil.which(python, path=env.get("PATH", os.defpath))
    return os.path.join(cwd, python) if cwd and not os.path.isabs(python) else python


def probe_known_xla_flags(
    framework: str,
    python: str,
    env: Mapping[str, str],
    *,
    script_dir: str | None = None,
    cwd: str | None = None,
    cache: FlagNameCache | None = None,
) -> KnownXlaFlags | None:
    """The XLA flags ``framework`` knows as the job's ``python`` would load it, or None when that cannot be told.

    None (keep every flag, as before) for a framework xlarun cannot probe, one not installed there, or
    libraries without a flag registry. With several registries (jaxlib and a PJRT plugin) a flag must be
    known to all of them. Nothing is imported and, with a read-only cache, nothing is written.
    """
    layout = _LAYOUTS.get(framework)
    interpreter = resolve_python(python, env, cwd)
    if layout is None or interpreter is None:
        return None
    site = next(
        (d for d in job_search_path(interpreter, env, script_dir) if glob.glob(os.path.join(glob.escape(d), layout.anchor))), None
    )
    if site is None:
        return None
    cache = cache or FlagNameCache.default()
    registries: dict[str, frozenset[str]] = {}
    for library in _libraries(site, layout):
        try:
            names = cache.names(library)
        except (OSError, ValueError):  # unreadable, or not mappable: that library cannot tell
            continue
        if REGISTRY_MARK in names:
            registries[library] = names
    if not registries:
        return None
    version = _version(site, layout)
    owner = f"{layout.label} {version}" if version else layout.label
    return KnownXlaFlags(owner, tuple(registries), frozenset.intersection(*registries.values()))


def _libraries(site: str, layout: _Layout) -> list[str]:
    found = []
    for pattern in layout.libraries:
        for path in sorted(glob.glob(os.path.join(glob.escape(site), pattern))):
            try:
                if os.path.isfile(path) and os.path.getsize(path) >= MIN_LIBRARY_BYTES:
                    found.append(path)
            except OSError:
                continue
    return found


def _version(site: str, layout: _Layout) -> str | None:
    for distribution in layout.distributions:
        for info in glob.glob(os.path.join(glob.escape(site), f"{distribution}-*.dist-info")):
            return os.path.basename(info)[len(distribution) + 1 : -len(".dist-info")]
    return None


@dataclass(frozen=True)
class FlagRejection:
    """A job's XLA (or TensorFlow) refused flags from an environment variable and aborted."""

    variable: str  # "XLA_FLAGS", "TF_XLA_FLAGS", or "" when the log does not say
    flags: tuple[str, ...]  # as the log names them: "--xla_foo", "--xla_bar=1"
    advice: str = ""  # what to do, per flag, filled in by whoever knows where the flags came from
    # flags the log names that the job's XLA registers all the same (its pre-run probe says so): TF 2.16
    # parses XLA_FLAGS with several registries and names flags another registry consumes later
    registered: tuple[str, ...] = ()
    owner: str = ""  # whose registry said so: "tensorflow 2.16.2"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(flag.lstrip("-").split("=", 1)[0] for flag in self.flags)

    def checked(self, known: KnownXlaFlags | None) -> FlagRejection:
        """This rejection blaming only the flags ``known`` (the job's probed registry) lacks."""
        if known is None:
            return self
        lacking = tuple(flag for flag in self.flags if not known.knows(flag))
        registered = tuple(flag for flag in self.flags if known.knows(flag))
        return FlagRejection(self.variable, lacking, self.advice, registered, known.owner)

    def explain(self) -> str:
        """One line saying which flags were refused, for a warning or an error message."""
        where = f" in {self.variable}" if self.variable else ""
        also = ""
        if self.registered:
            named = " ".join(f"--{_name(flag)}" for flag in self.registered)
            also = f"; the log also names {named}, which {self.owner or 'its XLA'} registers"
        if not self.flags:
            return (
                f"the job aborted at start on its flags{where}, though {self.owner or 'its XLA'} registers "
                f"every flag the log names ({' '.join(f'--{_name(flag)}' for flag in self.registered)})"
            )
        listed = " ".join(f"--{name}" for name in self.names)
        plural = "s" if len(self.flags) > 1 else ""
        return f"the job aborted at start: its XLA does not know {listed} (Unknown flag{plural}{where}){also}"


def _name(flag: str) -> str:
    return flag.lstrip("-").split("=", 1)[0]


_UNKNOWN_IN_VARIABLE = re.compile(r"Unknown flags? in ([A-Z_]+): *([^\r\n]*)")
_UNKNOWN_COMMAND_LINE = re.compile(r"Unknown command line flag '?-*([A-Za-z0-9_]+)")


def find_flag_rejection(log: str) -> FlagRejection | None:
    """The flags a job's log says were refused (``Unknown flags in XLA_FLAGS: --a --b``, XLA's
    parse_flags_from_env; ``Unknown command line flag 'x'``, absl's), or None."""
    match = _UNKNOWN_IN_VARIABLE.search(log)
    if match:
        # TF 2.16 names a flag once per parse of the variable: "--xla_foo  --xla_foo"
        flags = tuple(dict.fromkeys(word for word in match.group(2).split() if word.startswith("-")))
        if flags:
            return FlagRejection(match.group(1), flags)
    names = dict.fromkeys(f"--{m.group(1)}" for m in _UNKNOWN_COMMAND_LINE.finditer(log))
    return FlagRejection("", tuple(names)) if names else None
