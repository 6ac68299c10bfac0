"""The flags XLA's runners define at the XLA commit of each supported jaxlib (tests/fixtures/xla_runner_flags/,
written by scripts/xla_runner_flags.py from XLA's and JAX's git history)."""

from __future__ import annotations

import json
from pathlib import Path

FOLDER = Path(__file__).parent / "fixtures" / "xla_runner_flags"


def fixtures(runner: str) -> list[dict]:
    """Every recorded XLA commit's flag list for ``runner``, oldest first."""
    records = [json.loads(p.read_text()) for p in FOLDER.glob(f"{runner}.*.json")]
    return sorted(records, key=lambda r: r["xla_commit_date"])
