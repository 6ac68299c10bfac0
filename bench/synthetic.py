"""A synthetic store of many runs, made from one real capture through the store API.

Run *i* is the captured run with each module's ``before_optimizations.txt`` perturbed: every
``op_name="jit(f)/..."`` becomes ``op_name="jit(rNNN_f)/..."``, so each run has its own searchable
terms, its own blobs and its own index rows, while the other files are shared (as most are between
real re-runs of one job). The same runs are laid out as raw dump folders (hard links plus the
perturbed files) for ``rg`` to search.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from xlarun.hlo.names import decode_dump_name
from xlarun.store.facade import LocalStore

from .archive import bench_manifest, link_tree
from .timing import Timing


@dataclass
class SyntheticStore:
    store: LocalStore
    run_ids: list[str]
    raw_runs: Path  # one raw dump folder per run
    results: dict


def marker(i: int) -> str:
    """The op_name prefix only run ``i`` carries (``r007_``)."""
    return f"r{i:03d}_"


def _perturbable(path: str) -> bool:
    name = decode_dump_name(path)
    return name.kind == "hlo" and name.format == "text" and name.stage == "before_optimizations"


def _run_id(base: datetime, i: int) -> str:
    # time-sortable like real ids, one second apart, after the base run
    return f"{base + timedelta(seconds=i):%Y%m%d-%H%M%S}-{i:04x}"


def build_synthetic_store(store: LocalStore, base_run: str, raw_dump: Path, workdir: Path, n_runs: int) -> SyntheticStore:
    """Grow ``store`` (holding ``base_run``, captured from ``raw_dump``) to ``n_runs`` runs."""
    raw_runs = workdir / "raw-runs"
    link_tree(raw_dump, raw_runs / base_run)
    base_files = store.stored_files(base_run)
    perturbed = [f for f in base_files if _perturbable(f.path)]
    shared = [f for f in base_files if not _perturbable(f.path)]
    originals = {f.path: store.blobs.get(f.digest) for f in perturbed}
    index = store.index
    start = datetime.strptime(base_run[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    run_ids, ingest, archive = [base_run], [], []
    t_all = time.perf_counter()
    for i in range(1, n_runs):
        run_id, staging = store.begin_run(_run_id(start, i))
        raw = raw_runs / run_id
        for path, data in originals.items():
            changed = data.replace(b'op_name="jit(', f'op_name="jit({marker(i)}'.encode())
            (staging / "dump" / path).write_bytes(changed)
        t0 = time.perf_counter()
        files = store.archive_outputs(staging) + shared
        store.commit_run(
            run_id,
            staging,
            files,
            {"manifest.json": bench_manifest(run_id, "bench-synthetic", len(files), sum(f.size for f in files))},
        )
        t1 = time.perf_counter()
        store.ingest(run_id)
        t2 = time.perf_counter()
        archive.append(t1 - t0)
        ingest.append(t2 - t1)
        run_ids.append(run_id)
        _raw_copy(
            raw_dump, raw, {p: originals[p].replace(b'op_name="jit(', f'op_name="jit({marker(i)}'.encode()) for p in originals}
        )
    results = {
        "runs": len(run_ids),
        "modules": index.conn.execute("SELECT count(*) FROM modules").fetchone()[0],
        "files_indexed": index.conn.execute("SELECT count(*) FROM files").fetchone()[0],
        "terms_indexed": index.conn.execute("SELECT count(*) FROM terms").fetchone()[0],
        "build_s": round(time.perf_counter() - t_all, 3),
        "archive_per_run_median_s": round(Timing(archive).median, 5) if archive else 0.0,
        "ingest_per_run_median_s": round(Timing(ingest).median, 5) if ingest else 0.0,
        "raw_bytes_all_runs": sum(f.size for f in base_files) * len(run_ids),
    }
    return SyntheticStore(store, run_ids, raw_runs, results)


def _raw_copy(raw_dump: Path, dest: Path, replaced: dict[str, bytes]) -> None:
    """The run as a raw folder: hard links to the base dump, the perturbed files written anew."""
    for folder, _dirs, files in os.walk(raw_dump):
        rel = Path(folder).relative_to(raw_dump)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            key = (rel / name).as_posix()
            if key in replaced:
                (dest / rel / name).write_bytes(replaced[key])
            else:
                os.link(Path(folder) / name, dest / rel / name)
