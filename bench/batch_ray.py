"""A batch on a Ray cluster against the same batch run locally, and what shipping a run back costs.

    python -m bench.batch_ray [--spec configs/matrix-flags.yaml] [--repeats 2] [--out bench/out/batch_ray.json]

- **overhead**: the same cells (default: ``configs/matrix-flags.yaml``, the bundled JAX MLP over two flag
  values) with ``run_batch(jobs=N)`` here and with ``--executor ray`` on a loopback cluster of N worker nodes
  (``ray.cluster_utils.Cluster``: a head with no CPUs, each worker offering ``xlarun_local: 1``), alternating
  which goes first; the cluster's start (and stop) is timed apart, so the overhead is given both without and
  with it.
- **bytes shipped**: for every run the Ray batch shipped, the bytes sent back (only the files the driver's store
  lacked), the bytes had every file been sent (the "packed run" alternative, ``pack_run`` with no filter), the
  run's dump as written, and what the run added to the driver's store on disk.
- **project snapshots** (``--ship``): taking the snapshot of the spec's project folder that a batch sends to
  its nodes, and of a synthetic project half the size limit (2,000 source-like files, 32 MiB); for each, the
  compressed size, a node's check that it holds the same files (``auto``: hash every file) and unpacking the
  copy. ``--snapshots-only`` measures this part alone (no cluster).

Everything runs on this machine: a cluster here measures the executor's own cost (task placement, the capture
child, shipping, verifying, committing), not a network.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.results_files import add_output_options, output_path, write_results

REPO = Path(__file__).resolve().parents[1]


def start_cluster(nodes: int, staging: Path):
    """A loopback cluster: a head with no CPUs (the driver's) and ``nodes`` workers offering one local cell each."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ["XLARUN_NODE_STAGING"] = str(staging)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 100 << 20, "include_dashboard": False}
    )
    for _ in range(nodes):
        cluster.add_node(num_cpus=1, resources={"xlarun_local": 1}, object_store_memory=100 << 20)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    return cluster


def stop_cluster(cluster) -> None:
    import ray

    ray.shutdown()
    cluster.shutdown()  # the nodes' processes, by pid (never `ray stop`)


def _store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "blobs").rglob("*") if p.is_file())


def shipped_sizes(store, cells) -> list[dict]:
    """Per run the Ray batch committed: bytes sent, bytes a full shipment would have been, dump and stored size."""
    from xlarun.executors.shipping import pack_run

    out = []
    for cell in cells:
        if not cell.ok:
            continue
        run_id = cell.result.run_id
        ray_facts = store.manifest(run_id)["backend_details"]["ray"]
        full = pack_run(store, run_id)  # what shipping the packed run whole would send
        out.append(
            {
                "cell": cell.label,
                "run_id": run_id,
                "node": cell.node,
                "files": ray_facts["files"],
                "files_shipped": ray_facts["files_shipped"],
                "shipped_bytes": ray_facts["shipped_bytes"],
                "full_shipment_bytes": full.wire_bytes,
                "dump_bytes": cell.result.manifest.dump_bytes,
            }
        )
    return out


def measure(spec: Path, repeats: int, workdir: Path) -> dict:
    from xlarun.batch import run_batch
    from xlarun.capture.spec_yaml import load_batch
    from xlarun.executors import run_batch_on
    from xlarun.store.facade import LocalStore

    cells = load_batch(spec)
    nodes = len(cells)
    t0 = time.perf_counter()
    cluster = start_cluster(nodes, workdir / "node-staging")
    cluster_start = time.perf_counter() - t0
    local_s, ray_s, shipped, stored_first = [], [], [], None
    try:
        for i in range(repeats):
            order = ["local", "ray"] if i % 2 == 0 else ["ray", "local"]
            for kind in order:
                store = LocalStore.open(workdir / f"{kind}-{i}")
                t0 = time.perf_counter()
                if kind == "local":
                    result = run_batch(load_batch(spec), store, jobs=nodes)
                    local_s.append(time.perf_counter() - t0)
                else:
                    result = run_batch_on("ray", load_batch(spec), store)
                    ray_s.append(time.perf_counter() - t0)
                    shipped = shipped_sizes(store, result.cells)
                    stored_first = _store_bytes(store.root)
                if not result.ok:
                    raise SystemExit(f"{kind} batch failed: {[c.error for c in result.cells]}")
                store.close()
        # what one run takes in a store of its own: the first cell captured alone, here
        alone = LocalStore.open(workdir / "alone")
        run_batch(load_batch(spec)[:1], alone)
        stored_one_run = _store_bytes(alone.root)
    finally:
        t0 = time.perf_counter()
        stop_cluster(cluster)
        cluster_stop = time.perf_counter() - t0
    local, ray_ = statistics.median(local_s), statistics.median(ray_s)
    return {
        "spec": str(spec),
        "cells": len(cells),
        "nodes": nodes,
        "repeats": repeats,
        "local_batch_s": [round(s, 2) for s in local_s],
        "ray_batch_s": [round(s, 2) for s in ray_s],
        "cluster_start_s": round(cluster_start, 2),
        "cluster_stop_s": round(cluster_stop, 2),
        "overhead_s_cluster_excluded": round(ray_ - local, 2),
        "overhead_s_cluster_included": round(ray_ + cluster_start + cluster_stop - local, 2),
        "ray_over_local_ratio": round(ray_ / local, 3),
        "runs": shipped,
        "driver_store_bytes_after_ray_batch": stored_first,
        "store_bytes_of_one_run_alone": stored_one_run,
    }


def measure_snapshots(spec: Path, workdir: Path) -> list[dict]:
    """Snapshot, in-place check and unpack times for the spec's project and a synthetic one (see the docstring)."""
    import random

    from xlarun.capture.spec_yaml import load_batch
    from xlarun.executors.project import differences, place, snapshot

    synthetic = workdir / "synthetic-project"
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 12))) for _ in range(5000)]
    per_file = (32 << 20) // 2000
    for i in range(2000):
        folder = synthetic / f"pkg{i // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        text, size = [], 0
        while size < per_file:
            line = f"{rng.choice(words)} = {rng.choice(words)}({rng.choice(words)}, {rng.randint(0, 1 << 30)})\n"
            text.append(line)
            size += len(line)
        (folder / f"mod{i}.py").write_text("".join(text))
    (synthetic / "job.py").write_text("print(1)\n")
    (synthetic / "spec.yaml").write_text("name: synthetic\nscript: job.py\n")
    out = []
    for name, spec_path in (("spec's project", spec), ("synthetic, 2,000 files", synthetic / "spec.yaml")):
        loaded = load_batch(spec_path)[0]
        t0 = time.perf_counter()
        project = snapshot(loaded)
        taken = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert differences(project) == []
        checked = time.perf_counter() - t0
        t0 = time.perf_counter()
        place(project, "always", loaded, workdir / f"copy-{len(out)}")
        unpacked = time.perf_counter() - t0
        out.append(
            {
                "project": name,
                "files": len(project.files),
                "bytes": project.size,
                "archive_bytes": len(project.archive),
                "snapshot_s": round(taken, 3),
                "in_place_check_s": round(checked, 3),
                "unpack_s": round(unpacked, 3),
            }
        )
    return out


def format_snapshots(rows: list[dict]) -> str:
    lines = [f"  {'project snapshot':24} {'files':>6} {'size':>9} {'sent':>9} {'snapshot':>9} {'check':>7} {'unpack':>7}"]
    for r in rows:
        lines.append(
            f"  {r['project']:24} {r['files']:>6} {r['bytes'] / 2**20:7.1f}M {r['archive_bytes'] / 2**20:7.2f}M "
            f"{r['snapshot_s']:8.2f}s {r['in_place_check_s']:6.2f}s {r['unpack_s']:6.2f}s"
        )
    return "\n".join(lines)


def format_report(r: dict) -> str:
    lines = [
        f"{r['cells']} cells of {Path(r['spec']).name} on {r['nodes']} loopback nodes, {r['repeats']} repeats (medians)",
        f"  local batch (-j {r['nodes']})    {statistics.median(r['local_batch_s']):7.2f} s   {r['local_batch_s']}",
        f"  ray batch              {statistics.median(r['ray_batch_s']):7.2f} s   {r['ray_batch_s']}",
        f"  cluster start / stop   {r['cluster_start_s']:7.2f} s / {r['cluster_stop_s']:.2f} s",
        f"  overhead: {r['overhead_s_cluster_excluded']:+.2f} s cluster excluded, {r['overhead_s_cluster_included']:+.2f} s included",
        f"  {'run':24} {'files sent':>12} {'sent':>10} {'all files':>10} {'dump':>10}",
    ]
    for run in r["runs"]:
        lines.append(
            f"  {run['cell']:24} {run['files_shipped']:>5}/{run['files']:<6} {run['shipped_bytes'] / 1024:8.1f}K "
            f"{run['full_shipment_bytes'] / 1024:8.1f}K {run['dump_bytes'] / 1024:8.1f}K"
        )
    lines.append(
        f"  stored: one run alone {r['store_bytes_of_one_run_alone'] / 1024:.1f}K; the driver's store after the ray batch "
        f"{r['driver_store_bytes_after_ray_batch'] / 1024:.1f}K"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_ray", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=REPO / "configs" / "matrix-flags.yaml")
    parser.add_argument("--repeats", type=int, default=2)
    add_output_options(parser, "batch_ray")
    parser.add_argument("--snapshots-only", action="store_true", help="measure the project snapshots alone (no cluster)")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="xlarun-bench-ray-"))
    try:
        report = {} if args.snapshots_only else measure(args.spec.resolve(), args.repeats, workdir)
        report["project_snapshots"] = measure_snapshots(args.spec.resolve(), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = write_results(output_path(args, "batch_ray"), report)
    if not args.snapshots_only:
        print(format_report(report))
    print(format_snapshots(report["project_snapshots"]))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
