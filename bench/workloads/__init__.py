"""The benchmark workloads: a transformer-like JAX training step (``transformer.py``) captured pass by
pass, at a size picked by a knob, as an xlarun spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "transformer.py"

#: Dump before/after every pass, as users ask for it. (XLA treats the literal ``.*`` specially: another
#: regex matching every pass, such as ``.+``, dumps about five times more files.)
PASS_RE = ".*"


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
    # the training step only, the passes of one pipeline: a CI smoke test (seconds)
    "small": WorkloadSize(
        "small", layers=1, d_model=32, variants=1, eval_step=False, host_init=True, pipeline_re="sharding-removal"
    ),
    # jitted init + train + eval steps, every pass: ~1,000 files, ~250 MB
    "medium": WorkloadSize("medium", layers=2, d_model=64, variants=1, eval_step=True),
    # three blocks; jitted init, train + eval steps for three sequence lengths (7 modules): ~2,250 files, ~750 MB
    "large": WorkloadSize("large", layers=3, d_model=64, variants=3, eval_step=True),
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
