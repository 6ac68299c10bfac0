"""XLA's own HLO as the proof of xlarun's reader (``../shared/corpus/xla-hlo``, see its README).

Every module XLA's parser accepts is read with XLA's instruction and computation counts, entry name,
entry instruction count and entry signature (asked of jaxlib here, in worker processes, while this
process parses); every module XLA refuses is read or refused with an InputError, never anything else.
Modules xlarun cannot match yet are listed, with the reason, in fixtures/hlo/corpus_known_differences.txt:
the list may shrink, never grow.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xlarun.errors import InputError
from xlarun.hlo import parse_hlo_text

from .corpus_support import XLA_CORPUS as CORPUS

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"
KNOWN_DIFFERENCES = FIXTURES / "corpus_known_differences.txt"
#: XLA's signatures of the few modules whose constants XLA takes 30 s or more to build (written by
#: ``python tests/test_hlo_corpus.py --write-slow-signatures``, with the same code the workers run).
SLOW_SIGNATURES = FIXTURES / "corpus_slow_signatures.json"
WORKERS = 2
SHOWN = 20

pytestmark = [
    pytest.mark.usefixtures("xla_corpus"),
    pytest.mark.slow,  # a sweep of XLA's corpus
]

# Run by each worker process: XLA's entry signature of every module it is given, as xlarun writes signatures.
XLA_SIGNATURE_WORKER = r"""
import json, re, sys
from jax._src.lib import xla_client
hlo = xla_client.hlo
LAYOUT, INDEX = re.compile(r"\]\{[^{}]*\}"), re.compile(r"/\*index=\d+\*/")

def plain(shape):
    return INDEX.sub("", LAYOUT.sub("]", str(shape)))

def signature(text):
    module = hlo.hlo_module_from_text(text)
    program = hlo.XlaComputation(module.as_serialized_hlo_module_proto()).program_shape()
    return "(" + ", ".join(plain(p) for p in program.parameter_shapes()) + ") -> " + plain(program.result_shape())

if __name__ == "__main__":  # argv: the corpus file, the ids wanted (comma-separated)
    wanted, out = set(sys.argv[2].split(",")), {}
    with open(sys.argv[1], encoding="utf-8") as corpus:
        for line in corpus:
            row = json.loads(line)
            if row["id"] in wanted:
                try:
                    out[row["id"]] = signature(row["text"])
                except Exception as error:  # reported by the test, with the module's id
                    out[row["id"]] = f"jaxlib failed: {error}"
    json.dump(out, sys.stdout)
"""
_CONSTANT = re.compile(r"[a-z][a-z0-9]*\[([0-9, ]*)\][^\s(]*\s+constant\(")
_SLOW_ELEMENTS = 1 << 24


def builds_huge_constants(text: str) -> bool:
    """A constant of more than 16M elements: XLA's parser fills it element by element (30 s or more)."""
    for m in _CONSTANT.finditer(text):
        elements = 1
        for size in m.group(1).replace(" ", "").split(","):
            elements *= int(size) if size else 1
        if elements > _SLOW_ELEMENTS:
            return True
    return False


def read_corpus(name: str) -> list[dict]:
    with open(CORPUS / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def known_differences() -> dict[str, str]:
    known = {}
    for line in KNOWN_DIFFERENCES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module_id, _, reason = line.partition(" ")
            known[module_id] = reason.strip()
    return known


def start_xla_workers(rows: list[dict]) -> list[subprocess.Popen]:
    """Worker processes that compute XLA's signatures (jaxlib in this interpreter) of ``rows``."""
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                XLA_SIGNATURE_WORKER,
                str(CORPUS / "accepted.jsonl"),
                ",".join(r["id"] for r in rows[k::WORKERS]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for k in range(WORKERS)
    ]


def shown(ids) -> str:
    ids = sorted(ids)
    return ", ".join(ids[:SHOWN]) + (f" ... ({len(ids)} in all)" if len(ids) > SHOWN else "")


@pytest.fixture(scope="module")
def corpus_results():
    """Each accepted module read by xlarun (its facts or the error), and XLA's signatures (None without jaxlib)."""
    accepted = read_corpus("accepted.jsonl")
    try:
        import jax._src.lib  # noqa: F401
    except ImportError:
        workers = None
    else:
        workers = start_xla_workers([r for r in accepted if not builds_huge_constants(r["text"])])
    started = time.perf_counter()
    ours: dict[str, tuple | str] = {}
    for row in accepted:
        try:
            module = parse_hlo_text(row["text"])
        except InputError as error:
            ours[row["id"]] = f"refused: {error.message}"
            continue
        except Exception as error:  # a crash: what the test exists to catch
            ours[row["id"]] = f"crashed: {error!r}"
            continue
        ours[row["id"]] = (
            module.instruction_count(),
            len(module.computations),
            "%" + module.entry_computation,
            len(module.entry.instructions),
            module.entry_signature,
        )
    parse_s = time.perf_counter() - started
    xla: dict[str, str] | None = None
    if workers is not None:
        xla = json.loads(SLOW_SIGNATURES.read_text())
        for process in workers:
            output, _ = process.communicate(timeout=600)
            assert process.returncode == 0, "a jaxlib worker failed"
            xla.update(json.loads(output))
    print(f"\n[hlo corpus] {len(accepted)} modules parsed in {parse_s:.1f} s")
    return accepted, ours, xla


def test_every_module_xla_accepts_is_read_with_xlas_counts(corpus_results):
    accepted, ours, _xla = corpus_results
    known = known_differences()
    refused = {r["id"] for r in accepted if isinstance(ours[r["id"]], str) and ours[r["id"]].startswith("refused")}
    crashed = {r["id"] for r in accepted if isinstance(ours[r["id"]], str) and ours[r["id"]].startswith("crashed")}
    different = {
        r["id"]
        for r in accepted
        if isinstance(ours[r["id"]], tuple)
        and ours[r["id"]][:4] != (r["instructions"], r["computations"], r["entry"], r["entry_instructions"])
    }
    print(
        f"[hlo corpus] read {len(accepted) - len(refused) - len(crashed)}/{len(accepted)}, "
        f"different counts {len(different)}, refused {len(refused)}, crashed {len(crashed)}"
    )
    assert not crashed, f"crashed (not an InputError): {shown(crashed)}; first: {ours[min(crashed)]}"
    assert not (refused | different) - set(known), (
        f"refused: {shown(refused - set(known))}; counts unlike XLA's: {shown(different - set(known))}"
    )


def test_entry_signatures_are_xlas(corpus_results):
    accepted, ours, xla = corpus_results
    if xla is None:
        pytest.skip("jaxlib is not installed: XLA's signatures cannot be computed")
    missing = {r["id"] for r in accepted if r["id"] not in xla}
    assert not missing, f"no XLA signature for {shown(missing)}: run python tests/test_hlo_corpus.py --write-slow-signatures"
    broken = {i for i, s in xla.items() if s.startswith("jaxlib failed")}
    assert not broken, f"jaxlib did not compute the signature of {shown(broken)}"
    unlike = {r["id"] for r in accepted if isinstance(ours[r["id"]], tuple) and ours[r["id"]][4] != xla[r["id"]]}
    print(f"[hlo corpus] same entry signature as XLA: {len(accepted) - len(unlike)}/{len(accepted)}")
    new = unlike - set(known_differences())
    example = min(new) if new else None
    assert not new, f"signatures unlike XLA's: {shown(new)}; {example}: ours {ours[example][4]!r}, XLA's {xla[example]!r}"


def test_the_known_differences_are_still_different(corpus_results):
    """The list only shrinks: a module read right now is taken off it."""
    accepted, ours, xla = corpus_results
    by_id = {r["id"]: r for r in accepted}
    known = known_differences()
    fixed = set()
    for module_id in known:
        row, facts = by_id.get(module_id), ours.get(module_id)
        if row is None or not isinstance(facts, tuple):
            continue
        same_counts = facts[:4] == (row["instructions"], row["computations"], row["entry"], row["entry_instructions"])
        if same_counts and (xla is None or facts[4] == xla.get(module_id)):
            fixed.add(module_id)
    assert not fixed, f"read as XLA reads them now: take {shown(fixed)} off {KNOWN_DIFFERENCES.name}"


def test_modules_xla_refuses_are_read_or_refused_cleanly():
    crashed = {}
    for row in read_corpus("rejected.jsonl"):
        try:
            parse_hlo_text(row["text"])
        except InputError:
            pass
        except Exception as error:
            crashed[row["id"]] = repr(error)
    assert not crashed, f"crashed (not an InputError): {shown(crashed)}; first: {crashed[min(crashed)] if crashed else ''}"


def test_slow_signatures_cover_exactly_the_modules_with_huge_constants():
    slow = {r["id"] for r in read_corpus("accepted.jsonl") if builds_huge_constants(r["text"])}
    assert slow == set(json.loads(SLOW_SIGNATURES.read_text())), "run python tests/test_hlo_corpus.py --write-slow-signatures"


def write_slow_signatures() -> None:
    """Compute XLA's signatures of the modules with huge constants (minutes) into SLOW_SIGNATURES."""
    rows = [r for r in read_corpus("accepted.jsonl") if builds_huge_constants(r["text"])]
    process = subprocess.run(
        [sys.executable, "-c", XLA_SIGNATURE_WORKER, str(CORPUS / "accepted.jsonl"), ",".join(r["id"] for r in rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    SLOW_SIGNATURES.write_text(json.dumps(json.loads(process.stdout), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write-slow-signatures"]:
    write_slow_signatures()
