"""Where the tests take XLA's own HLO corpus from: ``../shared/corpus/xla-hlo`` beside the checkout (CI lays it
there), or ``$XLARUN_XLA_CORPUS``. Without it the corpus tests skip, saying where they looked; under ``CI=true``
they fail instead, since CI has the corpus and a skip there would hide a broken set-up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
XLA_CORPUS = Path(os.environ.get("XLARUN_XLA_CORPUS") or REPO.parent / "shared" / "corpus" / "xla-hlo")
ACCEPTED = XLA_CORPUS / "accepted.jsonl"


def require_corpus() -> Path:
    """The corpus folder; a skip where it is missing, a failure under CI."""
    if ACCEPTED.is_file():
        return XLA_CORPUS
    why = f"XLA's HLO corpus is not at {XLA_CORPUS} (set XLARUN_XLA_CORPUS=DIR, or lay ../shared beside the checkout)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def xla_corpus() -> Path:
    return require_corpus()
