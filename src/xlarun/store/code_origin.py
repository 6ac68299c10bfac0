"""Whose code a module is: the user's, or only the framework's. JAX 0.8.3 and later print stack-frame tables
(FileNames, FunctionNames, FileLocations) at the top of a text dump; a module is the user's when its jitted
function's name appears there with a file outside the framework's, the framework's when the tables hold only call
sites or the framework's own files, and undecided (None) otherwise. ``modules`` ranks the user's first."""

from __future__ import annotations

import re

#: Where a framework's own code lives; a user's files are anywhere else.
_FRAMEWORK_FILE = re.compile(
    r"/(?:site|dist)-packages/|(?:^|/)(?:jax/_src|jaxlib|tensorflow|keras|flax|optax|equinox|torch|torch_xla)/"
)
_TABLE = re.compile(rb"^(FileNames|FunctionNames|FileLocations)\n((?:\d+ [^\n]*\n)+)", re.M)
_LOCATION = re.compile(rb"file_name_id=(\d+) function_name_id=(\d+)")
_MODULE_NAME = re.compile(rb"HloModule ([^\s,]+)")


def is_framework_file(path: str) -> bool:
    """Whether a source file is a framework's own (jax/_src, tensorflow/, flax/, site-packages...)."""
    return bool(_FRAMEWORK_FILE.search(path))


def own_code(data: bytes) -> bool | None:
    """Whether a module's code is the user's: its jitted function is defined in a user's file (True), or
    its stack-frame tables (JAX 0.8 and later print them atop the text) hold only call sites and the
    framework's own functions (False, e.g. ``jit__normal`` called from the user's ``main``). None where the
    text has no such tables (older JAX and TF print only the innermost user line, a call site included)."""
    head = bytes(data[: 1 << 20])
    tables = {m.group(1): m.group(2) for m in _TABLE.finditer(head)}
    named = _MODULE_NAME.match(head)
    if not named or b"FileLocations" not in tables:
        return None
    files = _table(tables.get(b"FileNames", b""))
    functions = _table(tables.get(b"FunctionNames", b""))
    target = named.group(1).decode("utf-8", "replace")
    for prefix in ("jit_", "pjit_"):
        if target.startswith(prefix):
            target = target[len(prefix) :]
            break
    for file_id, function_id in _LOCATION.findall(tables[b"FileLocations"]):
        path, function = files.get(file_id, ""), functions.get(function_id, "")
        simple = re.sub(r"\W", "_", function.rsplit(".", 1)[-1]).strip("_")  # "<lambda>": jit__lambda
        if path and not is_framework_file(path) and simple == target.strip("_"):
            return True
    return False


def _table(rows: bytes) -> dict[bytes, str]:
    """``1 "text"`` rows of a FileNames or FunctionNames table, by id."""
    out = {}
    for line in rows.splitlines():
        key, _, text = line.partition(b" ")
        out[key] = text.strip().strip(b'"').decode("utf-8", "replace")
    return out
