"""The benchmark workloads: a transformer-like JAX training step (``transformer.py``) captured pass by
pass, at a size picked by a knob, as an xlarun spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "transformer.py"

#: Dump before/after every pass. Not the usual ``.*``: xlarun's flag composition (flags.py) shell-quotes
#: that flag as ``'--xla_dump_hlo_pass_re=.*'`` inside XLA_FLAGS, and XLA then ignores it (no pass dumps).
#: ``.+`` is left unquoted and matches every pass name. (XLA treats the literal ``.*`` specially and
#: dumps fewer files with it; ``.+`` dumps after every pass, changed or not.)
PASS_RE = ".+"


@dataclass(frozen=True)
class WorkloadSize:
    """How big the captured workload is: model depth, compiled variants, and which modules are dumped."""

    name: str
    layers: int
    d_model: int
    variants: int
    eval_step: bool
    host_init: bool = False  # numpy parameters: no init module to compile (keeps the small size fast)
    pipeline_re: str | None = None  # dump the passes of these pipelines only (keeps the small size small)
    formats: tuple[str, ...] = field(default=("text", "proto", "dot"))

    def script_args(self) -> list[str]:
        args = ["--layers", str(self.layers), "--d-model", str(self.d_model), "--variants", str(self.variants)]
        return args + (["--eval"] if self.eval_step else []) + (["--host-init"] if self.host_init else [])


SIZES = {
    # the training step only, the passes of one pipeline: ~240 files, ~16 MB, a CI smoke test
    "small": WorkloadSize("small", layers=1, d_model=32, variants=1, eval_step=False, host_init=True, pipeline_re="sharding-removal"),
    # train + eval steps, every pass: ~1,500 files, ~250 MB
    "medium": WorkloadSize("medium", layers=1, d_model=64, variants=1, eval_step=True, host_init=True),
    # two blocks, train + eval steps for two sequence lengths (4 modules), every pass: ~3,100 files, ~900 MB
    "large": WorkloadSize("large", layers=2, d_model=64, variants=2, eval_step=True, host_init=True),
}


def write_spec(size: WorkloadSize, folder: Path) -> Path:
    """An xlarun spec capturing the workload pass by pass (text + proto + dot); returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    dump = {"formats": list(size.formats), "pass_re": PASS_RE}
    if size.pipeline_re:
        dump["pipeline_re"] = size.pipeline_re
    spec = {
        "name": f"bench-transformer-{size.name}",
        "script": str(SCRIPT),
        "args": size.script_args(),
        "framework": "jax",
        "timeout": "30m",
        "dump": dump,
    }
    path = folder / f"transformer-{size.name}.yaml"
    path.write_text(json.dumps(spec, indent=2) + "\n")  # JSON is YAML
    return path
