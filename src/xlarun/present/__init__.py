"""How what xlarun finds is printed: one home for the CLI and the Python API.

The commands print through these functions; the Python API's objects show the same output, recorded by
:func:`xlarun.console.recording` as tables, ``label: value`` pairs and lines (HTML in Jupyter). Everything
goes through :mod:`xlarun.console`, never ``print`` or ``typer.echo``, so that recording sees all of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xlarun.console import (
    count_or_blank,
    echo,
    escape_markup,
    human_bytes,
    print_pairs,
    print_table,
    say,
    short_number,
    short_time,
    to_jsonable,
    warn,
)


def print_runs(items: Any) -> None:
    """The run table of ``xlarun runs``."""
    if not items:
        echo("no runs yet: capture one with `xlarun capture SPEC`")
        return
    rows = [
        (
            r.run_id,
            r.name + (" (bisect rerun)" if r.made_by_xlarun else ""),
            r.kind,
            r.backend,
            r.status,
            short_time(r.started),
            f"{r.duration_s:.1f}s",
            r.n_modules,
            r.n_files,
            human_bytes(r.dump_bytes),
            r.batch_id or "",
            ",".join(f"{k}={v}" for k, v in (r.matrix or {}).items()),
        )
        for r in items
    ]
    print_table(
        ("run", "name", "kind", "backend", "status", "started", "took", "modules", "files", "dump", "batch", "matrix"),
        rows,
        right=("took", "modules", "files", "dump"),
    )


def print_files(items: Any, notes: list[dict]) -> None:
    """``xlarun files``: every file of a run with what its name means, then what was not archived (or was, with a caveat)."""
    from collections import Counter

    rows = [
        (f.path, f.kind, f.stage or "", f.step if f.step is not None else "", f.after_pass or "", human_bytes(f.size))
        for f in items
    ]
    print_table(("file", "kind", "stage", "step", "after pass", "size"), rows, right=("step", "size"))
    counts = Counter(f.kind for f in items)
    echo(f"{len(items)} files: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    for note in notes:
        echo(f"{'archived' if note['archived'] else 'NOT ARCHIVED'}  {note['path']}: {note['why']}")


def print_found(hits: Any) -> None:
    """``xlarun find``: the modules holding what was searched for, and what matched."""
    print_table(
        ("module", "name", "kind", "matches"),
        [(f"{h.run_id}/module_{h.module_id:04d}", h.module_name or "", h.kind, ", ".join(h.matches)) for h in hits],
    )


def print_run_modules(info: Any, items: Any, others: list[tuple[str, int]], peaks: dict[int, int] | None = None) -> None:
    """``xlarun modules``: the run, its modules (main first), and what else it holds; ``peaks``: the peak memory
    column, by module id."""
    say(f"run [bold]{info.run_id}[/bold] ({info.name}, {info.status}, {info.backend}): {len(items)} modules")
    if info.error:
        echo(f"{info.status}: {info.error}")
    print_modules(items, peaks=peaks)
    if others:
        echo("also " + ", ".join(f"{n} {k} files" for k, n in others) + f" (`xlarun files {info.run_id} --kind KIND`)")


def module_sharding(store: Any, module: Any) -> Any:
    """The module's partitioning, read from its after-optimizations text (else its first text dump); the mesh's
    axis names from its before-optimizations text, where JAX wrote them (XLA drops them while optimizing)."""
    from xlarun.hlo.sharding import Sharding, named_meshes, sharding_of_text

    texts = [f for f in module.files if f.kind == "hlo" and f.format == "text"]
    text = next((f for f in texts if (f.stage or "").endswith("after_optimizations")), texts[0] if texts else None)
    if text is None:
        return Sharding()
    found = sharding_of_text(store.read_file(module.run_id, text.path))
    before = next((f for f in texts if f.stage == "before_optimizations"), None)
    if found.partitioned and not found.named_meshes and before is not None and before is not text:
        found.named_meshes = named_meshes(store.read_file(module.run_id, before.path).decode("utf-8", "replace"))
    return found


def print_module(store: Any, module: Any, files: bool = False, bundle: str | None = None, time: str | None = None) -> None:
    """``xlarun show``: one module's facts, files, pass timeline, and its replays and bisections; ``bundle``: the
    bundle it was read from, named instead of the temporary run it was imported into."""
    say(f"[bold]{module.label}[/bold] in " + (f"bundle {bundle}" if bundle else f"run {module.run_id}"))
    top_ops = ", ".join(f"{op} {n}" for op, n in sorted(module.opcodes_before.items(), key=lambda kv: -kv[1])[:8])
    print_pairs(
        [
            ("ref", bundle or module.ref),
            ("backend", module.backend),
            ("stages", ", ".join(module.stages)),
            (
                "instructions",
                f"{count_or_blank(module.instr_before)} before optimizations, {count_or_blank(module.instr_after)} after",
            ),
            ("signature", module.entry_signature),
            ("fingerprint", (module.fingerprint or "")[:16]),
            ("top opcodes", top_ops),
            ("files", f"{module.n_files} ({human_bytes(sum(f.size for f in module.files))})"),
            (
                "warning",
                "large constants were elided ({...}): dump with dump.large_constants: true to replay faithfully"
                if module.elided_constants
                else None,
            ),
            ("parse error", module.parse_error),
            *module_sharding(store, module).lines(),
            *_process_lines(store, module),
            ("time", time),  # measured, when the run was profiled (present.times.time_line)
        ]
    )
    bulky = ("pass", "codegen", "gpu-artifact")  # many small files: counted unless --files
    listed = module.files if files else [f for f in module.files if f.kind not in bulky]
    if listed:
        print_table(
            ("file", "kind", "stage", "size"),
            [(f.path, f.kind, f.stage or "", human_bytes(f.size)) for f in listed],
            title="files",
            right=("size",),
        )
    if not files:
        hidden = {kind: sum(1 for f in module.files if f.kind == kind) for kind in bulky}
        hidden = {k: n for k, n in hidden.items() if n}
        if hidden:
            echo("also " + ", ".join(f"{n} {k} files" for k, n in hidden.items()) + " (--files lists them)")
    if module.passes:
        rows = []
        previous = module.instr_before
        for p in module.passes:
            delta = "" if p.instr_count is None or previous is None else f"{p.instr_count - previous:+d}"
            rows.append((p.step, p.pipeline or "", p.after_pass or "", p.before_pass or "", count_or_blank(p.instr_count), delta))
            previous = p.instr_count if p.instr_count is not None else previous
        print_table(
            ("step", "pipeline", "after pass", "before pass", "instr", "change"),
            rows,
            title=f"pass timeline ({len(module.passes)} dumps)",
            right=("step", "instr", "change"),
        )
    _show_extras(store, module)


def _process_lines(store: Any, module: Any) -> list[tuple[str, str]]:
    """In a run of many processes: which process compiled the module, and which others compiled it alike."""
    if module.process is None:
        return []
    from xlarun.navigate.desync import compare_processes, module_across_processes

    group = module_across_processes(compare_processes(store.index.modules(module.run_id)), module.module_id)
    if group is None:
        return [("process", str(module.process))]
    same = [c.process for c in group.compiles if c.fingerprint == module.fingerprint and c.process != module.process]
    alike = f"the same HLO as process {', '.join(map(str, same))}" if same else "no other process compiled the same HLO"
    lines = [("process", f"{module.process} ({alike})")]
    if group.desync:
        lines.append(("DESYNC", group.line()))
    elif group.missing:
        lines.append(("processes", group.line()))
    return lines


def print_process_report(report: Any) -> None:
    """Under ``modules`` in a run of many processes: the modules every process compiled alike, and the desync."""
    if report is None:
        return
    say(report.summary())
    for module in report.only_some:
        say(f"  [yellow]extra[/yellow] {escape_markup(module.line())}")
    for module in report.desync:
        say(f"  [bold red]desync[/bold red] {escape_markup(module.line())}")


def print_main_module(items: Any) -> None:
    """After a capture: the module ranked first, in one line, and how to list them all."""
    from xlarun.store.code_origin import code_label  # module tables only: not for `runs`, `find`

    main = items[0]
    label, why = code_label(main.name, main.own_code)
    code = {"yours": "your code", "framework": "the framework's code"}.get(
        label, label if why is None else "code of unknown origin"
    )
    say(
        f"main module: {main.module_id} [bold]{main.name or '(name not in file names)'}[/bold] ({code}, "
        f"{count_or_blank(main.instr_before) or '?'} instructions before optimizations, {count_or_blank(main.instr_after) or '?'} after); "
        f"`xlarun modules` lists all {len(items)}"
    )


def with_peaks(items: Any, peaks: dict[int, int]) -> list[dict]:
    """``modules --json``: each module with its ``peak_bytes`` (None: no buffer assignment dumped)."""
    from xlarun.store.code_origin import code_label  # module tables only: not for `runs`, `find`

    return [to_jsonable(m) | {"peak_bytes": peaks.get(m.module_id), "code": code_label(m.name, m.own_code)[0]} for m in items]


def print_modules(items: Any, more: int = 0, peaks: dict[int, int] | None = None) -> None:
    """The module table shared by ``modules`` and ``capture``; a column for the process in a run of many, and one
    for the peak memory where ``peaks`` has any."""
    from xlarun.store.code_origin import UNKNOWN_WHY, code_label  # module tables only: not for `runs`, `find`

    with_process = any(m.process is not None for m in items)
    with_peak = bool(peaks)
    rows = [
        (
            *((m.process,) if with_process else ()),
            m.module_id,
            m.name or "(name not in file names)",
            code_label(m.name, m.own_code)[0],
            _short_stages(m.stages),
            m.n_pass_dumps or "",
            count_or_blank(m.instr_before),
            count_or_blank(m.instr_after),
            *((human_bytes(peaks.get(m.module_id)),) if peaks else ()),
            _short_signature(m.entry_signature),
        )
        for m in items
    ]
    print_table(
        (
            *(("process",) if with_process else ()),
            "id",
            "name",
            "code",
            "stages",
            "passes",
            "instr before",
            "instr after",
            *(("peak",) if with_peak else ()),
            "signature",
        ),
        rows,
        right=("process", "id", "passes", "instr before", "instr after", "peak"),
    )
    unknown = {why for why in (code_label(m.name, m.own_code)[1] for m in items) if why is not None}
    for why in sorted(unknown):
        echo(f"code unknown: {UNKNOWN_WHY[why]}")
    if more:
        echo(f"... and {more} more (`xlarun modules` lists all)")


def _short_stages(stages: list[str]) -> str:
    """'before_optimizations', 'cpu_after_optimizations' -> 'before, cpu_after'."""
    return ", ".join(s.replace("_optimizations", "") for s in stages)


def _short_signature(signature: str | None, limit: int = 70) -> str:
    if not signature or len(signature) <= limit:
        return signature or ""
    return signature[: limit - 1] + "…"


def _show_extras(store: Any, module: Any) -> None:
    """Sections other stages contribute to `show` (replays, bisections), when the module has any."""
    if any((store.runs_dir / module.run_id / "bisections").glob("*.json")):
        print_bisections_for(store, module)
    if any((store.runs_dir / module.run_id / "replays").glob("*.json")):  # else the replay stage (numpy, ~0.2 s) stays unimported
        print_replays_for(store, module)


def print_replays_for(store: Any, module: Any) -> None:
    """The ``replays`` section of ``xlarun show`` (nothing when the module was never replayed)."""
    from xlarun.replay.record import replays_for

    records = replays_for(store, module.run_id, module.module_id)
    if not records:
        return
    rows = []
    for r in records:
        res = r.result
        rows.append(
            (
                r.replay_id,
                short_time(r.started),
                res.engine,
                res.platform + (f" x{res.devices}" if res.devices > 1 else ""),  # a partitioned module ran on N devices
                res.input_kind,
                res.arguments,
                _seconds4(res.compile_s),
                _seconds4(res.median_s),
                short_number(res.max_abs_error),
                short_number(res.max_rel_error),
                res.verdict + (" (fell back)" if res.fell_back_to else ""),
            )
        )
    print_table(
        (
            "replay",
            "when",
            "engine",
            "platform",
            "input",
            "args",
            "compile s",
            "median s",
            "max abs err",
            "max rel err",
            "verdict",
        ),
        rows,
        title=f"replays ({len(records)})",
        right=("compile s", "median s", "max abs err", "max rel err"),
    )


def print_bisections_for(store: Any, module: Any) -> None:
    """The ``bisections`` section of ``xlarun show`` (nothing when the module was never bisected)."""
    from xlarun.bisect.history import bisections_for

    records = bisections_for(store, module.run_id, module.module_id)
    if not records:
        return
    rows = []
    for r in records:
        res = r.result
        culprit = res.culprit_pass or (" + ".join(res.culprit_set) if res.culprit_set else "")
        where = f"step {res.culprit_step}" if res.culprit_step is not None else ""
        size = f"{res.replays} replays" if res.mode == "replay" else f"{res.reruns} reruns"
        rows.append(
            (
                r.bisect_id,
                short_time(r.started),
                res.mode,
                res.reference if res.mode == "replay" else res.check or "",
                res.verdict,
                culprit,
                where,
                _bisection_error(res),
                size,
                f"{res.wall_s:.1f}",
            )
        )
    print_table(
        ("bisection", "when", "mode", "against", "verdict", "pass", "where", "max abs err", "work", "s"),
        rows,
        title=f"bisections ({len(records)})",
        right=("max abs err", "s"),
    )


def _bisection_error(result: Any) -> str:
    entry = result.error_after or result.largest
    if entry is None or entry.max_abs_error is None:
        return ""
    before = result.error_before.max_abs_error if result.error_before and result.error_before.max_abs_error is not None else None
    return (
        f"{before:.3g} -> {entry.max_abs_error:.3g}"
        if before is not None and result.error_after
        else f"{entry.max_abs_error:.3g}"
    )


def _seconds4(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def print_replay(result: Any, replay_id: str | None, module: Any) -> None:
    """A replay as `xlarun replay` prints it: route, timings, errors against the reference, the verdict."""
    for line in result.warnings:
        warn(line)
    what = module.label if module else Path(result.source).name
    say(
        f"[bold]replay[/bold] of {what} on {result.engine}/{result.platform}"
        + (f" (recorded as {replay_id})" if replay_id else "")
    )
    timing = None
    if result.run_times_s:
        timing = f"min {result.min_s * 1e3:.3f} ms, median {result.median_s * 1e3:.3f} ms over {len(result.run_times_s)} run(s)"
    print_pairs(
        [
            ("file", Path(result.source).name + f" [{result.input_kind}]"),
            ("fell back to", Path(result.fell_back_to).name if result.fell_back_to else None),
            ("route", result.route),
            (
                "arguments",
                result.arguments + (" (global, cut per device by the module's shardings)" if result.devices > 1 else ""),
            ),
            ("devices", f"{result.devices} ({result.partitioning})" if result.devices > 1 else None),
            ("command", " ".join(result.command) if result.command else None),
            ("compile", f"{result.compile_s:.3f} s" if result.compile_s is not None else None),
            ("run", timing),
            ("compared with", ", ".join(result.compared_with) or "nothing (no snapshot result, no reference platform)"),
            (
                "max error",
                f"abs {result.max_abs_error:.3g}, rel {result.max_rel_error:.3g}" if result.max_abs_error is not None else None,
            ),
            ("outputs", ", ".join(o.type for o in result.outputs)),
            ("error", result.error),
            ("crash", f"{result.crash} (step: {result.failed_step})" if result.crash else None),
        ]
    )
    for line in result.mismatches:
        say(f"  [red]{escape_markup(line)}[/red]")
    for output in result.outputs:
        if output.literal is not None:
            say(f"[bold]output {output.index}[/bold] {output.type}")
            echo(output.literal)
    colour = {"match": "green", "ran": "green", "mismatch": "red", "engine-error": "red"}[result.verdict]
    caveats = [
        c
        for c in (
            "NaN/Inf in the outputs" if result.nonfinite_outputs else "",
            "rng: differs per compile" if result.random_instructions else "",
        )
        if c
    ]
    if caveats and colour == "green":
        colour = "yellow"
    say(f"[{colour}]{result.verdict}[/{colour}]" + (f" [yellow]({'; '.join(caveats)})[/yellow]" if caveats else ""))


def print_comparison(result: Any) -> None:
    """The side-by-side table of a batch's cells."""
    from xlarun.batch import cell_summary

    rows = []
    on_nodes = any(cell.node for cell in result.cells)  # a batch spread over a cluster says where each cell ran
    for cell in result.cells:
        data = cell_summary(cell)
        rows.append(
            (
                cell.label,
                data["status"],
                data["run_id"] or "",
                f"{data['seconds']:.1f}s" if data["seconds"] is not None else "",
                data["modules"] if data["modules"] is not None else "",
                data["main_module"] or "",
                data["main_instr_before"] or "",
                data["main_instr_after"] or "",
                data["files"] if data["files"] is not None else "",
                human_bytes(data["dump_bytes"]) if data["dump_bytes"] is not None else "",
            )
            + ((cell.node or "", human_bytes(cell.shipped_bytes) if cell.shipped_bytes is not None else "") if on_nodes else ())
        )
    columns = ("cell", "status", "run", "time", "modules", "main module", "instr before", "instr after", "files", "dump")
    print_table(
        columns + (("node", "shipped") if on_nodes else ()),
        rows,
        title=f"batch {result.batch_id}",
        right=("time", "modules", "instr before", "instr after", "files", "dump", "shipped"),
    )
    prints = {c.result.modules[0].fingerprint for c in result.cells if c.result and c.result.modules}
    if len(prints) == 1 and len(result.cells) > 1 and all(c.result and c.result.modules for c in result.cells):
        say("[green]the main module's unoptimized HLO is identical in every cell[/green] (same fingerprint)")
    for cell in result.cells:
        project = cell_summary(cell)["project"]
        if project and project.get("ran_from") == "snapshot":
            say(
                f"{cell.label}: ran the copy of {project['root']} sent from here ({project['files']} file(s), "
                f"{human_bytes(project['bytes'])}): {project['why']}"
            )
        for note in cell.attempts if cell.ok else ():
            say(f"[yellow]{cell.label}[/yellow]: retried after {note}")
        if cell.error:
            say(f"[red]{cell.label}[/red]: {cell.error}")
