"""The benchmark's table and its targets: each a ratio or a median measured in the same run.

The targets are the speed targets ("Fast at any size"): capture's fixed cost at most 0.20 s over running the job,
and at most 1.3x (CPU) a process that imports typer and validates a pydantic model;
archive + index of the large pass-by-pass dump within 4x the read-everything floor; the reading commands at
most 0.15 s median on a store of 10,000 runs and 0.5 s at 100,000; big graphs drawn in seconds (under
bench/render.py's TARGET_S), beside plain dot on the same graph. The older ones (tar czf, rg, --help) stay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: the speed targets
FIXED_COST_S = 0.20
FIXED_COST_FLOOR_X = 1.3  # the fixed cost's CPU over the CPU of typer + a pydantic model validated (issue 36)
READ_FLOOR_X = 4.0
#: the reading commands' median, by the store's size: at most 0.15 s up to 10,000 runs (a smaller store is
#: held to the target of the larger: reading gets no faster as a store grows), 0.5 s up to 100,000; none beyond
READING_S = ((10_000, 0.15), (100_000, 0.5))
#: a Tab that completes a run, module or stage from the index: at most 0.2 s at 10,000 runs.
COMPLETION_S = ((10_000, 0.2),)


@dataclass(frozen=True)
class Row:
    """One line of the table: what was compared, both medians, their ratio, and the target it is held to."""

    section: str
    what: str
    ours: str
    theirs: str
    ratio: float | None
    target: str = ""
    met: bool | None = None


def _get(results: dict, *keys):
    for key in keys:
        if not isinstance(results, dict) or key not in results:
            return None
        results = results[key]
    return results


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.1f} MB"


def _check(value: float | None, test: Callable[[float], bool]) -> bool | None:
    return None if value is None else bool(test(value))


def build_rows(results: dict) -> list[Row]:
    rows: list[Row] = []
    cap = results.get("capture", {})
    if cap:
        trivial = cap.get("trivial") or {}
        fixed = trivial.get("fixed_cost_s")
        if trivial:
            rows.append(
                Row(
                    "capture",
                    "fixed cost: a trivial job captured - run directly",
                    _secs(fixed),
                    _secs(_get(trivial, "direct", "median_s")),
                    None,
                    f"<= {FIXED_COST_S:g} s",
                    _check(fixed, lambda v: v <= FIXED_COST_S),
                )
            )
            rows.append(
                Row(
                    "capture",
                    "  the trivial job captured / run directly",
                    _secs(_get(trivial, "capture", "median_s")),
                    _secs(_get(trivial, "direct", "median_s")),
                    None,
                )
            )
            if trivial.get("floor_ratio_cpu") is not None:  # recorded since issue 36
                rows.append(
                    Row(
                        "capture",
                        "fixed cost CPU / typer + a pydantic model validated (CPU)",
                        _secs(trivial.get("fixed_cost_cpu_s")),
                        _secs(_get(trivial, "cpu", "typer_and_pydantic", "median_s")),
                        trivial["floor_ratio_cpu"],
                        f"<= {FIXED_COST_FLOOR_X:g}x",
                        _check(trivial["floor_ratio_cpu"], lambda v: v <= FIXED_COST_FLOOR_X),
                    )
                )
            if trivial.get("stack_floor_s") is not None:  # recorded since 2026-11-28
                rows.append(
                    Row(
                        "capture",
                        "  floor: typer + a pydantic model validated, over python -c pass",
                        _secs(trivial["stack_floor_s"]),
                        _secs(_get(trivial, "python_c_pass", "median_s")),
                        None,
                    )
                )
        rows.append(
            Row(
                "capture",
                "large workload: xlarun capture / direct run",
                _secs(_get(cap, "capture", "median_s")),
                _secs(_get(cap, "direct", "median_s")),
                cap.get("ratio"),
            )
        )
    arc = results.get("archive", {})
    if arc:
        ours = _get(arc, "xlarun", "median_s")
        rows.append(
            Row(
                "archive",
                "archive+index / tar czf",
                _secs(ours),
                _secs(_get(arc, "tar_czf", "median_s")),
                arc.get("ratio_vs_tar_czf"),
                "<= 1.0x",
                _check(arc.get("ratio_vs_tar_czf"), lambda v: v <= 1.0),
            )
        )
        if "tar_zstd_long" in arc:
            zs = _get(arc, "tar_zstd_long", "median_s")
            rows.append(
                Row("archive", "archive+index / tar zstd --long", _secs(ours), _secs(zs), round(ours / zs, 3) if zs else None)
            )
        rows.append(
            Row(
                "archive",
                "archive+index / cat (read floor)",
                _secs(ours),
                _secs(_get(arc, "read_floor", "median_s")),
                arc.get("ratio_vs_read_floor"),
                f"<= {READ_FLOOR_X:g}x",
                _check(arc.get("ratio_vs_read_floor"), lambda v: v <= READ_FLOOR_X),
            )
        )
        rows.append(
            Row(
                "archive",
                "  of which archive / index",
                _secs(_get(arc, "xlarun", "archive_median_s")),
                _secs(_get(arc, "xlarun", "index_median_s")),
                None,
            )
        )
        rows.append(
            Row(
                "archive",
                "stored bytes / tar czf bytes",
                _mb(_get(arc, "xlarun", "bytes")),
                _mb(_get(arc, "tar_czf", "bytes")),
                arc.get("bytes_vs_tar_czf"),
                "< 1.0x",
                _check(arc.get("bytes_vs_tar_czf"), lambda v: v < 1.0),
            )
        )
        if "tar_zstd_long" in arc:
            ob, zb = _get(arc, "xlarun", "bytes"), _get(arc, "tar_zstd_long", "bytes")
            rows.append(
                Row("archive", "stored bytes / tar zstd --long bytes", _mb(ob), _mb(zb), round(ob / zb, 3) if zb else None)
            )
        ra = arc.get("random_access", {})
        if ra:
            rows.append(
                Row(
                    "archive",
                    "read one file: store (cold) / raw folder",
                    _secs(ra.get("store_per_file_s")),
                    _secs(ra.get("raw_per_file_s")),
                    ra.get("ratio_store_vs_raw"),
                )
            )
            if ra.get("store_warm_per_file_s") and ra.get("raw_per_file_s"):
                rows.append(
                    Row(
                        "archive",
                        "  store (warm, 50 files in turn) / raw",
                        _secs(ra["store_warm_per_file_s"]),
                        _secs(ra["raw_per_file_s"]),
                        round(ra["store_warm_per_file_s"] / ra["raw_per_file_s"], 3),
                    )
                )
            rows.append(
                Row(
                    "archive",
                    "read one file: store / tar czf extract",
                    _secs(ra.get("store_per_file_s")),
                    _secs(ra.get("tar_czf_one_file_s")),
                    round(ra["store_per_file_s"] / ra["tar_czf_one_file_s"], 5) if ra.get("tar_czf_one_file_s") else None,
                )
            )
    syn = results.get("synthetic_store", {})
    if syn:
        rows.append(
            Row(
                "store",
                f"synthetic store: {syn.get('runs')} runs, {syn.get('modules')} modules",
                f"ingest {_secs(syn.get('ingest_per_run_median_s'))}/run",
                f"build {_secs(syn.get('build_s'))}",
                None,
            )
        )
    search = results.get("search", {})
    for label, target in (("opcode", ">= 10x"), ("rare_op_name", "")):
        entry = search.get(label)
        if not entry:
            continue
        speedup = entry.get("speedup_vs_rg")
        rows.append(
            Row(
                "search",
                f"rg -l / xlarun find ({entry['query']})",
                _secs(_get(entry, "xlarun_find", "median_s")),
                _secs(_get(entry, "rg", "median_s")),
                speedup,
                target,
                _check(speedup, lambda v: v >= 10) if target else None,
            )
        )
        if "xlarun_find_json" in entry:
            rows.append(
                Row(
                    "search",
                    "  same, find --json (no table to draw)",
                    _secs(_get(entry, "xlarun_find_json", "median_s")),
                    _secs(_get(entry, "rg", "median_s")),
                    entry.get("speedup_vs_rg_json"),
                )
            )
    nav = results.get("navigation", {})
    if nav:
        py = _get(nav, "python_c_pass", "median_s")
        help_s = _get(nav, "help", "median_s")
        rows.append(
            Row(
                "navigate",
                "xlarun --help / python -c pass",
                _secs(help_s),
                _secs(py),
                round(help_s / py, 3) if py else None,
                "< 0.3 s",
                _check(help_s, lambda v: v < 0.3),
            )
        )
        cold = _get(nav, "help_without_bytecode_cache", "median_s")
        rows.append(
            Row(
                "navigate",
                "  --help without a bytecode cache",
                _secs(cold),
                _secs(py),
                round(cold / py, 3) if cold and py else None,
            )
        )
        for label in ("modules", "modules_latest", "show", "cat", "runs"):
            if label not in nav:
                continue
            value = _get(nav, label, "median_s")
            target = "< 0.5 s" if label in ("modules", "show") else ""
            rows.append(
                Row(
                    "navigate",
                    f"xlarun {label.replace('_', ' ')} ({nav.get('runs_in_store')} runs)",
                    _secs(value),
                    "",
                    None,
                    target,
                    _check(value, lambda v: v < 0.5) if target else None,
                )
            )
        unpatched = _get(nav, "show_without_typer_patch", "median_s")
        patched = _get(nav, "show", "median_s")
        if unpatched and patched:
            rows.append(
                Row(
                    "navigate",
                    "  show with / without cli.py's typer patch",
                    _secs(patched),
                    _secs(unpatched),
                    round(patched / unpatched, 3),
                )
            )
    rows += _scale_rows(results.get("scale") or {})
    rows += _render_rows(results.get("render") or {})
    replay = results.get("replay", {})
    if not replay.get("ok"):
        rows.append(Row("replay", "replay vs jax.jit", "-", "-", None))
    else:
        for workload, by_how in replay["workloads"].items():
            jit = by_how["jit"]
            for how in ("replay", "replay_optimized"):
                m = by_how.get(how)
                if m:
                    rows.append(
                        Row(
                            "replay",
                            f"{workload} {how}: compile / jax.jit",
                            _secs(m["compile_s"]),
                            _secs(jit["compile_s"]),
                            round(m["compile_s"] / jit["compile_s"], 3),
                        )
                    )
                    rows.append(
                        Row(
                            "replay",
                            f"{workload} {how}: run / jax.jit",
                            _secs(m["median_s"]),
                            _secs(jit["median_s"]),
                            round(m["median_s"] / jit["median_s"], 3),
                        )
                    )
    return rows


def reading_target(runs: int) -> float | None:
    """The most seconds a reading command may take on a store of ``runs`` runs (None: no target that big)."""
    return next((seconds for most, seconds in READING_S if runs <= most), None)


def _scale_rows(scale: dict) -> list[Row]:
    """The reading commands at each store size (bench/scale.py), beside a bare SQLite query of the same rows."""
    from .scale import COMPLETIONS, READING_COMMANDS

    rows = []
    for size, at in sorted(scale.get("sizes", {}).items(), key=lambda kv: int(kv[0])):
        runs, limit = int(size), reading_target(int(size))
        rows.append(Row("reading", f"store of {runs:,} runs: python -c pass", _secs(at.get("python_c_pass_s")), "", None))
        if at.get("typer_import_s") is not None:  # recorded since 2026-11-28
            rows.append(
                Row("reading", "  python -c 'import typer' (the floor of a typer CLI)", _secs(at["typer_import_s"]), "", None)
            )
        for command in READING_COMMANDS:
            value = _get(at, command, "median_s")
            floor = _get(at, command, "bare_sqlite_s")
            rows.append(
                Row(
                    "reading",
                    f"  xlarun {command} ({runs:,} runs) / bare SQLite query",
                    _secs(value),
                    _secs(floor) if floor else "",
                    round(value / floor, 3) if value and floor else None,
                    f"<= {limit:g} s" if limit else "",
                    _check(value, lambda v, limit=limit: v <= limit) if limit else None,
                )
            )
        tab_limit = next((seconds for most, seconds in COMPLETION_S if runs <= most), None)
        for label in COMPLETIONS:
            if (value := _get(at, label, "median_s")) is None:
                continue  # recorded since 2026-11-28
            rows.append(
                Row(
                    "reading",
                    f"  Tab in bash: {at[label].get('line', label)} ({runs:,} runs)",
                    _secs(value),
                    "",
                    None,
                    f"<= {tab_limit:g} s" if tab_limit else "",
                    _check(value, lambda v, limit=tab_limit: v <= limit) if tab_limit else None,
                )
            )
        rows += _paired_cpu_rows(runs, at.get("paired_cpu"))
    return rows


def _paired_cpu_rows(runs: int, paired: dict | None) -> list[Row]:
    """Issue 36's measure (bench/reading_cpu.py): each reading command's CPU over `import typer`'s in the same round,
    a one-command typer app's beside them as the floor a typer CLI pays to run a command."""
    if not paired:
        return []  # recorded since 2026-11-28
    from .reading_cpu import COMMANDS, TARGET

    floor = _secs(paired["typer_import_cpu_s"])
    app = paired["typer_app"]
    rows = [
        Row(
            "reading",
            f"  CPU: a one-command typer app run / import typer ({runs:,} runs)",
            _secs(app["cpu_s"]),
            floor,
            app["ratio"],
        )
    ]
    for command in COMMANDS:
        at = paired[command]
        rows.append(
            Row(
                "reading",
                f"  CPU: xlarun {command} ({runs:,} runs) / import typer",
                _secs(at["cpu_s"]),
                floor,
                at["ratio"],
                f"<= {TARGET:g}x",
                at["ratio"] <= TARGET,
            )
        )
    return rows


def _render_rows(render: dict) -> list[Row]:
    """Each synthetic module drawn by ``xlarun render`` (SVG; PNG below) against plain ``dot -Tsvg`` (bench/render.py)."""
    rows = []
    limit = render.get("target_s")
    for case in render.get("cases", []):
        plain = case.get("plain_dot_svg") or {}
        if plain.get("timed_out"):
            theirs = f"> {plain['s']:.0f} s (stopped)"
        else:
            theirs = _secs(plain.get("s")) if plain and not plain.get("exit") else "-"
        for fmt in ("svg", "png"):
            drawn = case.get(fmt) or {}
            value = drawn.get("median_s") if drawn.get("exit") == 0 else None
            if fmt == "svg":
                what = f"{case['instructions']:,} instructions: render (svg) / plain dot -Tsvg"
                ratio = round(value / plain["s"], 3) if value and plain.get("s") and not plain.get("exit") else None
            else:
                pixels = "x".join(map(str, drawn.get("pixels") or [])) or "no"
                said = ", scaling said" if drawn.get("scaling_said") else ""
                what, theirs, ratio = f"  {case['instructions']:,} instructions: render (png, {pixels} px{said})", "", None
            rows.append(
                Row(
                    "render",
                    what,
                    _secs(value),
                    theirs,
                    ratio,
                    f"<= {limit:g} s" if limit else "",
                    _check(value, lambda v: v <= limit) if limit else None,
                )
            )
    return rows


def targets(rows: list[Row]) -> list[dict]:
    """The targets and whether each was met, for the JSON."""
    return [
        {"what": r.what, "ratio": r.ratio, "ours": r.ours, "theirs": r.theirs, "target": r.target, "met": r.met}
        for r in rows
        if r.target
    ]


def format_table(rows: list[Row]) -> str:
    header = ("section", "comparison", "xlarun", "alternative", "ratio", "target", "met")
    body = [
        (
            r.section,
            r.what,
            r.ours,
            r.theirs,
            "" if r.ratio is None else f"{r.ratio:.3g}x",
            r.target,
            {True: "yes", False: "NO", None: ""}[r.met],
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)).rstrip() for line in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown(rows: list[Row]) -> str:
    """The same table as :func:`format_table`, as Markdown for the documentation."""
    lines = ["| section | comparison | xlarun | alternative | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.3g}x"
        met = {True: "yes", False: "**no**", None: ""}[r.met]
        cells = [r.section, r.what, r.ours, r.theirs, ratio, r.target, met]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
