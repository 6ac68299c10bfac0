"""Archive: the store API (archive + index) on a raw dump folder against ``tar czf``, ``tar`` with
``zstd --long``, and ``cat`` of every file (the read floor); random access to one file."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from xlarun.store.facade import LocalStore

from .results_files import add_output_options, output_path, write_results
from .timing import Timing, ratio, time_call, time_command, tool, tree_bytes

ZSTD_LONG = "zstd --long=27 -T0"


@dataclass
class ArchivedRun:
    store: LocalStore
    run_id: str
    archive_s: float
    index_s: float
    cpu_s: float  # this process and its children (the parse workers), archive + index


def link_tree(source: Path, dest: Path) -> int:
    """Hard-link every file below ``source`` into ``dest`` (copy across file systems); returns the count."""
    count = 0
    for folder, _dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            src, dst = Path(folder) / name, dest / rel / name
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
            count += 1
    return count


def bench_manifest(run_id: str, name: str, n_files: int, dump_bytes: int) -> str:
    """A minimal manifest.json for runs the benchmark writes through the store API."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    return json.dumps(
        {
            "run_id": run_id,
            "name": name,
            "status": "succeeded",
            "exit_code": 0,
            "started": now,
            "ended": now,
            "duration_s": 0.0,
            "backend": "local",
            "framework": "jax",
            "files": n_files,
            "dump_bytes": dump_bytes,
            "kind": "capture",
        }
    )


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def archive_and_index(raw_dump: Path, store_root: Path, name: str = "bench-archive") -> ArchivedRun:
    """Archive a raw dump folder into a store at ``store_root`` and index it, as a capture does once its job
    has ended, timing both (linking the files in is not timed). The stage dumps are parsed beside the archive's
    threads (store/parse_ahead.py), so part of the indexing is in ``archive_s``."""

    store = LocalStore.open(store_root)  # a new LocalStore: its facts cache is empty, as in a new process
    store.index.run_ids()  # the index opened (and reconciled) before the run exists: the timed ingest is the only one
    run_id, staging = store.begin_run()
    link_tree(raw_dump, staging / "dump")
    c0, t0 = _cpu_s(), time.perf_counter()
    files = store.archiver(staging).finish()
    store.commit_run(
        run_id, staging, files, {"manifest.json": bench_manifest(run_id, name, len(files), sum(f.size for f in files))}
    )
    t1 = time.perf_counter()
    store.ingest(run_id, files)  # as commit_indexed does: the list just committed
    store.wait_for_discards()  # the raw files' deletion, begun in the background, is part of the work
    t2 = time.perf_counter()
    return ArchivedRun(store, run_id, t1 - t0, t2 - t1, _cpu_s() - c0)


def _fresh(path: Path) -> Path:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


def measure_archive(raw_dump: Path, workdir: Path, repeats: int, others: bool = True) -> tuple[dict, ArchivedRun]:
    """Every archiver on the same (page-cached) dump, round-robin so load changes hit all alike (``others`` False:
    only the ``cat`` floor beside xlarun, no tar and no random access).

    Returns the results and the store of the last xlarun repeat.
    """
    raw_bytes = tree_bytes(raw_dump)
    n_files = sum(len(files) for _folder, _dirs, files in os.walk(raw_dump))
    tgz, tzst = workdir / "dump.tar.gz", workdir / "dump.tar.zst"
    commands = {
        "read_floor": f"find '{raw_dump}' -type f -exec cat {{}} + > /dev/null",
        "tar_czf": ["tar", "czf", str(tgz), "-C", str(raw_dump), "."],
    }
    if not others:
        del commands["tar_czf"]
    elif tool("zstd"):
        commands["tar_zstd_long"] = ["tar", "-I", ZSTD_LONG, "-cf", str(tzst), "-C", str(raw_dump), "."]
    time_command(commands["read_floor"], 1, shell=True)  # warm the page cache for everyone
    samples: dict[str, list[float]] = {name: [] for name in commands}
    runs: list[ArchivedRun] = []
    for i in range(repeats):
        for name, argv in commands.items():
            samples[name] += time_command(argv, 1, shell=isinstance(argv, str)).samples
        store_root = _fresh(workdir / f"archive-store-{i}")
        runs.append(archive_and_index(raw_dump, store_root))
        if i:
            runs[-2].store.close()
            shutil.rmtree(runs[-2].store.root)
    results: dict = {"raw_files": n_files, "raw_bytes": raw_bytes, "load_before": round(os.getloadavg()[0], 2)}
    for name, values in samples.items():
        results[name] = Timing(values).to_dict()
    if "tar_czf" in results:
        results["tar_czf"]["bytes"] = tgz.stat().st_size
    if "tar_zstd_long" in results:
        results["tar_zstd_long"]["bytes"] = tzst.stat().st_size
    last = runs[-1]
    total = Timing([r.archive_s + r.index_s for r in runs])
    last.store.close()  # checkpoint the WAL so the index's size is what stays on disk
    store_bytes = tree_bytes(last.store.root)
    results["xlarun"] = {
        **total.to_dict(),
        "archive_median_s": round(Timing([r.archive_s for r in runs]).median, 6),
        "index_median_s": round(Timing([r.index_s for r in runs]).median, 6),
        "cpu_median_s": round(Timing([r.cpu_s for r in runs]).median, 6),
        "bytes": store_bytes,
        "blob_bytes": last.store.disk_usage(),
        "index_bytes": (last.store.root / "index.sqlite").stat().st_size,
    }
    floor = results["read_floor"]["median_s"]
    results["ratio_vs_read_floor"] = round(ratio(total.median, floor), 4)
    # each repeat against the floor timed just before it: on a shared machine, the pairs are what compare
    pairs = [ratio(r.archive_s + r.index_s, f) for r, f in zip(runs, samples["read_floor"], strict=True)]
    results["ratio_vs_read_floor_paired_median"] = round(Timing(pairs).median, 4)
    results["load_after"] = round(os.getloadavg()[0], 2)
    results["compression_ratio"] = round(ratio(raw_bytes, store_bytes), 2)
    if others:
        results["ratio_vs_tar_czf"] = round(ratio(total.median, results["tar_czf"]["median_s"]), 4)
        results["bytes_vs_tar_czf"] = round(ratio(store_bytes, results["tar_czf"]["bytes"]), 4)
        results["random_access"] = _random_access(last, raw_dump, tgz, repeats)
    return results, last


def _sample_paths(store: LocalStore, run_id: str, count: int) -> list[str]:
    paths = sorted(f.path for f in store.stored_files(run_id))
    step = max(1, len(paths) // count)
    return paths[::step][:count]


def _random_access(archived: ArchivedRun, raw_dump: Path, tgz: Path, repeats: int) -> dict:
    """Per-file read time: from the store (``LocalStore.read_file``), from the raw folder, and out of the tar.gz.

    Cold: every read opens the store afresh (no cached files.json, no decoded delta bases), as a new
    process would. Warm: one store object reads the 50 sampled files in turn.
    """
    store, run_id = archived.store, archived.run_id
    paths = _sample_paths(store, run_id, 50)
    for path in paths:  # same bytes both ways
        assert store.read_file(run_id, path) == (raw_dump / path).read_bytes(), path
    reps = max(5, repeats * 3)
    from_store = time_call(lambda: [LocalStore(store.root).read_file(run_id, p) for p in paths], reps)
    warm = time_call(lambda: (lambda s: [s.read_file(run_id, p) for p in paths])(LocalStore(store.root)), reps)
    from_raw = time_call(lambda: [(raw_dump / p).read_bytes() for p in paths], reps)
    one = paths[len(paths) // 2]
    from_tgz = time_command(["tar", "xzf", str(tgz), "-O", f"./{one}"], max(1, repeats))
    per = len(paths)
    return {
        "files_sampled": per,
        "store_per_file_s": round(from_store.median / per, 7),
        "store_warm_per_file_s": round(warm.median / per, 7),
        "raw_per_file_s": round(from_raw.median / per, 7),
        "tar_czf_one_file_s": round(from_tgz.median, 5),
        "ratio_store_vs_raw": round(ratio(from_store.median, from_raw.median), 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Archive + index of given dump folders against ``cat`` of every file (the floor), interleaved."""
    parser = argparse.ArgumentParser(prog="python -m bench.archive", description=main.__doc__)
    parser.add_argument("dumps", nargs="+", type=Path, help="raw dump folders (what --xla_dump_to wrote)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--all", action="store_true", help="tar czf, tar zstd --long and random access too")
    add_output_options(parser, "archive")
    args = parser.parse_args(argv)
    results: dict = {}
    for dump in args.dumps:
        with tempfile.TemporaryDirectory(prefix="xlarun-bench-archive-") as tmp:
            measured, last = measure_archive(dump, Path(tmp), args.repeats, others=args.all)
            last.store.close()
        results[dump.name if dump.name != "dump" else dump.parent.parent.name] = measured
        floor, ours = measured["read_floor"]["median_s"], measured["xlarun"]
        print(
            f"{dump}: {measured['raw_bytes'] / 1e6:.0f} MB, {measured['raw_files']} files: archive + index "
            f"{ours['median_s']:.3f} s (CPU {ours['cpu_median_s']:.3f} s) against cat {floor:.3f} s: "
            f"{measured['ratio_vs_read_floor']}x (paired {measured['ratio_vs_read_floor_paired_median']}x), "
            f"load {measured['load_before']} -> {measured['load_after']}"
        )
    print(f"written to {write_results(output_path(args, 'archive'), results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def format_markdown(results: dict) -> str:
    """Archive + index of each recorded dump against reading its files (the floor)."""
    lines = [
        "Archive and index of a pass-by-pass dump (overlapped) against reading every file of it (the floor). "
        "Target: at most 4x the floor.",
        "",
        "| dump | files | MB | floor, s | xlarun, s | of which index after commit, s | CPU, s | x floor | x floor (paired) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if not isinstance(r, dict) or "xlarun" not in r:
            continue
        x = r["xlarun"]
        lines.append(
            f"| {name} | {r['raw_files']} | {r['raw_bytes'] / 1e6:.0f} | {r['read_floor']['median_s']:.3f} | "
            f"{x['median_s']:.3f} | {x.get('index_median_s', 0):.3f} | {x.get('cpu_median_s', 0):.2f} | "
            f"{r['ratio_vs_read_floor']:.1f}x | {r.get('ratio_vs_read_floor_paired_median', 0):.1f}x |"
        )
    return "\n".join(lines)
