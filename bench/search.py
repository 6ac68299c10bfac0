"""Search: ``xlarun find`` over the whole store against ``rg -l`` over the raw dump folders of the
same runs, both as subprocesses of the real tools, medians of repeats."""

from __future__ import annotations

from pathlib import Path

from .synthetic import SyntheticStore, marker
from .timing import cli_env, ratio, time_command, tool, xlarun_argv

#: An opcode every training step has (layer norm), and so in every run and most of its files.
COMMON_OPCODE = "rsqrt"


def measure_search(synthetic: SyntheticStore, repeats: int, workdir: Path) -> dict:
    env = cli_env(workdir)
    store = str(synthetic.store.root)
    rare = marker(len(synthetic.run_ids) // 2) + "train_step"  # in one run only: rg must read everything
    queries = {
        "opcode": ([*xlarun_argv(), "find", "--opcode", COMMON_OPCODE, "--store", store], COMMON_OPCODE),
        "rare_op_name": ([*xlarun_argv(), "find", "--op-name", rare, "--store", store], rare),
    }
    results: dict = {
        "runs": len(synthetic.run_ids),
        "raw_folders": str(synthetic.raw_runs),
        "rg_available": int(bool(tool("rg"))),
    }
    for label, (find_argv, needle) in queries.items():
        t_find = time_command(find_argv, repeats, env=env, ok_codes=(0, 1), warmup=1)
        # the same query printing JSON: how much of the time is the terminal table (rich) rather than the search
        t_json = time_command([*find_argv, "--json"], repeats, env=env, ok_codes=(0, 1), warmup=1)
        entry = {"query": needle, "xlarun_find": t_find.to_dict(), "xlarun_find_json": t_json.to_dict()}
        if tool("rg"):
            # the raw folders are hard links to one dump, already in the page cache; rg over 100+ copies of a
            # large dump takes a minute, so it gets at most 3 repeats
            t_rg = time_command(["rg", "-l", "-F", needle, str(synthetic.raw_runs)], min(repeats, 3), ok_codes=(0, 1))
            entry["rg"] = t_rg.to_dict()
            entry["speedup_vs_rg"] = round(ratio(t_rg.median, t_find.median), 3)
            entry["speedup_vs_rg_json"] = round(ratio(t_rg.median, t_json.median), 3)
        results[label] = entry
    return results
