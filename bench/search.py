"""Search: ``xlarun find`` over the whole store against ``rg -l -F`` over the raw dump folders of the
same runs, both as subprocesses of the real tools, in interleaved rounds, medians of repeats, with the floors
under ``find`` timed in the same rounds: ``python -c pass``, ``python -c 'import typer'`` (every xlarun command
starts with typer), and the same SQL as ``find`` run by a bare Python (``sqlite3`` only, no CLI).

``python -m bench.search`` measures it alone on a store it builds once and keeps (``--size small --runs 200``:
2.1 GB of raw dumps); ``--copies`` lays the raw folders out as distinct files (not hard links to one dump), which
``--cold`` needs: before each cold repeat the pages of what each side reads (the raw folders for rg, the index for
find) are dropped from the page cache (``posix_fadvise(DONTNEED)``, only those files: nothing else on the machine
is touched), so the disk is read as after a reboot or on a store nobody searched lately.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .results_files import output_path, write_results
from .synthetic import SyntheticStore, marker
from .timing import TYPER_START, Timing, cli_env, ratio, tool, xlarun_argv

#: An opcode every training step has (layer norm), and so in every run and most of its files.
COMMON_OPCODE = "rsqrt"
#: A word in an opcode and in many instruction names of every run; searched in every kind, as ``find WORD`` does.
COMMON_WORD = "add"
ANY_KIND = ("opcode", "name", "op_name", "source")

#: The bare floor: the modules holding the term (a line per module and kind, no values), read from this index by
#: a Python with sqlite3 only, as find's query reads them (store/term_search.py), without typer and without xlarun.
BARE_FIND = """
import sqlite3, sys
db, kinds, text, exact = sys.argv[1:5]
matches = ["(kind = ? AND " + ("value = ?)" if exact == "1" or k == "opcode" else "instr(value, ?) > 0)") for k in kinds.split(",")]
conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
rows = conn.execute(
    f"WITH matched AS (SELECT term_id, kind FROM term_values WHERE {' OR '.join(matches)}) "
    "SELECT DISTINCT mt.run_id, mt.module_id, matched.kind FROM matched CROSS JOIN module_terms mt ON mt.term_id = matched.term_id",
    [p for k in kinds.split(",") for p in (k, text)],
).fetchall()
sys.stdout.write("".join(f"{r[0]}/module_{r[1]:04d} {r[2]}\\n" for r in rows))
"""


def drop_from_page_cache(path: Path) -> int:
    """Drop the cached pages of the files at ``path`` (a file or a folder): the next read goes to the disk."""
    paths = [path] if path.is_file() else [Path(d) / f for d, _dirs, files in os.walk(path) for f in files]
    for file in paths:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # a dirty page is not dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(paths)


def _time_once(argv: list[str], env: dict[str, str] | None, before: Callable[[], object] | None) -> float:
    if before is not None:
        before()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def measure_search(
    synthetic: SyntheticStore, repeats: int, workdir: Path, raw_runs: Path | None = None, cold: bool = False
) -> dict:
    """Each query's find (table and ``--json``), rg, and the floors, round-robin (the order turned each round) so
    that load on a shared machine hits all alike. ``cold``: each side's data dropped from the page cache first."""
    env = cli_env(workdir)
    store = synthetic.store.root
    raw = raw_runs or synthetic.raw_runs
    rare = marker(len(synthetic.run_ids) // 2) + "train_step"  # in one run only: rg must read everything
    queries = {
        "opcode": (["--opcode"], "opcode", COMMON_OPCODE, "1"),
        "rare_op_name": (["--op-name"], "op_name", rare, "0"),
        # what a user types first: no kind, a word in many instruction names too (thousands of pairs, a line per module)
        "any_kind": ([], ",".join(ANY_KIND), COMMON_WORD, "0"),
    }
    have_rg = bool(tool("rg"))
    drop_index = (lambda: drop_from_page_cache(store / "index.sqlite")) if cold else None
    drop_raw = (lambda: drop_from_page_cache(raw)) if cold else None
    commands: dict[str, tuple[list[str], dict[str, str] | None, Callable[[], object] | None]] = {
        "python_c_pass": ([sys.executable, "-c", "pass"], env, None),
        "typer_import": ([sys.executable, "-c", TYPER_START], env, None),
    }
    for label, (option, kind, needle, exact) in queries.items():
        find = [*xlarun_argv(), "find", *option, needle, "--store", str(store)]
        commands[f"{label}/xlarun_find"] = (find, env, drop_index)
        # the same query printing JSON: how much of the time is the terminal table rather than the search
        commands[f"{label}/xlarun_find_json"] = ([*find, "--json"], env, drop_index)
        bare = [sys.executable, "-c", BARE_FIND, str(store / "index.sqlite"), kind, needle, exact]
        commands[f"{label}/bare_sqlite"] = (bare, env, drop_index)
        if have_rg:
            commands[f"{label}/rg"] = (["rg", "-l", "-F", needle, str(raw)], None, drop_raw)
    for argv, run_env, _ in commands.values():  # untimed: fills the bytecode cache (and, warm, the page cache)
        _time_once(argv, run_env, None)
    samples: dict[str, list[float]] = {label: [] for label in commands}
    labels = list(commands)
    load_before = os.getloadavg()[0]
    for i in range(repeats):
        for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
            if label.endswith("/rg") and i >= 3 and not cold:
                continue  # rg over 100+ copies of a large dump takes a minute: at most 3 warm repeats
            samples[label].append(_time_once(*commands[label]))
    results: dict = {
        "runs": len(synthetic.run_ids),
        "raw_folders": str(raw),
        "page_cache": "cold" if cold else "warm",
        "rg_available": int(have_rg),
        "load_1m_before": round(load_before, 2),
        "load_1m_after": round(os.getloadavg()[0], 2),
        "python_c_pass": Timing(samples["python_c_pass"]).to_dict(),
        "typer_import": Timing(samples["typer_import"]).to_dict(),
    }
    typer_s = Timing(samples["typer_import"]).median
    for label, (_option, _kind, needle, _exact) in queries.items():
        entry: dict = {"query": needle}
        for part in ("xlarun_find", "xlarun_find_json", "bare_sqlite", "rg"):
            if samples.get(f"{label}/{part}"):
                entry[part] = Timing(samples[f"{label}/{part}"]).to_dict()
        if have_rg:
            rg_s = entry["rg"]["median_s"]
            entry["speedup_vs_rg"] = round(ratio(rg_s, entry["xlarun_find"]["median_s"]), 3)
            entry["speedup_vs_rg_json"] = round(ratio(rg_s, entry["xlarun_find_json"]["median_s"]), 3)
            # the most any typer CLI could reach here: rg over the bare start of typer; 10x needs rg / 10 above it
            entry["speedup_at_typer_floor"] = round(ratio(rg_s, typer_s), 3)
            entry["speedup_at_bare_sqlite_floor"] = round(ratio(rg_s, entry["bare_sqlite"]["median_s"]), 3)
            entry["ten_x_needs_s"] = round(rg_s / 10, 4)
        results[label] = entry
    return results


def build_or_reuse(size_name: str, n_runs: int, workdir: Path) -> SyntheticStore:
    """The workload run once directly, archived, and grown to ``n_runs`` runs in ``workdir``; a store left
    there by an earlier call (same size and runs) is reused, so repeated measurements skip the build."""
    from xlarun.store.facade import LocalStore

    from .archive import archive_and_index
    from .capture_overhead import _direct_run
    from .synthetic import build_synthetic_store
    from .workloads import SIZES, write_spec

    done = workdir / "synthetic.json"
    if done.is_file():
        saved = json.loads(done.read_text())
        if saved["size"] == size_name and saved["runs"] == n_runs:
            store = LocalStore.open(Path(saved["store"]))
            return SyntheticStore(store, saved["run_ids"], Path(saved["raw_runs"]), saved["results"])
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    size = SIZES[size_name]
    spec = write_spec(size, workdir / "spec")
    _direct_run(spec, size, workdir / "direct")
    archived = archive_and_index(workdir / "direct" / "dump", workdir / "store")
    synthetic = build_synthetic_store(archived.store, archived.run_id, workdir / "direct" / "dump", workdir, n_runs)
    record = {"size": size_name, "runs": n_runs, "store": str(workdir / "store"), "raw_runs": str(synthetic.raw_runs)}
    done.write_text(json.dumps({**record, "run_ids": synthetic.run_ids, "results": synthetic.results}))
    return synthetic


def distinct_copies(raw_runs: Path) -> Path:
    """The raw folders copied as distinct files (``cp -r`` keeps no hard link), kept beside them."""
    copies = raw_runs.with_name("raw-copies")
    if not copies.is_dir():
        subprocess.run(["cp", "-r", str(raw_runs), str(copies) + ".part"], check=True)
        os.replace(str(copies) + ".part", copies)
    return copies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.search", description=__doc__)
    parser.add_argument("--size", default="small", help="workload size (bench/workloads: small, medium, large)")
    parser.add_argument("--runs", type=int, default=200, help="runs in the synthetic store (default 200)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/search-store"), help="kept between calls")
    parser.add_argument("--copies", action="store_true", help="rg searches distinct copies of the raw folders")
    parser.add_argument("--cold", action="store_true", help="also measure with each side's data out of the page cache")
    parser.add_argument("--record", action="store_true", help="write bench/results/search.json")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default bench/out/search.json)")
    args = parser.parse_args(argv)
    synthetic = build_or_reuse(args.size, args.runs, args.workdir)
    synthetic.store.close()
    raw = distinct_copies(synthetic.raw_runs) if args.copies or args.cold else synthetic.raw_runs
    results = {
        "size": args.size,
        "synthetic_store": synthetic.results,
        "raw_bytes": sum(p.stat().st_size for p in raw.rglob("*") if p.is_file()),
        "raw_layout": "distinct copies" if raw != synthetic.raw_runs else "hard links to one dump",
        "warm": measure_search(synthetic, args.repeats, args.workdir, raw),
    }
    if args.cold:
        results["cold"] = measure_search(synthetic, args.repeats, args.workdir, raw, cold=True)
    written = write_results(output_path(args, "search"), results)
    print(json.dumps(results, indent=1))
    print(f"written to {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def format_markdown(results: dict) -> str:
    """The recorded search against rg, warm and cold, with the floors measured in the same rounds."""
    lines = [
        f"{results.get('raw_bytes', 0) / 1e9:.2f} GB of raw dumps ({results.get('raw_layout', '')}), "
        f"{results.get('synthetic_store', {}).get('runs')} runs; `xlarun find` as a user runs it against `rg -l -F` "
        "over the raw folders. Target: find at least 10x faster. *Typer floor*: the speedup a command that did "
        "nothing but `import typer` would get; *SQLite floor*: a bare Python reading the same rows.",
        "",
        "| page cache | query | rg, s | find, s | speedup | at the typer floor | at the SQLite floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for cache in ("warm", "cold"):
        side = results.get(cache) or {}
        for key in ("opcode", "rare_op_name", "any_kind"):
            q = side.get(key)
            if not q or "rg" not in q:
                continue
            lines.append(
                f"| {cache} | `{q['query']}` ({key.replace('_', ' ')}) | {q['rg']['median_s']:.3f} | "
                f"{q['xlarun_find']['median_s']:.3f} | {q['speedup_vs_rg']:.1f}x | "
                f"{q.get('speedup_at_typer_floor', 0):.1f}x | {q.get('speedup_at_bare_sqlite_floor', 0):.1f}x |"
            )
    return "\n".join(lines)
