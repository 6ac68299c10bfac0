"""Reading commands on big stores: ``runs``, ``modules``, ``show``, ``cat``, ``find``, ``files``, ``explain``,
``profile``, ``modules --by time`` and ``memory`` at 1,000, 10,000 and 100,000 runs, side by side with
``python -c pass`` and a bare SQLite query of the same rows.

    python -m bench.scale [--runs 1000,10000,100000] [--repeats 5] [--record]

A store of N runs is grown from one real run (an import of a dump of 8 modules, each dumped before and after
optimizations, with its buffer assignment, as XLA names them): its run folder is laid again under N new run ids (hard links) and its index rows
are copied under each id in one transaction, which is what N imports of the same dump would leave, without paying
an import per run. One run carries a term no other has, so ``find`` answers one module. Commands run as a user runs
them (a new process each, the bytecode cache warm), their output thrown away; medians over repeats. Targets:
at most 0.15 s at 10,000 runs and 0.5 s at 100,000.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .results_files import run_at_store_sizes
from .timing import TYPER_START, cli_env

NEEDLE = "scale_needle_op"
MODULE = """HloModule jit_{name}, entry_computation_layout={{(f32[64,64]{{1,0}})->f32[64,64]{{1,0}}}}

ENTRY main.6 {{
  Arg_0.1 = f32[64,64]{{1,0}} parameter(0)
  dot.2 = f32[64,64]{{1,0}} dot(Arg_0.1, Arg_0.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, metadata={{op_name="jit({name})/dot_general" source_file="model.py" source_line={line}}}
  tanh.3 = f32[64,64]{{1,0}} tanh(dot.2), metadata={{op_name="jit({name})/tanh" source_file="model.py" source_line={line}}}
  ROOT add.4 = f32[64,64]{{1,0}} add(tanh.3, Arg_0.1)
}}
"""
#: XLA's buffer assignment of the optimized module, as it dumps one beside it (``modules``' peak column reads it).
BUFFER_ASSIGNMENT = """BufferAssignment:
allocation 0: size 16384, parameter 0, shape |f32[64,64]| at ShapeIndex {}:
 value: <0 Arg_0.1 @0> (size=16384,offset=0): f32[64,64]{1,0}
allocation 1: size 16384, output shape is |f32[64,64]|, maybe-live-out:
 value: <3 add.4 @0> (size=16384,offset=0): f32[64,64]{1,0}
allocation 2: size 32768, preallocated-temp:
 value: <1 dot.2 @0> (size=16384,offset=0): f32[64,64]{1,0}
 value: <2 tanh.3 @0> (size=16384,offset=16384): f32[64,64]{1,0}
"""
CLONED_TABLES = ("files", "modules", "passes", "module_terms", "module_memory", "module_times", "op_times")


def template_store(root: Path) -> tuple[Path, str]:
    """A store holding one real run (an import), and that run's id."""
    import xlarun

    dump = root / "dump"
    dump.mkdir(parents=True)
    for i in range(8):
        for stage in ("before_optimizations", "cpu_after_optimizations"):
            (dump / f"module_{i:04d}.jit_step{i}.{stage}.txt").write_text(MODULE.format(name=f"step{i}", line=10 + i))
        (dump / f"module_{i:04d}.jit_step{i}.cpu_after_optimizations-buffer-assignment.txt").write_text(BUFFER_ASSIGNMENT)
    store = xlarun.open_store(root / "store")
    run = store.import_dump(dump, name="scale")
    store.close()
    add_profile(root / "store" / "index.sqlite", run.id)
    return root / "store", run.id


def add_profile(db: Path, run_id: str) -> None:
    """Index rows of a profile for the template run, as a profiled capture leaves them: each module executed 10
    times, its three ops timed (so ``profile`` and ``modules --by time`` read what they read on a real run)."""
    from xlarun.store.profile_index import ensure_profile_tables

    conn = sqlite3.connect(db, isolation_level=None)
    ensure_profile_tables(conn)
    ops = {"dot.2": 40_000.0, "tanh.3": 9_000.0, "add.4": 3_000.0}  # ns per execution
    conn.execute("BEGIN")
    for i in range(8):
        busy = sum(ops.values()) * 10 * (i + 1)
        conn.execute(
            "INSERT INTO module_times VALUES (?, ?, ?, 0, 10, ?, ?, 30, ?)",
            (run_id, i, f"jit_step{i}", busy, busy * 1.2, busy / 5),
        )
        for op, ns in ops.items():
            total = ns * 10 * (i + 1)
            conn.execute(
                "INSERT INTO op_times VALUES (?, ?, ?, 0, ?, 10, ?, ?, 1, ?)",
                (run_id, i, f"jit_step{i}", op, total, total, total / 5),
            )
    conn.execute("COMMIT")
    conn.close()


def grow(store_root: Path, template: str, runs: int) -> list[str]:
    """Lay the template run again under new ids until the store holds ``runs`` runs; returns every id, oldest first."""
    conn = sqlite3.connect(store_root / "index.sqlite", isolation_level=None)
    have = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    new = [f"{(start + timedelta(seconds=i)).strftime('%Y%m%d-%H%M%S')}-{i % 65536:04x}" for i in range(len(have), runs)]
    source = store_root / "runs" / template
    files = {p.name: p for p in source.iterdir()}
    for run_id in new:
        folder = store_root / "runs" / run_id
        folder.mkdir()
        for name, linked_from in files.items():
            try:
                os.link(linked_from, folder / name)
            except OSError as exc:  # ext4 allows 65,000 links to one file: copy it once, link to the copy from then on
                if exc.errno != errno.EMLINK:
                    raise
                shutil.copyfile(linked_from, folder / name)
                files[name] = folder / name
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in ("runs", *CLONED_TABLES)}
    conn.execute("BEGIN")
    for table in ("runs", *CLONED_TABLES):
        cols = columns[table]
        picked = ", ".join("?" if c == "run_id" else c for c in cols)
        rows = f"SELECT {picked} FROM {table} WHERE run_id = ?"
        conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) {rows}", [(run_id, template) for run_id in new])
    if new and not conn.execute("SELECT 1 FROM term_values WHERE value = ?", (NEEDLE,)).fetchone():
        conn.execute("INSERT INTO term_values (kind, value) VALUES ('op_name', ?)", (NEEDLE,))
        term = conn.execute("SELECT term_id FROM term_values WHERE value = ?", (NEEDLE,)).fetchone()[0]
        conn.execute("INSERT INTO module_terms VALUES (?, ?, 0)", (term, new[len(new) // 2]))
    conn.execute("COMMIT")
    conn.close()
    return have + new


def time_argv(argv: list[str], repeats: int, env: dict[str, str]) -> float:
    """Median seconds from start to exit, output thrown away (one warm-up run first)."""
    times = []
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if attempt:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def time_query(db: Path, sql: str, args: tuple, repeats: int) -> float:
    """The floor: a new Python process that opens the index and fetches the same rows (no xlarun imported)."""
    code = f"import sqlite3,sys; c=sqlite3.connect({str(db)!r}); rows=c.execute({sql!r}, {args!r}).fetchall()"
    return time_argv([sys.executable, "-c", code], repeats, dict(os.environ))


def measure(store_root: Path, run_ids: list[str], repeats: int, workdir: Path) -> dict:
    xlarun = str(Path(sys.executable).with_name("xlarun"))
    env = {**os.environ, "XLARUN_STORE": str(store_root), "PYTHONPYCACHEPREFIX": str(workdir / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed software runs: with its bytecode cache
    middle = run_ids[len(run_ids) // 2]
    ref = f"{middle}/module_0003"
    db = store_root / "index.sqlite"
    commands = {
        "runs": [xlarun, "runs"],
        "modules": [xlarun, "modules"],
        "show": [xlarun, "show", ref],
        "cat": [xlarun, "cat", ref],
        "find": [xlarun, "find", NEEDLE],
        "files": [xlarun, "files", middle],  # a run REF is files' argument (--run was a usage error, timed as one)
        "explain": [xlarun, "explain", "module_0003.jit_step3.cpu_after_optimizations.txt"],
        "profile": [xlarun, "profile", ref],
        "memory": [xlarun, "memory", ref],
        "modules_by_time": [xlarun, "modules", "--by", "time"],
    }
    floors = {
        "runs": ("SELECT * FROM runs ORDER BY started", ()),
        "modules": ("SELECT * FROM modules WHERE run_id = (SELECT max(run_id) FROM runs)", ()),
        "show": ("SELECT * FROM files WHERE run_id = ? AND module_id = 3", (middle,)),
        "find": ("SELECT run_id, module_id FROM terms WHERE value = ?", (NEEDLE,)),
        "files": ("SELECT * FROM files WHERE run_id = ?", (middle,)),
    }
    result: dict = {
        "runs_in_store": len(run_ids),
        "load_1m_before": round(os.getloadavg()[0], 2),  # other work on the machine slows every figure alike
        "python_c_pass_s": time_argv([sys.executable, "-c", "pass"], repeats, env),
        # typer's import: the floor of any typer CLI's start-up, which a reading command's target includes
        "typer_import_s": time_argv([sys.executable, "-c", TYPER_START], repeats, env),
    }
    for label, argv in commands.items():
        result[label] = {"median_s": round(time_argv(argv, repeats, env), 4)}
        if label in floors:
            result[label]["bare_sqlite_s"] = round(time_query(db, *floors[label], repeats), 4)
    # a Tab in bash: the script bash's completion function runs, as it runs it
    tabs = {
        "complete_module": "xlarun show jit_st",
        "complete_run": f"xlarun modules {middle[:9]}",
        "complete_stage": "xlarun cat jit_step3 --stage cpu",
    }
    for label, line in tabs.items():
        words = line.split()
        asked = {**env, "_XLARUN_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
        result[label] = {"median_s": round(time_argv([xlarun], repeats, asked), 4), "line": line}
    result["load_1m_after"] = round(os.getloadavg()[0], 2)
    return result


READING_COMMANDS = ("runs", "modules", "show", "cat", "find", "files", "explain", "profile", "modules_by_time", "memory")
#: A Tab where a module REF, a run REF and a stage are typed (xlarun.navigate.complete).
COMPLETIONS = ("complete_module", "complete_run", "complete_stage")


def measure_scale(sizes: list[int], repeats: int, workdir: Path) -> dict:
    """Grow one store through ``sizes`` (ascending) and time the reading commands at each; the stores stay in
    ``workdir`` (the caller removes it)."""
    results: dict = {"sizes": {}, "repeats": repeats, "template": "an import of 8 modules, each before and after optimizations"}
    store_root, template = template_store(workdir)
    run_ids = [template]
    for size in sorted(sizes):
        started = time.perf_counter()
        run_ids = grow(store_root, template, size)
        grown = round(time.perf_counter() - started, 1)
        print(f"[scale] {size} runs (grown in {grown} s); timing...", file=sys.stderr, flush=True)
        results["sizes"][str(size)] = row = measure(store_root, run_ids, repeats, workdir) | {"grow_s": grown}
        from .reading_cpu import measure_paired  # it grows its stores with this module's grow()

        # issue 36's measure: CPU, each command over `import typer` run just before it (bench/reading_cpu.py)
        row["paired_cpu"] = measure_paired(store_root, run_ids, repeats, cli_env(workdir))
        print(
            f"{size:>7} runs: "
            + ", ".join(f"{k} {row[k]['median_s']:.3f}s" for k in READING_COMMANDS)
            + f"; python -c pass {row['python_c_pass_s']:.3f}s, import typer {row['typer_import_s']:.3f}s",
            file=sys.stderr,
            flush=True,
        )
    return results


def format_markdown(results: dict) -> str:
    """Each reading command's median at each store size, beside the target for that size."""
    sizes = sorted(results.get("sizes", {}), key=int)
    targets = {10_000: 0.15, 100_000: 0.5}
    lines = [
        "| command | " + " | ".join(f"{int(size):,} runs" for size in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for label in (*READING_COMMANDS, "python_c_pass_s", "typer_import_s"):
        cells = []
        for size in sizes:
            at = results["sizes"][size].get(label)
            value = at if isinstance(at, (int, float)) else (at or {}).get("median_s")
            target = targets.get(int(size))
            verdict = (
                "" if value is None or target is None or label.endswith("_s") else (" (met)" if value <= target else " (unmet)")
            )
            cells.append("-" if value is None else f"{value:.3f} s{verdict}")
        name = {"python_c_pass_s": "`python -c pass`", "typer_import_s": "`import typer`"}.get(label)
        lines.append(
            f"| {name or 'xlarun ' + label.replace('modules_by_time', 'modules --by time')} | " + " | ".join(cells) + " |"
        )
    load = ", ".join(f"{results['sizes'][size]['load_1m_before']}" for size in sizes)
    lines += ["", f"Median of {results.get('repeats', '?')} runs each, a new process each; 1-minute load at each size: {load}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_at_store_sizes(argv, "scale", __doc__.splitlines()[0], "1000,10000,100000", measure_scale)


if __name__ == "__main__":
    raise SystemExit(main())
