"""``runs``, ``modules``, ``show``, ``cat``, ``find``, ``explain``, ``logs``, ``export``: finding your way in the store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import JsonOption, RunOption, StoreOption, open_store

RefArgument = Annotated[
    str,
    typer.Argument(help="Module REF: module_0006, 6, jit_f (a name or unique prefix), RUN/module_0006, or a dump file name.", show_default=False),
]


def register(app: typer.Typer) -> None:
    for command in (runs, modules, files, show, cat, find, explain, logs, export):
        app.command(command.__name__)(command)


def runs(
    store: StoreOption = None,
    batch: Annotated[Optional[str], typer.Option("--batch", help="Only the runs of this batch (id or unique prefix; 'latest' for the newest batch).")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="Only the runs of this spec name.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the runs in the store, oldest first."""
    from ..console import human_bytes, print_json, print_table, short_time

    index = open_store(store).index
    if batch:
        batch = _resolve_batch(index, batch)
    items = index.runs(batch_id=batch, name=name)
    if as_json:
        print_json(items)
        return
    if not items:
        typer.echo("no runs yet: capture one with `xlarun capture SPEC`")
        return
    rows = [
        (r.run_id, r.name, r.kind, r.backend, r.status, short_time(r.started), f"{r.duration_s:.1f}s", r.n_modules, r.n_files, human_bytes(r.dump_bytes),
         r.batch_id or "", ",".join(f"{k}={v}" for k, v in (r.matrix or {}).items()))
        for r in items
    ]
    print_table(("run", "name", "kind", "backend", "status", "started", "took", "modules", "files", "dump", "batch", "matrix"), rows, right=("took", "modules", "files", "dump"))


def _resolve_batch(index, ref: str) -> str:
    from ..errors import RefError

    ids = sorted({r.batch_id for r in index.runs() if r.batch_id})
    if ref == "latest" and ids:
        return ids[-1]
    hits = [b for b in ids if b.startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise RefError(f"no batch matches {ref!r}", "`xlarun runs` shows batch ids in the batch column")
    raise RefError(f"batch REF {ref!r} is ambiguous: {', '.join(hits)}", "type more of the batch id")


def print_modules(items, more: int = 0) -> None:
    """The module table shared by ``modules`` and ``capture``."""
    from ..console import count_or_blank, print_table

    rows = [
        (m.module_id, m.name or "(name not in file names)", _short_stages(m.stages), m.n_pass_dumps or "", count_or_blank(m.instr_before), count_or_blank(m.instr_after),
         _short_signature(m.entry_signature))
        for m in items
    ]
    print_table(("id", "name", "stages", "passes", "instr before", "instr after", "signature"), rows, right=("id", "passes", "instr before", "instr after"))
    if more:
        typer.echo(f"... and {more} more (`xlarun modules` lists all)")


def files(
    run: Annotated[Optional[str], typer.Argument(help="Run REF (default: latest).", show_default=False)] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", "-k", help="Only these kinds (hlo, pass, tf-graph, jax-ir, snapshot, codegen, unknown, ...).")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every file of a run with what its name means: modules' dumps, TF GraphDefs, JAX IR, reports.

    Files whose names xlarun cannot decode are archived and listed as kind 'unknown'. Paths of the dump
    folder that were not archived (symbolic links, FIFOs, sockets, unreadable files) are listed after
    them with why, as are files archived with a caveat (a name that is not UTF-8, still being written).
    """
    from collections import Counter

    from ..console import human_bytes, print_json, print_table
    from ..refs import resolve_run

    the_store = open_store(store)
    index = the_store.index
    info = resolve_run(index, run)
    items = [f for f in index.run_files(info.run_id) if not kind or f.kind in kind]
    notes = the_store.manifest(info.run_id).get("file_notes") or []
    if as_json:
        print_json({"run_id": info.run_id, "files": items, "not_archived": [n for n in notes if not n["archived"]],
                    "caveats": [n for n in notes if n["archived"]]})
        return
    rows = [(f.path, f.kind, f.stage or "", f.step if f.step is not None else "", f.after_pass or "", human_bytes(f.size)) for f in items]
    print_table(("file", "kind", "stage", "step", "after pass", "size"), rows, right=("step", "size"))
    counts = Counter(f.kind for f in items)
    typer.echo(f"{len(items)} files: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    for note in notes:  # what the dump folder held that was not archived, or was with a caveat
        typer.echo(f"{'archived' if note['archived'] else 'NOT ARCHIVED'}  {note['path']}: {note['why']}")


def _short_stages(stages: list[str]) -> str:
    """'before_optimizations', 'cpu_after_optimizations' -> 'before, cpu_after'."""
    return ", ".join(s.replace("_optimizations", "") for s in stages)


def _short_signature(signature: str | None, limit: int = 70) -> str:
    if not signature or len(signature) <= limit:
        return signature or ""
    return signature[: limit - 1] + "…"


def modules(
    run: Annotated[Optional[str], typer.Argument(help="Run id, unique prefix, spec name or 'latest' (default).", show_default=False)] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a run's modules, the main program first (most instructions, then largest HLO).

    Ranking by size is the best heuristic there is (a tiny cast or init module is never your model).
    """
    from ..console import print_json, say
    from ..refs import resolve_run

    index = open_store(store).index
    info = resolve_run(index, run)
    items = index.modules(info.run_id)
    if as_json:
        print_json({"run_id": info.run_id, "modules": items})
        return
    say(f"run [bold]{info.run_id}[/bold] ({info.name}, {info.status}, {info.backend}): {len(items)} modules")
    print_modules(items)
    others = index.conn.execute(
        "SELECT kind, COUNT(*) FROM files WHERE run_id=? AND module_id IS NULL GROUP BY kind ORDER BY kind", (info.run_id,)
    ).fetchall()
    if others:
        typer.echo("also " + ", ".join(f"{n} {k} files" for k, n in others) + f" (`xlarun files {info.run_id} --kind KIND`)")


def show(ref: RefArgument, store: StoreOption = None, run: RunOption = None, files: Annotated[bool, typer.Option("--files", help="List every file.")] = False, as_json: JsonOption = False) -> None:
    """Show one module: its stages and files, the pass timeline, instruction counts and opcodes."""
    from ..console import count_or_blank, human_bytes, print_json, print_pairs, print_table, say
    from ..refs import resolve_module
    from .share import bundle_or_ref

    store, ref, run = bundle_or_ref(ref, store, run)  # a bundle .zip: shown from a temporary store
    the_store = open_store(store)
    module = resolve_module(the_store.index, ref, run=run)
    if as_json:
        print_json(module)
        return
    say(f"[bold]{module.label}[/bold] in run {module.run_id}")
    top_ops = ", ".join(f"{op} {n}" for op, n in sorted(module.opcodes_before.items(), key=lambda kv: -kv[1])[:8])
    print_pairs(
        [
            ("ref", module.ref),
            ("backend", module.backend),
            ("stages", ", ".join(module.stages)),
            ("instructions", f"{count_or_blank(module.instr_before)} before optimizations, {count_or_blank(module.instr_after)} after"),
            ("signature", module.entry_signature),
            ("fingerprint", (module.fingerprint or "")[:16]),
            ("top opcodes", top_ops),
            ("files", f"{module.n_files} ({human_bytes(sum(f.size for f in module.files))})"),
            ("warning", "large constants were elided ({...}): dump with dump.large_constants: true to replay faithfully" if module.elided_constants else None),
            ("parse error", module.parse_error),
        ]
    )
    bulky = ("pass", "codegen", "gpu-artifact")  # many small files: counted unless --files
    listed = module.files if files else [f for f in module.files if f.kind not in bulky]
    if listed:
        print_table(("file", "kind", "stage", "size"), [(f.path, f.kind, f.stage or "", human_bytes(f.size)) for f in listed], title="files", right=("size",))
    if not files:
        hidden = {kind: sum(1 for f in module.files if f.kind == kind) for kind in bulky}
        hidden = {k: n for k, n in hidden.items() if n}
        if hidden:
            typer.echo("also " + ", ".join(f"{n} {k} files" for k, n in hidden.items()) + " (--files lists them)")
    if module.passes:
        rows = []
        previous = module.instr_before
        for p in module.passes:
            delta = "" if p.instr_count is None or previous is None else f"{p.instr_count - previous:+d}"
            rows.append((p.step, p.pipeline or "", p.after_pass or "", p.before_pass or "", count_or_blank(p.instr_count), delta))
            previous = p.instr_count if p.instr_count is not None else previous
        print_table(("step", "pipeline", "after pass", "before pass", "instr", "change"), rows, title=f"pass timeline ({len(module.passes)} dumps)", right=("step", "instr", "change"))
    _show_extras(the_store, module)


def _show_extras(store, module) -> None:
    """Sections other stages contribute to `show` (replays, bisections), when those stages are installed."""
    if any((store.runs_dir / module.run_id / "bisections").glob("*.json")):
        from ..bisect.record import print_bisections_for

        print_bisections_for(store, module)
    if not any((store.runs_dir / module.run_id / "replays").glob("*.json")):
        return  # never replayed: skip importing the replay stage (numpy and friends, ~0.2 s)
    try:
        from ..replay.record import print_replays_for
    except ImportError:
        return
    print_replays_for(store, module)


def _pick_file(module, stage: str | None, pass_name: str | None, step: int | None, fmt: str | None):
    from ..errors import InputError

    files = module.files
    if fmt:
        files = [f for f in files if f.format == fmt]
    if step is not None or pass_name:
        candidates = [f for f in files if f.kind == "pass" and (step is None or f.step == step) and (not pass_name or f.after_pass == pass_name)]
        if not candidates:
            passes = sorted({f.after_pass for f in module.files if f.kind == "pass" and f.after_pass})
            raise InputError(f"{module.label} has no dump after pass {pass_name or ''} {'step ' + str(step) if step is not None else ''}".strip(),
                             f"passes dumped: {', '.join(passes[:20]) or 'none (capture with dump.pass_re)'}")
    else:
        wanted = stage or "before_optimizations"
        candidates = [f for f in files if f.kind == "hlo" and (f.stage == wanted or (wanted == "after_optimizations" and (f.stage or "").endswith("after_optimizations")))]
        if not candidates:
            candidates = [f for f in files if f.kind == wanted or f.path.endswith(wanted)]
        if not candidates:
            stages = sorted({f.stage or f.kind for f in module.files})
            raise InputError(f"{module.label} has no {wanted} file", f"available: {', '.join(stages)}")
    order = {"text": 0, "txt": 1, "dot": 2, "html": 3}
    candidates.sort(key=lambda f: (f.step or 0, order.get(f.format or "", 9)))
    return candidates[0]


def cat(
    ref: RefArgument,
    stage: Annotated[Optional[str], typer.Option("--stage", "-s", help="before_optimizations (default), after_optimizations, buffer-assignment, ...")] = None,
    pass_name: Annotated[Optional[str], typer.Option("--pass", "-p", help="The dump taken right after this pass (first occurrence).")] = None,
    step: Annotated[Optional[int], typer.Option("--step", help="The per-pass dump with this step number.")] = None,
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", help="text, proto, dot, html, ... (default: text when there is one).")] = None,
    store: StoreOption = None,
    run: RunOption = None,
) -> None:
    """Print a module's dump at a stage or after a pass (the exact archived bytes)."""
    from ..refs import resolve_module

    the_store = open_store(store)
    module = resolve_module(the_store.index, ref, run=run)
    chosen = _pick_file(module, stage, pass_name, step, fmt)
    typer.echo(f"# {module.run_id}/{chosen.path}", err=True)
    data = the_store.blobs.get(chosen.digest)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def find(
    text: Annotated[str, typer.Argument(help="What to look for: an opcode (dot), an instruction name (dot.3), an op_name (jit(f)/dot_general) or a source file.")],
    opcode: Annotated[bool, typer.Option("--opcode", help="Only opcodes (exact).")] = False,
    name: Annotated[bool, typer.Option("--name", help="Only instruction names (substring).")] = False,
    op_name: Annotated[bool, typer.Option("--op-name", help="Only metadata op_name (substring).")] = False,
    source: Annotated[bool, typer.Option("--source", help="Only metadata source file:line (substring).")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Whole values only.")] = False,
    run: RunOption = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the modules that contain an opcode, instruction name, op_name or source location.

    The seeds' trick, indexed: put a distinctive op in your model (or name a scope) and find the
    modules holding it across every run in the store.
    """
    from ..console import print_json, print_table
    from ..index import TERM_KINDS
    from ..refs import resolve_run

    the_store = open_store(store)
    kinds = tuple(k for k, on in zip(TERM_KINDS, (opcode, name, op_name, source)) if on) or TERM_KINDS
    run_id = resolve_run(the_store.index, run).run_id if run else None
    hits = the_store.index.find(text, kinds=kinds, run_id=run_id, exact=exact)
    if as_json:
        print_json(hits)
        return
    if not hits:
        typer.echo(f"no module contains {text!r}", err=True)
        raise typer.Exit(1)
    print_table(("module", "name", "kind", "matches"), [(f"{h.run_id}/module_{h.module_id:04d}", h.module_name or "", h.kind, ", ".join(h.matches)) for h in hits])


def explain(
    names: Annotated[list[str], typer.Argument(help="Dump file names (or paths) to decode.", show_default=False)],
    as_json: JsonOption = False,
) -> None:
    """Explain what dump file names mean: module id and name, stage, pass, pipeline, format.

    Example: xlarun explain module_0001.0001.IPU.after_forward-allocation.before_hlo-memory-scheduler.dot
    """
    from ..console import print_json, print_pairs
    from ..names import decode_dump_name

    decoded = [decode_dump_name(Path(n).name if "/dump/" in n else n) for n in names]
    if as_json:
        print_json([d.to_dict() for d in decoded] if len(decoded) > 1 else decoded[0].to_dict())
        return
    for item in decoded:
        print_pairs(item.describe(), title=item.path)


def logs(
    run: Annotated[Optional[str], typer.Argument(help="Run REF (default: latest).", show_default=False)] = None,
    stream: Annotated[str, typer.Option("--stream", help="stdout, stderr or both.")] = "both",
    store: StoreOption = None,
) -> None:
    """Print a run's captured stdout and stderr."""
    from ..refs import resolve_run

    the_store = open_store(store)
    info = resolve_run(the_store.index, run)
    for name in ("stdout", "stderr"):
        if stream in (name, "both"):
            text = the_store.read_log(info.run_id, name)
            if stream == "both":
                typer.echo(f"==> {name} <==")
            typer.echo(text, nl=not text.endswith("\n"))


def export(
    run: Annotated[str, typer.Argument(help="Run REF (a module REF with --format model-explorer).", show_default=False)],
    dest: Annotated[Path, typer.Argument(help="A new or empty folder (a .json file with --format model-explorer).", show_default=False)],
    no_logs: Annotated[bool, typer.Option("--no-logs", help="Only the dump files, without _xlarun/ (manifest, spec, logs).")] = False,
    fmt: Annotated[str, typer.Option("--format", help="files (the run's files), or model-explorer (a module's JSON graph for Model Explorer).")] = "files",
    stage: Annotated[str, typer.Option("--stage", help="With model-explorer: before_optimizations or after_optimizations.")] = "before_optimizations",
    store: StoreOption = None,
) -> None:
    """Write a run's files back with their original names and exact bytes (dump files at the top,
    tf_graphs/, jax_ir/ ... beside them, and the manifest, spec and logs in _xlarun/).

    With --format model-explorer: `xlarun export jit_f f.json --format model-explorer` writes the module's
    graph as a Model Explorer JSON graph (what `xlarun view` serves); open it with `model-explorer f.json`."""
    from ..refs import resolve_run

    if fmt == "model-explorer":
        from .view import export_model_explorer

        export_model_explorer(run, dest, stage, store)
        return
    if fmt != "files":
        from ..errors import InputError

        raise InputError(f"unknown --format {fmt!r}", "use files or model-explorer")
    the_store = open_store(store)
    info = resolve_run(the_store.index, run)
    count = the_store.export(info.run_id, dest, with_logs=not no_logs)
    typer.echo(f"exported {count} files of run {info.run_id} to {dest}")
