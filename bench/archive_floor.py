"""The floor of archive + index: the CPU of the work it cannot skip, each step alone in one thread, and what two
threads get of the machine's two CPUs; the wall time below which no overlap can bring archive + index.

The required work, as the store does it: read every file into memory; hash each file (BLAKE3, its name in the
store); compress each series of dumps in packs (the pack parameters, with the frame checksum); parse the stage dumps
the index needs (the full parse of before_optimizations, for its fingerprint; the scan of after_optimizations);
count each text pass dump's instructions; and write the run's index rows after its commit (one thread: the rows must
not show before the run is committed). Run: ``python -m bench.archive_floor DUMP... [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import zstandard
from blake3 import blake3

from xlarun.hlo.names import decode_dump_name
from xlarun.store.archive import series_of
from xlarun.store.pack_format import PACK_BYTES, pack_params
from xlarun.store.summaries import _facts_from, count_instructions_in_text

from .archive import archive_and_index


def _files(dump: Path) -> list[tuple[str, str]]:
    """(archive name, path) of every file below ``dump``, sorted."""
    out = []
    for folder, _dirs, names in os.walk(dump):
        for name in names:
            path = os.path.join(folder, name)
            out.append((os.path.relpath(path, dump).replace(os.sep, "/"), path))
    return sorted(out)


def _cpu(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def required_work(dump: Path) -> dict[str, float]:
    """CPU seconds of each step of the required work, in this thread."""
    files = _files(dump)
    contents: dict[str, bytearray] = {}

    def read() -> None:
        for name, path in files:
            with open(path, "rb", buffering=0) as handle:
                buffer = bytearray(os.fstat(handle.fileno()).st_size)
                handle.readinto(buffer)
                contents[name] = buffer

    out = {"read": _cpu(read)}
    digests: dict[str, str] = {}
    out["hash"] = _cpu(lambda: digests.update((n, blake3(contents[n]).hexdigest()) for n, _p in files))
    series: dict[object, list[tuple[int, str]]] = defaultdict(list)
    for name, _path in files:
        key, position = series_of(name)
        series[key].append((position, name))
    packs: list[bytes] = []
    for members in series.values():  # each distinct content once, a pack every PACK_BYTES, in series order
        seen: set[str] = set()
        pack = bytearray()
        for _pos, name in sorted(members):
            if digests[name] not in seen:
                seen.add(digests[name])
                pack += contents[name]
            if len(pack) >= PACK_BYTES:
                packs.append(bytes(pack))
                pack = bytearray()
        if pack:
            packs.append(bytes(pack))

    def compress() -> None:
        for pack in packs:
            zstandard.ZstdCompressor(compression_params=pack_params(len(pack))).compress(pack)

    out["compress"] = _cpu(compress)
    names = {name: decode_dump_name(name) for name, _p in files}
    stages = [
        (n, bytes(contents[name]), n.stage == "before_optimizations")
        for name, n in names.items()
        if n.kind == "hlo" and n.format == "text" and n.stage in ("before_optimizations", "after_optimizations")
    ]
    out["parse"] = _cpu(lambda: [_facts_from(n, data, fingerprint) for n, data, fingerprint in stages])
    passes = {digests[name]: contents[name] for name, n in names.items() if n.kind == "pass" and n.format == "text"}
    out["count"] = _cpu(lambda: [count_instructions_in_text(data) for data in passes.values()])
    return out


def two_thread_share(seconds: float = 0.3) -> float:
    """CPUs that two threads of C work (BLAKE3, the GIL released) get together, out of 2.0: CPU time over wall time
    of one thread alone, against two at once."""
    data = os.urandom(1 << 20) * 16
    rounds = max(1, int(seconds / 0.004))

    def work() -> None:
        for _ in range(rounds):
            blake3(data).digest()

    alone = float("inf")
    for _ in range(2):  # the better of two: one thread alone, undisturbed
        t0 = time.perf_counter()
        work()
        alone = min(alone, time.perf_counter() - t0)
    threads = [threading.Thread(target=work) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return round(2 * alone / (time.perf_counter() - t0), 3)


def _read_floor(dump: Path) -> float:
    import subprocess

    t0 = time.perf_counter()
    subprocess.run(f"find '{dump}' -type f -exec cat {{}} + > /dev/null", shell=True, check=True)
    return time.perf_counter() - t0


def measure_floor(dump: Path, repeats: int) -> dict:
    """Medians over ``repeats`` of each step's CPU, the two threads' share, the post-commit index write (timed in
    :func:`bench.archive.archive_and_index`) and ``cat``; the wall floor and its ratio to ``cat``."""
    _read_floor(dump)  # the page cache warm
    steps: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        for step, cpu in required_work(dump).items():
            steps[step].append(cpu)
        steps["share"].append(two_thread_share())
        with tempfile.TemporaryDirectory(prefix="xlarun-bench-floor-") as tmp:
            run = archive_and_index(dump, Path(tmp) / "store")
            steps["index_after_commit"].append(run.index_s)
            run.store.close()
        steps["cat"].append(_read_floor(dump))
    out = {step: round(statistics.median(values), 4) for step, values in steps.items()}
    overlapped = sum(out[s] for s in ("read", "hash", "compress", "parse", "count"))
    out["overlapped_cpu_s"] = round(overlapped, 4)
    out["wall_floor_s"] = round(overlapped / out["share"] + out["index_after_commit"], 4)
    out["wall_floor_x_cat"] = round(out["wall_floor_s"] / out["cat"], 2)
    out["load"] = round(os.getloadavg()[0], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    """The floor of archive + index on each dump folder: the required work's CPU over the CPUs two threads get."""
    parser = argparse.ArgumentParser(prog="python -m bench.archive_floor", description=main.__doc__)
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    for dump in args.dumps:
        f = measure_floor(dump, args.repeats)
        print(
            f"{dump}: read {f['read']:.3f} + hash {f['hash']:.3f} + compress {f['compress']:.3f} + parse {f['parse']:.3f}"
            f" + count {f['count']:.3f} = {f['overlapped_cpu_s']:.3f} CPU s over {f['share']} CPUs, + index after commit"
            f" {f['index_after_commit']:.3f} s = floor {f['wall_floor_s']:.3f} s against cat {f['cat']:.3f} s:"
            f" {f['wall_floor_x_cat']}x (load {f['load']})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
