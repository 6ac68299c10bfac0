"""XLA's own test modules replayed (``../shared/corpus/xla-hlo/accepted.jsonl``, see its README): every one ends
in a documented verdict and exit code (0 match or ran, 1 mismatch, 2 refused, 3 engine error), never an xlarun
crash (4), an abort (134), a segfault (139) or a hang.

The modules: those without custom calls and under 200 instructions. The suite replays a deterministic sample of
them through one persistent worker (:class:`xlarun.replay.worker.ReplayWorker`), with fake data and a second
compile to compare with (``--reference-platform cpu``). ``XLARUN_REPLAY_CORPUS=all`` replays every one (about
an hour on 2 CPUs, 20 s per module at most; the README's replay section gives the figures), ``=N`` a sample of N; with
``XLARUN_REPLAY_CORPUS_REPORT=FILE`` each outcome is written to FILE as a JSON line as it comes, and with
``XLARUN_REPLAY_CORPUS_SHARD=I/N`` only every N-th module from the I-th (0-based) is replayed (for one pytest per CPU).
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")

from xlarun.errors import XlarunError
from xlarun.replay import ReplayOptions
from xlarun.replay.worker import ReplayWorker

from .corpus_support import ACCEPTED as CORPUS

SAMPLE = 200
MAX_INSTRUCTIONS = 200
#: Per module; the sample also refuses fake data over 64 MB so that it stays fast (the full sweep uses the default).
SAMPLE_TIMEOUT_S, SAMPLE_MAX_DATA = 5.0, 64 << 20
DOCUMENTED = {0: "match or ran", 1: "mismatch", 2: "refused", 3: "engine error"}

pytestmark = [
    pytest.mark.usefixtures("xla_corpus"),
    pytest.mark.slow,
]  # a sweep of XLA's corpus


def small_modules() -> list[dict]:
    """The corpus modules a replay is asked to handle: no custom call, under 200 instructions, by id."""
    rows = []
    with CORPUS.open(encoding="utf-8") as corpus:
        for line in corpus:
            row = json.loads(line)
            if "custom-call" not in row["text"] and row["instructions"] < MAX_INSTRUCTIONS:
                rows.append(row)
    return sorted(rows, key=lambda row: row["id"])


def chosen(rows: list[dict]) -> tuple[list[dict], ReplayOptions]:
    wanted = os.environ.get("XLARUN_REPLAY_CORPUS", "")
    shard, shards = (int(n) for n in os.environ.get("XLARUN_REPLAY_CORPUS_SHARD", "0/1").split("/"))
    if wanted == "all":
        return rows[shard::shards], ReplayOptions(engine="pjrt", reference_platform="cpu", timeout_s=20)
    count = int(wanted) if wanted.isdigit() else SAMPLE
    stride = max(1, len(rows) // count)
    options = ReplayOptions(engine="pjrt", reference_platform="cpu", timeout_s=SAMPLE_TIMEOUT_S, max_data_bytes=SAMPLE_MAX_DATA)
    return rows[::stride][:count], options


def replay_outcome(worker: ReplayWorker, path: Path, options: ReplayOptions) -> dict:
    """What the CLI would exit with, and why; an exception that is not an XlarunError propagates (a bug)."""
    try:
        result = worker.replay(path, options)
    except XlarunError as exc:
        return {"exit_code": int(exc.exit_code), "verdict": "refused", "why": exc.message}
    return {
        "exit_code": int(result.exit_code),
        "verdict": result.verdict,
        "why": result.error,
        "crash": result.crash,
        "nonfinite": bool(result.nonfinite_outputs),
        "rng": bool(result.random_instructions),
    }


def test_every_small_corpus_module_ends_in_a_documented_exit_code(tmp_path):
    rows, options = chosen(small_modules())
    report = os.environ.get("XLARUN_REPLAY_CORPUS_REPORT")
    outcomes, started = [], time.monotonic()
    with ReplayWorker() as worker, open(report or os.devnull, "a", encoding="utf-8") as lines:
        for row in rows:
            path = tmp_path / f"{row['id']}.hlo"
            path.write_text(row["text"], encoding="utf-8")
            clock = time.monotonic()
            outcome = {"id": row["id"], **replay_outcome(worker, path, options), "s": round(time.monotonic() - clock, 3)}
            outcomes.append(outcome)
            lines.write(json.dumps(outcome) + "\n")
            lines.flush()
            path.unlink()
        starts = worker.starts
    codes = collections.Counter(o["exit_code"] for o in outcomes)
    crashes = collections.Counter(o.get("crash") for o in outcomes if o.get("crash"))
    print(
        f"\n{len(outcomes)} modules in {time.monotonic() - started:.0f} s, {starts} engine start(s): "
        + ", ".join(f"{DOCUMENTED.get(code, code)} {n}" for code, n in sorted(codes.items()))
        + f"; engine deaths {dict(crashes)}; NaN/Inf said {sum(o.get('nonfinite', False) for o in outcomes)}"
        + f"; rng said {sum(o.get('rng', False) for o in outcomes)}"
    )
    assert set(codes) <= set(DOCUMENTED), [o for o in outcomes if o["exit_code"] not in DOCUMENTED][:5]
    assert codes[0] > len(outcomes) // 2  # most of XLA's own modules run: a broken engine cannot pass as "refused"


def test_the_sample_is_deterministic_and_spread_over_the_corpus():
    rows = small_modules()
    first, _ = chosen(rows)
    again, _ = chosen(small_modules())
    assert [r["id"] for r in first] == [r["id"] for r in again]
    if not os.environ.get("XLARUN_REPLAY_CORPUS"):
        assert len(first) == SAMPLE and len(rows) > 3000
        assert len({r["origin"].split("#")[0].rsplit("/", 1)[0] for r in first}) > 30  # many of XLA's test folders
