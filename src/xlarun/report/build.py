"""Write the static report site of a run or a batch.

Layout of a run's report folder::

    index.html            run summary, manifest, module table, run-level graphs and files, replays
    index.json            the same, machine-readable (module pages, pass timelines, graphs, files)
    modules/module_NNNN.html
    graphs/*.svg          every graph also inlined in its page
    files/<module>/...    text files copied for reading in the browser
    static/report.css, static/report.js

No page loads anything from the network (a Content-Security-Policy forbids it), every value taken
from the run is escaped by jinja2's autoescape, and graphviz's SVG is sanitized before inlining.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from xlarun import __version__
from xlarun.console import human_bytes, to_jsonable
from xlarun.errors import InputError
from xlarun.report.bisections import bisection_blocks
from xlarun.report.gather import FileCopier, FileEntry, ParsedCache, hlo_name, replay_rows, timeline
from xlarun.report.graphs import GraphJob, lay_out_all, plan_graphdef, plan_module_graphs
from xlarun.report.profiles import module_chart, module_memory_chart, run_profile
from xlarun.safe_names import checked_run_id, store_damage

if TYPE_CHECKING:
    from xlarun.store.facade import LocalStore
    from xlarun.store.rows import ModuleInfo, RunInfo

MARKER = ".xlarun-report"
STATIC_FILES = ("report.css", "report.js")


@dataclass
class ReportOptions:
    """What a report includes and how much of it."""

    graph_limit: int = 500  # bigger graphs are shown as the root's neighbourhood
    graphs: bool = True
    diffs: bool = True
    max_diff_lines: int = 2000  # per pass diff
    max_copied_file_bytes: int = 4 * 1024 * 1024
    max_graphdefs: int = 12
    timeout_s: float = 60.0
    command: list[str] = field(default_factory=list)


@dataclass
class BuiltReport:
    index_html: Path
    index_json: Path
    pages: int
    graphs: int
    files: int
    seconds: float


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("xlarun.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.ChainableUndefined,
    )
    env.filters["bytes"] = human_bytes
    env.filters["signed"] = lambda n: "" if n is None else f"{n:+d}"
    env.filters["blank"] = lambda v: "" if v is None else v
    return env


def _prepare(out: Path) -> None:
    """Make ``out`` an empty report folder; refuse to empty a folder that is not an earlier report."""
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise InputError(f"{out} is not empty and holds no xlarun report", "choose a new folder with -o")
        shutil.rmtree(out)
    (out / "static").mkdir(parents=True)
    (out / "modules").mkdir()
    (out / MARKER).write_text("made by xlarun report; the whole folder is replaced on the next report\n")
    static = Path(__file__).parent / "static"
    for name in STATIC_FILES:
        shutil.copyfile(static / name, out / "static" / name)


def _common(options: ReportOptions, root: str) -> dict:
    return {
        "root": root,
        "version": __version__,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": shlex.join(options.command) if options.command else "",
    }


class _RunReport:
    def __init__(self, store: LocalStore, run_id: str, out: Path, options: ReportOptions, progress: Callable[[str], None] | None):
        self.store, self.run_id, self.out, self.options = store, run_id, out, options
        self.say = progress or (lambda text: None)
        self.env = _environment()
        self.copier = FileCopier(store, out, options.max_copied_file_bytes)
        self.cache = ParsedCache(store)
        self.jobs: list[GraphJob] = []

    def build(self) -> BuiltReport:
        started = time.monotonic()
        index = self.store.index
        info = index.run(self.run_id)
        manifest = self.store.manifest(self.run_id)
        modules = [index.module(self.run_id, m.module_id) for m in index.modules(self.run_id)]
        self.say(f"report of run {self.run_id} ({info.name}): {len(modules)} modules -> {self.out}")
        self.profile = run_profile(self.store, self.run_id)
        pages = [self._module_page(number, len(modules), module) for number, module in enumerate(modules, 1)]
        in_modules = {f.path for page in pages for f in page["module"].files}
        run_files = [f for f in index.run_files(self.run_id) if f.path not in in_modules]
        run_level = [self.copier.entry(f, "run") for f in run_files]
        tf_jobs = []
        if self.options.graphs:
            graphdefs = [f for f in run_files if f.kind == "tf-graph" and f.path.endswith(".pbtxt")]
            graphdefs.sort(key=lambda f: ("annotated" not in f.path, f.path))  # the clustered graphs first
            tf_jobs = [plan_graphdef(self.store, f, self.options.graph_limit) for f in graphdefs[: self.options.max_graphdefs]]
            self.jobs.extend(tf_jobs)
            self.say(f"laying out {sum(1 for j in self.jobs if j.graph)} graphs")
            lay_out_all(self.jobs, self.options.timeout_s, self.say)
            self._write_svgs()
        logs = {
            name: self.copier.text(f"{name}.log", self.store.read_log(self.run_id, name), "run") for name in ("stdout", "stderr")
        }
        replay_columns, replays = replay_rows(index, self.run_id)
        context = {
            **_common(self.options, ""),
            "info": info,
            "manifest": manifest,
            "pages": pages,
            "run_files": run_level,
            "tf_graphs": tf_jobs,
            "logs": logs,
            "replay_columns": replay_columns,
            "replays": replays,
            "svg": _inline,
            "profile": self.profile,
        }
        for page in pages:
            page_context = {**_common(self.options, "../"), "info": info, **page, "svg": _inline}
            (self.out / page["href"]).write_text(self.env.get_template("module.html").render(page_context), encoding="utf-8")
        (self.out / "index.html").write_text(self.env.get_template("run.html").render(context), encoding="utf-8")
        (self.out / "index.json").write_text(
            json.dumps(self._index_json(info, manifest, pages, run_level, tf_jobs), indent=1), encoding="utf-8"
        )
        seconds = time.monotonic() - started
        self.say(f"done in {seconds:.1f} s")
        return BuiltReport(
            self.out / "index.html",
            self.out / "index.json",
            len(pages) + 1,
            sum(1 for j in self.jobs if j.svg),
            self.copier.copied,
            seconds,
        )

    def _module_page(self, number: int, total: int, module: ModuleInfo) -> dict:
        folder = f"module_{module.module_id:04d}"
        self.say(f"module {number}/{total}: {module.label} ({module.n_files} files, {module.n_pass_dumps} pass dumps)")
        files = [self.copier.entry(f, folder) for f in module.files]
        steps = timeline(module, self.cache, self.options.max_diff_lines, with_diffs=self.options.diffs)
        self.cache.forget()
        jobs = plan_module_graphs(self.store, module, self.options.graph_limit) if self.options.graphs else []
        self.jobs.extend(jobs)
        changed = [s for s in steps if s.lines]
        biggest = max(changed, key=lambda s: abs(s.step.delta or 0), default=None)
        replay_columns, replays = replay_rows(self.store.index, self.run_id, module.module_id)
        bisections = bisection_blocks(self.store, module, self.options.graph_limit if self.options.graphs else None)
        self.jobs.extend(b.error_graph for b in bisections if b.error_graph)
        return {
            "module": module,
            "display_name": module.name or hlo_name(self.store, module) or "(unnamed)",
            "href": f"modules/{folder}.html",
            "files": files,
            "steps": steps,
            "changed_steps": len(changed),
            "open_step": biggest.anchor if biggest else None,
            "graphs": jobs,
            "replay_columns": replay_columns,
            "replays": replays,
            "bisections": bisections,
            "opcodes": _opcode_rows(module.opcodes_before, module.opcodes_after),
            "time": self.profile.times.get(module.module_id) if self.profile else None,
            "time_chart": module_chart(self.store, module) if self.profile and module.module_id in self.profile.times else None,
            "memory_chart": module_memory_chart(self.store, module),
        }

    def _write_svgs(self) -> None:
        folder = self.out / "graphs"
        folder.mkdir(exist_ok=True)
        for job in self.jobs:
            if job.svg:
                (folder / f"{job.key}.svg").write_text(job.svg, encoding="utf-8")

    def _index_json(
        self, info: RunInfo, manifest: dict, pages: list[dict], run_files: list[FileEntry], tf_jobs: list[GraphJob]
    ) -> dict:
        def graph(job: GraphJob) -> dict:
            return {
                "title": job.title,
                "source": job.source_path,
                "svg": f"graphs/{job.key}.svg" if job.svg else None,
                "nodes": job.nodes,
                "view": job.view,
                "center": job.center,
                "problem": job.problem,
                "notes": list(job.notes),
            }

        modules = []
        for page in pages:
            module = page["module"]
            modules.append(
                {
                    "module_id": module.module_id,
                    "name": page["display_name"],
                    "label": module.label,
                    "ref": module.ref,
                    "page": page["href"],
                    "stages": module.stages,
                    "instr_before": module.instr_before,
                    "instr_after": module.instr_after,
                    "compute_ops": module.compute_ops,
                    "entry_signature": module.entry_signature,
                    "fingerprint": module.fingerprint,
                    "passes": [
                        {
                            "step": s.step.step,
                            "pipeline": s.step.pipeline,
                            "after_pass": s.step.after_pass,
                            "before_pass": s.step.before_pass,
                            "instr_count": s.step.instr_count,
                            "delta": s.step.delta,
                            "changed": s.step.changed,
                            "diff": f"{page['href']}#{s.anchor}" if s.lines else None,
                        }
                        for s in page["steps"]
                    ],
                    "graphs": [graph(j) for j in page["graphs"]],
                    "bisections": [
                        {
                            "bisect_id": b.bisect_id,
                            "headline": b.headline,
                            "error_graph": graph(b.error_graph) if b.error_graph else None,
                        }
                        for b in page["bisections"]
                    ],
                    "files": [to_jsonable(f) for f in page["files"]],
                }
            )
        return {
            "generator": f"xlarun {__version__}",
            "generated": _common(self.options, "")["generated"],
            "command": self.options.command,
            "run": to_jsonable(info),
            "manifest": manifest,
            "modules": modules,
            "run_files": [to_jsonable(f) for f in run_files],
            "tf_graphs": [graph(j) for j in tf_jobs],
        }


def _inline(job: GraphJob) -> Markup:
    # the SVG went through safe_inline_svg (no scripts, handlers or links); its text was escaped by graphviz
    return Markup(job.svg or "")


def _opcode_rows(before: dict[str, int], after: dict[str, int]) -> list[tuple[str, int, int, int]]:
    ops = sorted(set(before) | set(after), key=lambda op: (-max(before.get(op, 0), after.get(op, 0)), op))
    return [(op, before.get(op, 0), after.get(op, 0), after.get(op, 0) - before.get(op, 0)) for op in ops]


def build_run_report(
    store: LocalStore,
    run_id: str,
    out: str | Path,
    options: ReportOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuiltReport:
    """Write the report of one run into folder ``out`` (replaced if it holds an earlier report)."""
    out = Path(out)
    _prepare(out)
    return _RunReport(store, run_id, out, options or ReportOptions(), progress).build()


def build_batch_report(
    store: LocalStore,
    batch_id: str,
    out: str | Path,
    options: ReportOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuiltReport:
    """Write a report listing a batch's runs, each run's own report below ``runs/<run id>/``."""
    options = options or ReportOptions()
    runs = store.index.runs(batch_id=batch_id)
    if not runs:
        raise InputError(
            f"no run belongs to batch {batch_id!r}", "`xlarun runs` shows batch ids; capture a spec with a matrix to make one"
        )
    out = Path(out)
    started = time.monotonic()
    _prepare(out)
    rows: list[dict[str, Any]] = []
    pages, graphs, files = 1, 0, 0
    for number, run in enumerate(runs, 1):
        if progress:
            progress(f"run {number}/{len(runs)}: {run.run_id}")
        folder = out / "runs" / checked_run_id(run.run_id, "the index", store_damage)  # a folder below out/, never beside it
        built = build_run_report(store, run.run_id, folder, options, progress)
        pages, graphs, files = pages + built.pages, graphs + built.graphs, files + built.files
        main = store.index.modules(run.run_id)[:1]
        rows.append({"run": run, "href": f"runs/{run.run_id}/index.html", "main": main[0] if main else None})
    env = _environment()
    context = {**_common(options, ""), "batch_id": batch_id, "rows": rows}
    (out / "index.html").write_text(env.get_template("batch.html").render(context), encoding="utf-8")
    summary = {
        "generator": f"xlarun {__version__}",
        "command": options.command,
        "batch_id": batch_id,
        "runs": [
            {**to_jsonable(r["run"]), "report": r["href"], "main_module": r["main"].label if r["main"] else None} for r in rows
        ],
    }
    (out / "index.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return BuiltReport(out / "index.html", out / "index.json", pages, graphs, files, time.monotonic() - started)
