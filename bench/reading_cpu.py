"""Reading commands against ``import typer``, in CPU, paired: each round runs ``python -c "import typer"`` and then
``runs``, ``modules``, ``show``, ``find`` and ``cat`` through the ``xlarun`` console script, as a user runs them, and
each command's ratio is its CPU (user + system of the child) over the floor's CPU in the same round; the figure is
the median of those ratios. Issue 36's target: at most 1.2x at 1,000, 10,000 and 100,000 runs.

    python -m bench.reading_cpu [--runs 1000,10000,100000] [--rounds 9] [--workdir DIR]

The store is grown as ``bench.scale`` grows it (one real import laid again under N run ids); with ``--workdir``
the store stays there and a later call grows it further rather than building it again.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from .results_files import run_at_store_sizes
from .scale import NEEDLE, grow, template_store
from .timing import TYPER_START, cli_env

TARGET = 1.2
COMMANDS = ("runs", "modules", "show", "find", "cat")
#: A second floor, beside ``import typer``: the least a typer CLI does to run a command, a one-command app with
#: ``show``'s parameters (a REF, five options), invoked. typer coerces each value through pydantic there, which
#: xlarun's commands avoid (``xlarun.cli.plain_value``).
TYPER_APP = """from typing import Annotated
import typer
app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
@app.callback()
def root() -> None:
    \"\"\"The group.\"\"\"
@app.command()
def show(
    ref: Annotated[str, typer.Argument(help="Module REF.")],
    store: Annotated[str | None, typer.Option("--store", help="Store.")] = None,
    run: Annotated[str | None, typer.Option("--run", "-r", help="Run.")] = None,
    remote: Annotated[str | None, typer.Option("--remote", help="Remote.")] = None,
    files: Annotated[bool, typer.Option("--files", help="Every file.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON.")] = False,
) -> None:
    \"\"\"Show one module.\"\"\"
app(["show", "jit_f", "--store", "s"], standalone_mode=False)
"""


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one command run to its end; raises on a non-zero exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def command_lines(xlarun: str, ref: str) -> dict[str, list[str]]:
    """Each reading command as a user types it, on a module in the middle of the store."""
    return {
        "runs": [xlarun, "runs"],
        "modules": [xlarun, "modules"],
        "show": [xlarun, "show", ref],
        "find": [xlarun, "find", NEEDLE],
        "cat": [xlarun, "cat", ref],
    }


def measure_paired(store_root: Path, run_ids: list[str], rounds: int, env: dict[str, str]) -> dict:
    """Per command: the median CPU, and the median of its per-round ratio to ``import typer``."""
    xlarun = str(Path(sys.executable).with_name("xlarun"))
    env = {**env, "XLARUN_STORE": str(store_root)}
    lines = command_lines(xlarun, f"{run_ids[len(run_ids) // 2]}/module_0003")
    floor_argv = [sys.executable, "-c", TYPER_START]
    lines = {"typer_app": [sys.executable, "-c", TYPER_APP], **lines}
    for argv in (floor_argv, *lines.values()):  # warm-up: the bytecode cache filled, the store's pages read once
        child_cpu(argv, env)
    floors: list[float] = []
    cpu: dict[str, list[float]] = {name: [] for name in lines}
    ratios: dict[str, list[float]] = {name: [] for name in lines}
    for _ in range(rounds):
        floor = child_cpu(floor_argv, env)
        floors.append(floor)
        for name, argv in lines.items():
            spent = child_cpu(argv, env)
            cpu[name].append(spent)
            ratios[name].append(spent / floor)
    result: dict = {"typer_import_cpu_s": round(statistics.median(floors), 4)}
    for name in lines:
        result[name] = {"cpu_s": round(statistics.median(cpu[name]), 4), "ratio": round(statistics.median(ratios[name]), 3)}
        if name != "typer_app":
            result[name]["met"] = statistics.median(ratios[name]) <= TARGET
    return result


def measure_reading_cpu(sizes: list[int], rounds: int, workdir: Path) -> dict:
    """Grow one store through ``sizes`` (ascending) and pair the reading commands with ``import typer`` at each."""
    env = cli_env(workdir)
    store_root = workdir / "store"
    if (store_root / "index.sqlite").exists():  # a store from an earlier call: grown further, not built again
        template = sorted(p.name for p in (store_root / "runs").iterdir())[0]
    else:
        store_root, template = template_store(workdir)
    results: dict = {"rounds": rounds, "target": TARGET, "sizes": {}}
    for size in sorted(sizes):
        run_ids = grow(store_root, template, size)
        os.sync()  # the grown store's pages written out first: their writeback is not counted to the commands
        load = round(os.getloadavg()[0], 2)
        row = measure_paired(store_root, run_ids, rounds, env)
        results["sizes"][str(size)] = row | {"load_1m_before": load, "load_1m_after": round(os.getloadavg()[0], 2)}
        print(
            f"{size:>7} runs (load {load}): import typer {row['typer_import_cpu_s']:.3f}s CPU; "
            + ", ".join(f"{name} {row[name]['cpu_s']:.3f}s {row[name]['ratio']:.2f}x" for name in ("typer_app", *COMMANDS)),
            file=sys.stderr,
            flush=True,
        )
    return results


def format_markdown(results: dict) -> str:
    """Each command's CPU and its ratio to ``import typer`` at each store size, the one-command typer app beside."""
    names = ("typer_app", *COMMANDS)
    lines = [
        f'CPU (user + system) of each command run by the `xlarun` console script, over `python -c "import typer"` in '
        f"the same round, median of {results.get('rounds')} rounds. Target: at most {results.get('target')}x. "
        "`typer app`: a one-command typer app with `show`'s parameters, invoked (a second floor: what any typer "
        "command costs).",
        "",
        "| runs | load | import typer, ms | " + " | ".join(n.replace("_", " ") for n in names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for size, row in sorted(results.get("sizes", {}).items(), key=lambda kv: int(kv[0])):
        cells = []
        for name in names:
            r = row.get(name) or {}
            mark = "" if name == "typer_app" or r.get("met") else " (not met)"
            cells.append(f"{r.get('cpu_s', 0) * 1000:.0f} ms, {r.get('ratio')}x{mark}")
        lines.append(
            f"| {int(size):,} | {row.get('load_1m_before')} | {row.get('typer_import_cpu_s', 0) * 1000:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_at_store_sizes(
        argv, "reading_cpu", __doc__.splitlines()[0], "1000,10000,100000", measure_reading_cpu, repeats=("--rounds", 9)
    )


if __name__ == "__main__":
    raise SystemExit(main())
