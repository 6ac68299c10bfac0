"""Tiny runs on disk: N runs of a small dump each (4 modules, each before and after optimizations, a few hundred
bytes apiece, as XLA names them), archived and committed in one process as a capture does, then the store's packs
and the whole store measured: what the files hold, what their packs hold, and what the disk gives them (blocks).

    python -m bench.tiny_runs [--runs 10000] [--record]

Twice: as xlarun archives now (a small dump's series share one pack), then once more after ``xlarun gc`` merged
the small packs, and with the sharing turned off (a pack per module series, as before), so the ratio is measured
beside its floor. Target: the packs of 10,000 tiny runs take at most 1.5x
their bytes on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .results_files import add_output_options, output_path, write_results

HLO = """HloModule jit_step{m}, entry_computation_layout={{(f32[8]{{0}})->f32[8]{{0}}}}

ENTRY main.4 {{
  Arg_0.1 = f32[8]{{0}} parameter(0)
  constant.2 = f32[] constant({value})
  broadcast.3 = f32[8]{{0}} broadcast(constant.2), dimensions={{}}
  ROOT {op}.4 = f32[8]{{0}} {op}(Arg_0.1, broadcast.3), metadata={{op_name="jit(step{m})/{op}" source_file="tiny.py" source_line={line}}}
}}
"""


def disk(folder: Path) -> tuple[int, int, int]:
    """(files, bytes they hold, bytes of disk their blocks take) below ``folder``."""
    files = held = used = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
            files, held, used = files + 1, held + st.st_size, used + st.st_blocks * 512
    return files, held, used


def parts(root: Path) -> dict[str, dict[str, int]]:
    """Where the store's disk goes: files, bytes and disk bytes of its packs, its run folders' own files (and the
    folders themselves, a block each), the index, and the rest (pack table, locks)."""
    found: dict[str, list[int]] = {k: [0, 0, 0] for k in ("packs", "run_files", "run_folders", "index", "other")}
    for folder, dirs, names in os.walk(root):
        rel = Path(folder).relative_to(root).parts
        if rel[:1] == ("runs",):
            for name in dirs:
                st = os.stat(os.path.join(folder, name), follow_symlinks=False)
                found["run_folders"] = [
                    found["run_folders"][0] + 1,
                    found["run_folders"][1],
                    found["run_folders"][2] + st.st_blocks * 512,
                ]
        for name in names:
            st = os.stat(os.path.join(folder, name), follow_symlinks=False)
            part = (
                "packs"
                if rel[:2] == ("blobs", "packs")
                else "run_files"
                if rel[:1] == ("runs",)
                else "index"
                if not rel and name.startswith("index.sqlite")
                else "other"
            )
            row = found[part]
            found[part] = [row[0] + 1, row[1] + st.st_size, row[2] + st.st_blocks * 512]
    return {k: {"files": v[0], "bytes": v[1], "disk_bytes": v[2]} for k, v in found.items()}


def fill(root: Path, runs: int, seed: int) -> float:
    """``runs`` tiny runs committed into a new store at ``root``; returns the seconds it took."""
    from xlarun.store.facade import LocalStore

    rng = random.Random(seed)
    store = LocalStore.open(root)
    started = time.perf_counter()
    for i in range(runs):
        run_id, staging = store.begin_run(f"20260101-{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i % 65536:04x}")
        dump = staging / "dump"
        dump.mkdir(parents=True, exist_ok=True)
        for m in range(4):
            for stage, op in (("before_optimizations", "add"), ("after_optimizations", "multiply")):
                text = HLO.format(m=m, value=rng.random(), op=op, line=rng.randrange(1, 500))
                (dump / f"module_{m:04d}.jit_step{m}.{stage}.txt").write_text(text)
        files = store.archive_outputs(staging)
        manifest = {"name": "tiny", "kind": "capture", "status": "succeeded", "exit_code": 0, "backend": "local"}
        store.commit_indexed(run_id, staging, files, {"manifest.json": json.dumps(manifest)})
    store.close()
    return time.perf_counter() - started


def measured(root: Path, seconds: float) -> dict:
    """The store at ``root`` measured: its packs and the whole store, files, bytes and disk, and where the disk goes."""
    packs, packed, packs_disk = disk(root / "blobs" / "packs")
    files, held, used = disk(root)
    return {
        "seconds": round(seconds, 1),
        "packs": packs,
        "pack_bytes": packed,
        "pack_disk_bytes": packs_disk,
        "packs_disk_over_bytes": round(packs_disk / packed, 2),
        "store_files": files,
        "store_bytes": held,
        "store_disk_bytes": used,
        "store_disk_over_bytes": round(used / held, 2),
        "parts": parts(root),
    }


def collected(root: Path) -> dict:
    """The store again once ``xlarun gc`` merged its small packs."""
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(root)
    started = time.perf_counter()
    done = store.gc()
    took = time.perf_counter() - started
    store.close()
    row = {"merged": done.merged, **measured(root, took)}
    packs, packed, packs_disk, held, used = (
        row[k] for k in ("packs", "pack_bytes", "pack_disk_bytes", "store_bytes", "store_disk_bytes")
    )
    print(
        f"[tiny_runs] after gc ({took:.1f} s, {done.merged} packs merged): {packs} packs, {packed / 1e6:.1f} MB in "
        f"{packs_disk / 1e6:.1f} MB of disk; whole store {held / 1e6:.1f} MB in {used / 1e6:.1f} MB "
        f"({row['store_disk_over_bytes']}x)",
        file=sys.stderr,
        flush=True,
    )
    return row


def measure(runs: int, workdir: Path) -> dict:
    import xlarun.store.archive as archive  # the module itself: its SMALL_DUMP_BYTES is switched below

    results: dict = {"runs": runs}
    for label, small in (("shared_pack", archive.SMALL_DUMP_BYTES), ("pack_per_series", 0)):
        archive.SMALL_DUMP_BYTES = small
        root = workdir / label
        took = fill(root, runs, seed=1)
        results[label] = measured(root, took)
        row = results[label]
        packs, packed, packs_disk, held, used = (
            row[k] for k in ("packs", "pack_bytes", "pack_disk_bytes", "store_bytes", "store_disk_bytes")
        )
        print(
            f"[tiny_runs] {label}: {runs} runs in {took:.0f} s: {packs} packs, {packed / 1e6:.1f} MB in "
            f"{packs_disk / 1e6:.1f} MB of disk ({row['packs_disk_over_bytes']}x); whole store {held / 1e6:.1f} MB "
            f"in {used / 1e6:.1f} MB ({row['store_disk_over_bytes']}x)",
            file=sys.stderr,
            flush=True,
        )
        print(f"[tiny_runs] {label} parts: {json.dumps(row['parts'])}", file=sys.stderr, flush=True)
        if label == "shared_pack":
            results["after_gc"] = collected(root)
        shutil.rmtree(root, ignore_errors=True)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tiny_runs", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    add_output_options(parser, "tiny_runs")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="xlarun-bench-tiny-"))
    try:
        results = measure(args.runs, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"written to {write_results(output_path(args, 'tiny_runs'), results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def format_markdown(results: dict) -> str:
    """Disk against data for many tiny runs, the way they are archived now and a pack per series."""
    lines = [
        f"{results.get('runs', 0):,} tiny runs captured into one store. Target: the store's disk at most 1.5x its data.",
        "",
        "| layout | packs | pack data, MB | pack disk, MB | packs disk / data | store data, MB | store disk, MB | store disk / data |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in ("shared_pack", "after_gc", "pack_per_series"):
        r = results.get(key)
        if not r:
            continue
        lines.append(
            f"| {key.replace('_', ' ')} | {r['packs']:,} | {r['pack_bytes'] / 1e6:.1f} | {r['pack_disk_bytes'] / 1e6:.1f} | "
            f"{r['packs_disk_over_bytes']}x | {r['store_bytes'] / 1e6:.1f} | {r['store_disk_bytes'] / 1e6:.1f} | "
            f"{r['store_disk_over_bytes']}x |"
        )
    return "\n".join(lines)
