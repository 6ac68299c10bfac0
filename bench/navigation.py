"""Navigation at scale: ``xlarun modules`` / ``show`` / ``cat`` latency on the synthetic store, and
CLI start-up (``xlarun --help``) against ``python -c pass``."""

from __future__ import annotations

import sys
from pathlib import Path

from .synthetic import SyntheticStore
from .timing import cli_env, time_command, xlarun_argv


def measure_navigation(synthetic: SyntheticStore, repeats: int, workdir: Path, everything: bool = True) -> dict:
    """Median start-to-exit times; ``everything`` adds runs, modules of the latest run, and cat."""
    env = cli_env(workdir)
    store = str(synthetic.store.root)
    run_id = synthetic.run_ids[len(synthetic.run_ids) // 2]
    main = synthetic.store.index.modules(run_id)[0]
    xlarun = xlarun_argv()
    commands = {
        "python_c_pass": [sys.executable, "-c", "pass"],
        "help": [*xlarun, "--help"],
        "runs": [*xlarun, "runs", "--store", store],
        "modules": [*xlarun, "modules", run_id, "--store", store],
        "modules_latest": [*xlarun, "modules", "--store", store],
        "show": [*xlarun, "show", main.ref, "--store", store],
        "cat": [*xlarun, "cat", main.ref, "--store", store],
    }
    if not everything:
        commands = {k: v for k, v in commands.items() if k in ("python_c_pass", "help", "modules", "show")}
    results: dict = {"runs_in_store": len(synthetic.run_ids), "module_shown": main.ref, "bytecode_cache": 1}
    for label, argv in commands.items():
        results[label] = time_command(argv, repeats, env=env, warmup=1).to_dict()
    results["help_without_bytecode_cache"] = time_command(commands["help"], repeats).to_dict()
    # what cli.py's typer patch (plain strings coerced without pydantic) saves, against its cost: a typer pin
    unpatched = {**env, "XLARUN_TYPER_PATCH": "0"}
    results["show_without_typer_patch"] = time_command(commands["show"], repeats, env=unpatched, warmup=1).to_dict()
    results["help_minus_python_s"] = round(results["help"]["median_s"] - results["python_c_pass"]["median_s"], 4)
    return results
