"""Record a jitted step's real arguments inside the job, where XLA writes none (a module partitioned over N devices).

XLA's ``--xla_dump_hlo_snapshots`` writes no snapshot for a partitioned module, so its replay and bisection ran
on seeded fake data only, which can miss the values where a pass (or the partitioner) matters.
:func:`record_arguments` runs the step, then writes its arguments as jax holds them (each one's global value,
gathered from its shards) into the capture's dump folder as an ``HloSnapshot`` of the step's
``before_optimizations`` module, named after that module (``module_NNNN.<name>.snapshot.<n>.pb``). The capture
archives and indexes it as the module's snapshot; replay and bisect then run on it (a partitioned replay and a
sharded bisection cut the global values per device by the module's shardings).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from xlarun.errors import InputError
from xlarun.replay.literals import describe, hlo_snapshot_bytes
from xlarun.replay.pjrt import text_to_module_proto
from xlarun.replay.sources import entry_parameter_shapes

_DUMP_TO = "--xla_dump_to="
_MODULE_NAME = re.compile(r"^module @(\S+)", re.MULTILINE)
_DUMP_NUMBER = re.compile(r"^module_(\d+)\.")


def record_arguments(step: Any, *args: Any, **kwargs: Any) -> Any:
    """Run the jitted ``step(*args, **kwargs)`` and write its arguments (and result) as its module's snapshot in the
    dump folder ``XLA_FLAGS`` names (``xlarun capture`` sets it); returns what the step returns. Raises InputError
    outside a capture, for a function that is not jitted, or when the step's module is not found in the dump."""
    import jax
    import numpy as np

    folder = dump_folder()
    lower = getattr(step, "lower", None)
    if lower is None:
        raise InputError(
            f"record_arguments takes a jitted function (jax.jit(f)); {step!r} has no .lower",
            "pass the jax.jit-wrapped step",
        )
    found = _MODULE_NAME.search(lower(*args, **kwargs).as_text())
    if found is None:
        raise InputError("the step's lowering names no module", "pass a jax.jit-wrapped step")
    values = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves((args, kwargs))]  # before a donating step frees them
    outputs = jax.block_until_ready(step(*args, **kwargs))  # compiled now: its dump is written
    results = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(outputs)]
    before = find_module_dump(folder, found.group(1).removeprefix('"').removesuffix('"'), [describe(v) for v in values])
    module_proto = text_to_module_proto(before.read_text())
    stem = before.name.removesuffix(".before_optimizations.txt")
    target = next(folder / f"{stem}.snapshot.{n}.pb" for n in range(1000) if not (folder / f"{stem}.snapshot.{n}.pb").exists())
    result = results[0] if len(results) == 1 else results
    target.write_bytes(hlo_snapshot_bytes(module_proto, values, result))
    return outputs


def dump_folder() -> Path:
    """The folder ``--xla_dump_to`` in ``XLA_FLAGS`` names (InputError when it names none)."""
    for flag in shlex.split(os.environ.get("XLA_FLAGS", "")):
        if flag.startswith(_DUMP_TO):
            return Path(flag[len(_DUMP_TO) :])
    raise InputError(
        "record_arguments writes into the XLA dump folder, and XLA_FLAGS names none (--xla_dump_to)",
        "run the job with `xlarun capture SPEC` (or set XLA_FLAGS=--xla_dump_to=FOLDER)",
    )


def find_module_dump(folder: Path, name: str, argument_shapes: list[str]) -> Path:
    """The newest ``before_optimizations`` text dump of module ``name`` in ``folder`` whose parameters are
    ``argument_shapes`` (jax's flattened arguments); InputError when there is none."""
    candidates = sorted(
        folder.glob(f"module_*.{name}.before_optimizations.txt"),
        key=lambda p: int(m.group(1)) if (m := _DUMP_NUMBER.match(p.name)) else -1,
        reverse=True,
    )
    for path in candidates:
        shapes = [s.hlo_text() for s in entry_parameter_shapes(text_to_module_proto(path.read_text()))]
        if shapes == argument_shapes:
            return path
    raise InputError(
        f"no before_optimizations text dump of {name} with parameters ({', '.join(argument_shapes)}) in {folder}"
        + (f" ({len(candidates)} of other parameters: jax drops unused arguments)" if candidates else ""),
        "capture with dump.formats including text, and give the step only arguments it uses (or jax.jit(keep_unused=True))",
    )
