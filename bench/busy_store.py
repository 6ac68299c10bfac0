"""A capture into a big store, and the first reading command after it: the writer notes the index's agreement with
``runs/`` itself (``src/xlarun/store/agreement.py``), so neither lists the store.

    python -m bench.busy_store [--runs 100,100000] [--repeats 5] [--record]

For each store size (grown as :mod:`bench.scale` grows it: one real run laid again under N ids, index rows copied),
settled (a reader noted the agreement), each round times, as a user runs them (a new process each):
``xlarun capture`` of the trivial job (:data:`bench.capture_overhead.TRIVIAL_JOB`: one tiny module, no framework),
then ``xlarun show`` of a module (the first reader after the capture), then the same ``show`` again (a settled
reader). Wall and CPU time (the children's user + system time) are medians over the rounds. Targets: a capture at
100,000 runs within 1.1x of one at 100; the first reader after a capture within 1.2x of a settled one.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .capture_overhead import trivial_spec
from .results_files import run_at_store_sizes
from .scale import grow, template_store


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command run to its end; raises on a non-zero exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def settle(store_root: Path, env: dict[str, str], ref: str, xlarun: str, cwd: Path) -> None:
    """Age ``runs/`` past the settling time and let one reader note the agreement."""
    then = time.time() - 60
    os.utime(store_root / "runs", (then, then))
    timed([xlarun, "show", ref], env, cwd)


def medians(samples: list[tuple[float, float]]) -> dict:
    return {
        "wall_s": round(statistics.median(s[0] for s in samples), 4),
        "cpu_s": round(statistics.median(s[1] for s in samples), 4),
        "samples": len(samples),
    }


def measure(sizes: list[int], repeats: int, workdir: Path) -> dict:
    xlarun = str(Path(sys.executable).with_name("xlarun"))
    spec = trivial_spec(workdir / "trivial")
    store_root, template = template_store(workdir / "store")
    results: dict = {"repeats": repeats, "sizes": {}}
    for size in sorted(sizes):
        started = time.perf_counter()
        run_ids = grow(store_root, template, size)
        print(f"[busy_store] {size} runs (grown in {time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        env = {**os.environ, "XLARUN_STORE": str(store_root), "PYTHONPYCACHEPREFIX": str(workdir / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        ref = f"{run_ids[len(run_ids) // 2]}/module_0003"
        settle(store_root, env, ref, xlarun, spec.parent)
        captures, first, settled = [], [], []
        for _ in range(repeats + 1):  # the first round warms the caches and is not counted
            captures.append(timed([xlarun, "capture", str(spec)], env, spec.parent))
            first.append(timed([xlarun, "show", ref], env, spec.parent))
            settled.append(timed([xlarun, "show", ref], env, spec.parent))
        row = {"capture": medians(captures[1:]), "first_reader": medians(first[1:]), "settled_reader": medians(settled[1:])}
        row["first_over_settled_cpu"] = round(row["first_reader"]["cpu_s"] / row["settled_reader"]["cpu_s"], 2)
        results["sizes"][str(size)] = row
        print(
            f"{size:>7} runs: capture {row['capture']['wall_s']:.3f}s wall {row['capture']['cpu_s']:.3f}s CPU; "
            f"first reader {row['first_reader']['cpu_s']:.3f}s CPU, settled {row['settled_reader']['cpu_s']:.3f}s CPU",
            file=sys.stderr,
            flush=True,
        )
    small, big = str(min(sizes)), str(max(sizes))
    if small != big:
        results["capture_big_over_small_cpu"] = round(
            results["sizes"][big]["capture"]["cpu_s"] / results["sizes"][small]["capture"]["cpu_s"], 2
        )
        results["capture_big_over_small_wall"] = round(
            results["sizes"][big]["capture"]["wall_s"] / results["sizes"][small]["capture"]["wall_s"], 2
        )
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main(argv: list[str] | None = None) -> int:
    return run_at_store_sizes(argv, "busy_store", __doc__.splitlines()[0], "100,100000", measure)


if __name__ == "__main__":
    raise SystemExit(main())


def format_markdown(results: dict) -> str:
    """Capture and the first reader after it, at each store size, in CPU seconds."""
    lines = [
        "CPU seconds of a capture and of the first `show` after it (which once listed the whole store) beside a "
        "settled `show`, at each store size. Targets: capture at the largest size within 1.1x of the smallest; the "
        "first reader within 1.2x of a settled one.",
        "",
        "| runs | capture CPU, s | first reader CPU, s | settled reader CPU, s | first / settled |",
        "|---|---|---|---|---|",
    ]
    for size, r in results.get("sizes", {}).items():
        lines.append(
            f"| {int(size):,} | {r['capture']['cpu_s']} | {r['first_reader']['cpu_s']} | {r['settled_reader']['cpu_s']} | "
            f"{r['first_over_settled_cpu']}x |"
        )
    lines += ["", f"Capture, largest over smallest store: {results.get('capture_big_over_small_cpu')}x CPU."]
    return "\n".join(lines)
