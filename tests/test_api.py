"""The Python front door: public names, navigation, verbs, and display as the CLI prints it and as HTML."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import xlarun
from xlarun import console, display

from .conftest import write_spec
from .see_support import CHROMIUM, CHROMIUM_ARGS

REPO = Path(__file__).resolve().parent.parent

PUBLIC = ["Batch", "Bisection", "Diff", "ExitCode", "Found", "Graph", "Module", "ModuleList", "Replay", "Run", "RunList", "Store",
          "XlarunError", "batch", "capture", "jax", "open_store", "record_arguments"]  # fmt: skip


def test_the_public_names_are_pinned():
    assert xlarun.__all__ == PUBLIC
    assert not [n for n in xlarun.__all__ if n.startswith("_")]
    for name in PUBLIC:
        value = getattr(xlarun, name)
        assert value.__doc__, f"xlarun.{name} has no docstring"
    assert callable(xlarun.capture) and callable(xlarun.batch)
    assert (REPO / "src" / "xlarun" / "py.typed").is_file()
    assert '"py.typed"' in (REPO / "pyproject.toml").read_text()


def test_importing_the_submodules_of_the_same_name_keeps_the_functions():
    from xlarun.batch import run_batch  # noqa: F401
    from xlarun.capture.launch import capture as capture_spec

    assert xlarun.capture is not capture_spec and xlarun.capture.__module__ == "xlarun.api"
    assert xlarun.batch.__module__ == "xlarun.api"


def test_import_xlarun_is_cheap():
    code = "import sys, xlarun; print(sorted(m for m in sys.modules if m.startswith(('xlarun', 'jax', 'rich', 'pydantic', 'typer'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['xlarun']"


# --- a store of in-process captures -----------------------------------------------------------------


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Two in-process captures of one function (the second pass by pass, with a wider input) and one of another."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import xlarun.jax

    def layer(w, x):
        return jax.nn.relu(x @ w).sum(axis=0) * 2.0

    store = xlarun.open_store(tmp_path_factory.mktemp("api") / "store")
    w = jnp.ones((16, 8))
    plain = xlarun.jax.capture(layer, w, jnp.ones((4, 16)), snapshots=True, store=store)
    passes = xlarun.jax.capture(layer, w, jnp.ones((6, 16)), pass_re=".*", name="layer-passes", store=store)
    other = xlarun.jax.capture(lambda v: jnp.sin(v), w, name="sine", store=store)
    return store, plain, passes, other


@pytest.mark.slow
def test_store_runs_and_modules(captured):
    store, plain, passes, other = captured
    assert [r.id for r in store.runs()] == [plain.id, passes.id, other.id]
    assert store.run().id == other.id and store.run("layer-passes").id == passes.id
    assert isinstance(store.modules(plain), xlarun.ModuleList) and len(store.modules(plain)) == 1
    step = store.module("layer", run=plain)
    assert isinstance(step, xlarun.Module)
    assert (step.name, step.label, step.ref) == (
        "jit_layer",
        f"module_{step.module_id:04d}.jit_layer",
        f"{plain.id}/module_{step.module_id:04d}",
    )
    assert step.instr_before == store.store.index.module(plain.id, step.module_id).instr_before > 0
    assert step.signature == "(f32[16,8], f32[4,16]) -> f32[8]"
    assert step.opcodes_before["dot"] == 1 and step.stages == ["before_optimizations", "cpu_after_optimizations"]
    text = step.text()
    assert text.startswith("HloModule jit_layer") and "dot(" in text
    assert step.text("after_optimizations").startswith("HloModule jit_layer") and step.text("after") != text
    assert {f.kind for f in step.files} >= {"hlo", "snapshot"} and step.passes == []
    assert store.module("layer").run_id == passes.id  # without a run: the newest run holding it, as the CLI does
    with pytest.raises(xlarun.XlarunError, match="no module matches"):
        store.module("nothing_like_this")


def test_find(captured):
    store, plain, _passes, other = captured
    found = store.find("sine", opcode=True)
    assert [(h.run_id, h.kind) for h in found] == [(other.id, "opcode")]
    assert [m.name for m in found.modules()] == ["jit__lambda"]  # jax 0.10 (0.4 wrote jit__lambda_)
    assert str(store.find("sine", opcode=True, run=plain)) == "no module contains 'sine'"


@pytest.mark.slow
def test_text_display_is_what_the_cli_prints(captured, cli):
    store, plain, passes, _other = captured
    where = ("--store", store.path)
    step = passes.main
    assert str(step) == cli("show", step.ref, *where).stdout.rstrip("\n")
    assert repr(plain) == cli("modules", plain.id, *where).stdout.rstrip("\n")
    assert str(store.runs()) == cli("runs", *where).stdout.rstrip("\n")
    changed = _first_changing_pass(step)
    diff = step.diff(pass_name=changed.after_pass)
    assert str(diff) == cli("diff", step.ref, "--pass", changed.after_pass, *where).stdout.rstrip("\n")
    assert str(step.diff(to_step=changed.step)) == cli("diff", step.ref, "--to", str(changed.step), *where).stdout.rstrip("\n")
    across = plain.main.diff(passes)
    assert str(across) == cli("diff", plain.main.ref, passes.id, *where).stdout.rstrip("\n")
    assert "f32[4,16]" in str(across) and "f32[6,16]" in str(across)
    assert str(store.modules(plain)).splitlines()[0].split() == [
        "id",
        "name",
        "code",  # whose code a module is: yours, framework, or undecided
        "stages",
        "passes",
        "instr",
        "before",
        "instr",
        "after",
        "signature",
    ]


def _first_changing_pass(module):
    counts = [module.instr_before] + [p.instr_count for p in module.passes]
    return next(p for p, before in zip(module.passes, counts, strict=False) if p.instr_count != before)


def test_html_display(captured):
    store, plain, passes, _other = captured
    page = plain.main._repr_html_()
    assert page.startswith('<div class="xlarun">') and "<script" not in page
    assert page.count("<svg") == 1 and "jit_layer before optimizations" in page
    assert "<th>instructions</th>" in page and "<th>fingerprint</th>" in page
    run_page = plain._repr_html_()
    assert '<th class="num">instr before</th>' in run_page and ">jit_layer<" in run_page
    diff_page = passes.main.diff(to_step=_first_changing_pass(passes.main).step)._repr_html_()
    assert 'class="line diff-add"' in diff_page or 'class="line diff-del"' in diff_page
    assert "<table>" in store.modules(plain)._repr_html_() and "<table>" in store.runs()._repr_html_()


def test_html_escapes_what_comes_from_the_dump():
    hostile = "<script>alert(1)</script>"
    blocks = [
        display.TableBlock(("name",), [[hostile]], title=hostile),
        display.PairsBlock([(hostile, hostile)]),
        console.LineBlock(hostile),
    ]
    page = display.page_html(display.blocks_html(blocks))
    assert "<script>" not in page and page.count("&lt;script&gt;") == 5


@pytest.mark.slow
def test_verbs_replay_render_bisect(captured, tmp_path):
    store, plain, passes, _other = captured
    main = plain.main
    before = str(main)
    replay = main.replay()
    assert "replays" not in before and "replays" in str(main)  # shown again with the replay it recorded
    assert replay.verdict == "match" and replay.ok and replay.max_abs_error == 0
    assert "compared with  snapshot result" in str(replay) and str(replay).endswith("match")
    shown = store.module(plain.main.ref)
    assert "replays" in str(shown)  # recorded with the run, as `xlarun show` lists it
    graph = plain.main.render(tmp_path / "g.svg")
    assert graph.nodes > 3 and (tmp_path / "g.svg").read_bytes() == graph.data and "<svg" in graph._repr_svg_()
    bisection = passes.main.bisect()
    assert bisection.verdict == "no-divergence" and bisection.culprit_pass is None
    # the pass-by-pass capture dumps no snapshot: the steps ran on fake arguments, which the verdict says
    said = "no step diverges on fake data: not a clean bill" if bisection.result.arguments == "fake" else "diverges past"
    assert str(bisection).startswith(f"bisection of {passes.main.ref} by replay") and said in str(bisection)


def _module_ref(plain, _folder: Path) -> str:
    return plain.main.ref


def _edited_file(plain, folder: Path) -> str:
    """The module's before_optimizations text as a file of its own (as a user edits one), outside the store."""
    path = folder / "edited.before_optimizations.txt"
    path.write_text(plain.main.text("before_optimizations"))
    return str(path)


#: What `xlarun replay` is given, and the same given to ``Store.replay``: both go through ``replay.resolve.replay_ref``.
REPLAY_CASES = [
    pytest.param(_module_ref, ("--iterations", "2"), {"iterations": 2}, id="module-ref"),
    pytest.param(_edited_file, ("--seed", "3", "--inputs", "fake"), {"seed": 3, "inputs": "fake"}, id="dump-file"),
]


@pytest.mark.slow
@pytest.mark.parametrize("given, flags, keywords", REPLAY_CASES)
def test_replay_gives_the_same_answer_from_the_cli_and_python(captured, cli, tmp_path, given, flags, keywords):
    import json

    store, plain, _passes, _other = captured
    ref = given(plain, tmp_path)
    answered = cli("replay", ref, *flags, "--json", "--store", store.path)
    from_cli = json.loads(answered.stdout)
    from_python = store.replay(ref, **keywords)
    same = ("verdict", "engine", "platform", "input_kind", "arguments", "module_name", "max_abs_error", "compared_with")
    python = from_python.result.to_dict()
    assert all(k in from_cli and k in python for k in same)
    assert {k: from_cli[k] for k in same} == {k: python[k] for k in same}
    assert len(from_cli["run_times_s"]) == len(python["run_times_s"]) == keywords.get("iterations", 1)
    assert answered.exit_code == from_python.result.exit_code
    assert from_python.replay_id and from_cli["replay_id"] and from_python.replay_id != from_cli["replay_id"]  # both recorded
    assert (from_python.module is None) == (from_cli["module"] is None) == (given is _edited_file)


@pytest.mark.slow
def test_capture_and_batch_from_python(tmp_path):
    pytest.importorskip("jax")
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp
        print(float(jax.jit(lambda v: (v * 3).sum())(jnp.ones(${N}))))
    """)
    spec = write_spec(tmp_path / "job", "name: tiny\nscript: job.py\nframework: jax\n", script.replace("${N}", "4"))
    store = xlarun.open_store(tmp_path / "store")
    run = xlarun.capture(spec, store)
    assert isinstance(run, xlarun.Run) and run.ok and run.kind == "capture" and run.main.name.startswith("jit__lambda")
    assert run.logs().strip() == "12.0"
    matrix = write_spec(
        tmp_path / "matrix",
        "name: tiny-n\nscript: job.py\nframework: jax\nargs: ['${matrix.n}']\nmatrix: {n: ['1', '2']}\n",
        "import sys, jax, jax.numpy as jnp\nprint(float(jax.jit(lambda v: v.sum())(jnp.ones(int(sys.argv[1])))))\n",
    )
    done = store.batch(matrix, jobs=2)
    assert done.ok and len(done.runs) == 2 and {r.batch_id for r in done.runs} == {done.batch_id}
    assert f"batch {done.batch_id}" in str(done) and "n=1" in str(done) and "n=2" in str(done)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_a_modules_html_renders_in_chromium(captured, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
    _store, plain, _passes, _other = captured
    page_file = tmp_path / "module.html"
    page_file.write_text(f"<!doctype html><meta charset=utf-8><body>{plain.main._repr_html_()}</body>")
    errors: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda message: errors.append(f"console {message.type}: {message.text}") if message.type == "error" else None,
        )
        page.on(
            "request",
            lambda request: None if request.url.startswith(("file://", "data:")) else errors.append(f"network: {request.url}"),
        )
        page.goto(page_file.as_uri())
        graph = page.locator("div.graph svg")
        assert graph.count() == 1 and graph.is_visible()
        assert page.locator("div.graph svg g.node").count() == plain.main.render().nodes
        assert page.locator("table.pairs th", has_text="signature").count() == 1
        assert page.locator("table.pairs td", has_text="(f32[16,8], f32[4,16]) -> f32[8]").count() == 1
        page.screenshot(path=str(tmp_path / "module.png"))
        browser.close()
    assert errors == []
    assert (tmp_path / "module.png").stat().st_size > 5_000


@pytest.mark.slow
def test_report_bundle_and_import_from_python(captured, tmp_path):
    _store, plain, _passes, _other = captured
    index = plain.report(tmp_path / "report")
    assert index == tmp_path / "report" / "index.html" and "jit_layer" in index.read_text()
    bundle = plain.main.bundle(tmp_path / "layer.zip")
    other = xlarun.open_store(tmp_path / "other")
    imported = other.import_dump(bundle)
    assert imported.kind == "import" and imported.main.fingerprint == plain.main.fingerprint
    assert other.module("jit_layer").replay().verdict == "match"
