"""Whose code a module is: the user's, or only the framework's. JAX 0.8.3 and later print stack-frame tables
(FileNames, FunctionNames, FileLocations) at the top of a text dump; a module is the user's when its jitted
function's name appears there with a file outside the framework's, the framework's when the tables hold only call
sites or the framework's own files, and undecided (None) otherwise. A framework's step that runs the user's model
(Keras's ``train_step`` of ``model.fit``) is the user's. ``modules`` ranks the user's first."""

from __future__ import annotations

import re

from xlarun.hlo.patterns import LazyPattern

#: Where a framework's own code lives: an installed package, or the inner folders of a framework's source
#: checkout (an editable install). A user's files are anywhere else, also in a folder named like a framework
#: (``~/work/equinox/train.py`` is the user's).
_FRAMEWORK_FILE = LazyPattern(
    r"/(?:site|dist)-packages/"
    r"|(?:^|/)(?:jax/_src|jax/experimental|jaxlib|tensorflow/python|tensorflow/compiler|keras/src|tf_keras/src"
    r"|flax/(?:nnx|linen|core|training)|optax/_src|equinox/(?:_\w+|nn|internal)|torch/(?:_\w+|nn|autograd)"
    r"|torch_xla/(?:core|_internal|distributed))(?:/|\.py$)"
)
#: A framework's own functions that run the user's model (its layers, loss and optimizer): Keras's ``fit``,
#: ``evaluate`` and ``predict`` on JAX jit these. A module of one is the user's step, though its code is Keras's.
_MODEL_STEP_FILE = LazyPattern(r"(?:^|/)keras/src/backend/jax/trainer\.py$")
_MODEL_STEPS = frozenset(
    f"{prefix}{kind}_{step}"
    for prefix in ("", "one_", "multi_")
    for kind in ("train", "test", "predict")
    for step in ("step", "steps")
)
_TABLE = LazyPattern(rb"^(FileNames|FunctionNames|FileLocations)\n((?:\d+ [^\n]*\n)+)", re.M)
_LOCATION = LazyPattern(rb"file_name_id=(\d+) function_name_id=(\d+)")
_MODULE_NAME = LazyPattern(rb"HloModule ([^\s,]+)")


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
        if simple == target.strip("_") and path and (not is_framework_file(path) or _runs_the_users_model(path, simple)):
            return True
    return False


def _runs_the_users_model(path: str, function: str) -> bool:
    """A framework's step that runs the user's model (Keras's ``JAXTrainer.train_step``): the user's code."""
    return function in _MODEL_STEPS and bool(_MODEL_STEP_FILE.search(path))


#: A TF function compiled with ``jit_compile=True``: ``a_inference_<function>_<N>__XlaMustCompile...`` (``.N`` after).
_TF_FUNCTION = LazyPattern(r"^a_inference_(.+?)_\d+(?:__|\.|$)")
#: A cluster TF's auto-jit (``tf.config.optimizer.set_jit``, TF_XLA_FLAGS) made of graph ops: ``cluster_<N>...``.
_TF_CLUSTER = LazyPattern(r"^cluster_\d+(?:__|\.|$)")
#: Why a module's code column is "unknown", by the kind of module.
UNKNOWN_WHY = {
    "tf cluster": "a TF auto-jit cluster of graph ops: TF records its own files (tensorflow/python/...) as every op's "
    "source, so the user's code is not in the dump",
    "no tables": "its dump has no stack-frame tables (JAX before 0.8.3 prints none): the user's code cannot be told "
    "from the framework's",
}


def code_label(name: str | None, own_code: bool | None) -> tuple[str, str | None]:
    """The ``code`` column of ``modules`` for a module and, where it says "unknown", why (a key of ``UNKNOWN_WHY``):
    ``yours``, ``framework``, ``tf.function F`` (a TF function compiled with ``jit_compile=True``: its ops' source
    files in the dump are TF's own, their origin is the user's ``tf.function`` F), or ``unknown``."""
    if own_code is not None:
        return ("yours" if own_code else "framework"), None
    tf_function = _TF_FUNCTION.match(name or "")
    if tf_function:
        return f"tf.function {tf_function.group(1)}", None
    return "unknown", ("tf cluster" if _TF_CLUSTER.match(name or "") else "no tables")


def settle_own_code(decided: list[bool | None]) -> list[bool | None]:
    """A run's modules' ``own_code`` made consistent: where some module carries stack-frame tables (its
    framework prints them), a module without any names no source of the user's (``x.astype`` outside a jit,
    a framework's helper) and is the framework's (False); where none does (older JAX, TF), all stay untold."""
    if all(d is None for d in decided):
        return decided
    return [False if d is None else d for d in decided]


def _table(rows: bytes) -> dict[bytes, str]:
    """``1 "text"`` rows of a FileNames or FunctionNames table, by id."""
    out = {}
    for line in rows.splitlines():
        key, _, text = line.partition(b" ")
        out[key] = text.strip().strip(b'"').decode("utf-8", "replace")
    return out
