"""Randomly damaged archives (bytes flipped, cut short) of every kind `import` reads: each is imported or refused
with an XlarunError (exit 2 or 3), never anything else (a zip's unknown compression method or version was a
NotImplementedError, exit 4); nothing is left in staging and the store stays sound."""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
import zipfile

import pytest
import zstandard

from xlarun.errors import XlarunError
from xlarun.share.import_dump import import_dump
from xlarun.store.facade import LocalStore

from .support import assert_sound

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

HLO = b"HloModule jit_f\n\nENTRY main {\n  ROOT c = f32[] constant(1)\n}\n"
TRIALS = 400


def _tar() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        members = {f"d/module_{i:04d}.jit_f{i}.before_optimizations.txt": HLO * (i + 1) for i in range(4)}
        members["d/_xlarun/manifest.json"] = json.dumps({"name": "x", "xla_flags": ["--xla_dump_to=/tmp/d"]}).encode()
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _zip() -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for i in range(4):
            archive.writestr(f"dump/module_{i:04d}.jit_f{i}.before_optimizations.txt", HLO * (i + 1))
        archive.writestr("_xlarun/bundle.json", json.dumps({"module": {"module_id": 1}}))
    return raw.getvalue()


@pytest.mark.slow
def test_randomly_damaged_archives_are_imported_or_refused_never_a_crash(tmp_path, figures):
    rng = random.Random(24)
    sound = {
        "tar": _tar(),
        "tar.gz": gzip.compress(_tar()),
        "tar.zst": zstandard.ZstdCompressor().compress(_tar()),
        "zip": _zip(),
    }
    store = LocalStore.open(tmp_path / "store", create=True)
    outcomes: dict[str, int] = {}
    crashes: list[str] = []
    for trial in range(TRIALS):
        kind = rng.choice(sorted(sound))
        data = bytearray(sound[kind])
        how = rng.choice(("flip one", "flip many", "cut short"))
        if how == "cut short":
            data = data[: rng.randrange(len(data))]
        for _ in range({"flip one": 1, "flip many": rng.randint(2, 20)}.get(how, 0)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"trial{trial}.{kind}"
        path.write_bytes(bytes(data))
        try:
            import_dump(path, store)
            outcome = "imported"
        except XlarunError as exc:
            outcome = f"exit {int(exc.exit_code)}"
        except Exception as exc:  # what this test is for: anything else is exit 4
            outcome = "crash"
            crashes.append(f"{trial} {kind} {how}: {exc!r}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        path.unlink()
    store.close()
    state = assert_sound(tmp_path / "store")
    figures(tried=TRIALS, **{k.replace(" ", ""): v for k, v in sorted(outcomes.items())}, crashes=len(crashes))
    assert crashes == [], crashes[:5]
    assert state.leftovers == 0 and len(state.runs) == outcomes.get("imported", 0)
    assert outcomes.get("exit 2", 0) > TRIALS // 4  # the damage is real: most are refused
