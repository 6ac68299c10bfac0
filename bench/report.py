"""The benchmark's table and its targets: each a ratio or a median measured in the same run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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
        r = cap.get("ratio")
        rows.append(
            Row(
                "capture",
                "xlarun capture / direct run",
                _secs(_get(cap, "capture", "median_s")),
                _secs(_get(cap, "direct", "median_s")),
                r,
                "<= 1.10x",
                _check(r, lambda v: v <= 1.10),
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
                "<= 5x",
                _check(arc.get("ratio_vs_read_floor"), lambda v: v <= 5.0),
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
