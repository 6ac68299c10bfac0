"""xlarun across framework versions: build one venv per version, run the compatibility matrix, write test fixtures.

Run it with the project's venv: `.venv/bin/python scripts/compat.py --help`.

  venvs [KEY ...] [--ends] [--all]   build the per-version venvs (cached; a warm run only checks markers)
  run [KEY ...] [--json FILE]        the matrix: capture, rank, name, replay and render per version; prints a table
  fixtures [KEY ...]                 tests/fixtures/compat/<key>/ from the matrix's stores
  table FILE                         print the table of a matrix JSON again
  keys                               list the keys, their Python and pins

Venvs live outside the clone (they are 0.5-7 GB each): $XLARUN_COMPAT_DIR/<key>, else ~/.cache/xlarun/compat/<key>
(the home folder from the password database; see tests/compat_support.py, which finds them for the tests). A venv
counts once its marker `.xlarun-compat-ok` exists, written last; anything without it is rebuilt. Each holds the
framework and xlarun's core dependencies but not xlarun: xlarun runs there as `VENV/bin/python -m xlarun` with
PYTHONPATH=<repo>/src, so every venv runs this checkout's code.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
MARKER = ".xlarun-compat-ok"
FIXTURES = REPO / "tests" / "fixtures" / "compat"
DEFAULT_WORK = REPO / "bench" / "out" / "compat"
# Above this much plain text over all versions, each version's dumps go into one tarball instead.
FIXTURE_TEXT_LIMIT = 5 * 1024 * 1024


@dataclass(frozen=True)
class Version:
    key: str
    framework: str  # jax | tensorflow | torch_xla
    python: str  # major.minor
    pins: tuple[str, ...]

    @property
    def spec(self) -> Path:
        return (
            REPO
            / "configs"
            / {"jax": "jax-cpu.yaml", "tensorflow": "tf-jit-compile.yaml", "torch_xla": "torch-xla.yaml"}[self.framework]
        )


def _jax(version: str, python: str = "3.11") -> Version:
    return Version(f"jax-{version}", "jax", python, (f"jax=={version}", f"jaxlib=={version}"))


def _tf(version: str) -> Version:
    return Version(f"tf-{version}", "tensorflow", "3.11", (f"tensorflow-cpu=={version}",))


VERSIONS = {
    v.key: v
    for v in [
        *(_jax(x) for x in ("0.4.30", "0.4.38", "0.5.0", "0.5.3", "0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2")),
        _jax("0.11.2", "3.12"),
        _jax("0.12.0.1", "3.12"),  # jax 0.11+ needs Python >= 3.12
        *(_tf(x) for x in ("2.16.2", "2.17.1", "2.18.1", "2.19.1", "2.20.0", "2.21.0")),
        Version("torch_xla-2.9.0", "torch_xla", "3.11", ("torch==2.9.0", "torch_xla==2.9.0")),  # torch_xla declares no torch pin
    ]
}
# What CI builds and tests for real: the oldest, a middle and the newest jaxlib, an older TF, PyTorch/XLA.
ENDS = ("jax-0.4.30", "jax-0.7.2", "jax-0.8.3", "jax-0.12.0.1", "tf-2.16.2", "torch_xla-2.9.0")


class CompatError(Exception):
    """A problem the user can act on; printed as one line, exit 1."""


def log(message: str) -> None:
    print(f"compat: {message}", file=sys.stderr, flush=True)


# ---- venvs ------------------------------------------------------------------------------------------------------


def compat_root() -> Path:
    """Where the venvs live (tests/compat_support.py answers the same)."""
    explicit = os.environ.get("XLARUN_COMPAT_DIR")
    if explicit:
        return Path(explicit)
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "xlarun" / "compat"


def venv_python(key: str) -> Path:
    return compat_root() / key / "bin" / "python"


def is_complete(key: str) -> bool:
    return (compat_root() / key / MARKER).is_file() and venv_python(key).exists()


def find_python(version: str) -> Path:
    """An interpreter for major.minor `version`: pyenv's newest of that series, else pythonX.Y on PATH."""
    roots = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            roots.append(Path(subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30).stdout.strip()))
    if os.environ.get("PYENV_ROOT"):
        roots.append(Path(os.environ["PYENV_ROOT"]))
    for root in roots:
        found = sorted((root / "versions").glob(f"{version}.*"), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)])
        for candidate in reversed(found):
            if (candidate / "bin" / "python").exists():
                return candidate / "bin" / "python"
    on_path = shutil.which(f"python{version}")
    if on_path:
        return Path(on_path)
    raise CompatError(
        f"no Python {version} found (pyenv versions, python{version} on PATH): install it, e.g. `pyenv install {version}`"
    )


def core_dependencies() -> list[str]:
    """xlarun's own requirements (pyproject's `dependencies`), installed in every venv beside the framework."""
    with open(REPO / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def foreign_builder_keys() -> set[str]:
    """Keys that a running throwaway prebuilder (a `prebuild.sh` with lines `build KEY ...`) may still be building.

    It shares our layout and marker but takes no lock, so we wait for it rather than build beside it."""
    try:
        pids = subprocess.run(["pgrep", "-f", "prebuild.sh"], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return set()
    keys: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                script = Path(arg.decode(errors="replace"))
                if script.name == "prebuild.sh" and script.is_file():
                    keys |= set(re.findall(r"^build\s+(\S+)", script.read_text(errors="replace"), re.M))
    return keys


@contextlib.contextmanager
def key_lock(key: str):
    """One builder per key, across processes (an flock on <root>/<key>.lock)."""
    compat_root().mkdir(parents=True, exist_ok=True)
    with open(compat_root() / f"{key}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{key}: another builder holds its lock; waiting")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def wait_for_foreign_builder(key: str) -> None:
    announced = False
    while not is_complete(key) and key in foreign_builder_keys():
        if not announced:
            log(f"{key}: prebuild.sh is building it; waiting for its marker")
            announced = True
        time.sleep(10)


def build_venv(key: str) -> str:
    """Make the venv for `key` complete; returns what was done ('cached' or 'built in N s')."""
    version = VERSIONS[key]
    if is_complete(key):
        return "cached"
    wait_for_foreign_builder(key)
    with key_lock(key):
        if is_complete(key):  # built by whoever held the lock, or by prebuild.sh
            return "cached"
        venv, build_log = compat_root() / key, compat_root() / f"{key}.log"
        if venv.exists():
            log(f"{key}: removing a half-built venv (no {MARKER})")
            shutil.rmtree(venv)
        python = find_python(version.python)
        log(f"{key}: building with {python} ({' '.join(version.pins)}; see {build_log})")
        started = time.monotonic()
        with open(build_log, "w") as out:
            for argv in (
                [str(python), "-m", "venv", str(venv)],
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *version.pins, *core_dependencies()],
            ):
                out.write(f"$ {' '.join(argv)}\n")
                out.flush()
                if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                    tail = build_log.read_text(errors="replace").strip().splitlines()[-3:]
                    raise CompatError(f"{key}: `{' '.join(argv[2:5])} ...` failed: {' | '.join(tail)} (full log: {build_log})")
        check_pins(key)
        seconds = round(time.monotonic() - started)
        (venv / MARKER).write_text(json.dumps({"pins": list(version.pins), "seconds": seconds, "built": _now()}) + "\n")
        return f"built in {seconds} s"


def check_pins(key: str) -> None:
    """The venv's installed versions are the pinned ones (pip may have resolved something else)."""
    wanted = dict(pin.split("==") for pin in VERSIONS[key].pins)
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    proc = subprocess.run([str(venv_python(key)), "-c", code, *wanted], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise CompatError(f"{key}: cannot read the installed versions: {_last_line(proc.stderr)}")
    got = json.loads(proc.stdout)
    if got != wanted:
        raise CompatError(f"{key}: pip installed {got}, not {wanted}")


def build_time(key: str) -> int | None:
    """Seconds the venv took to build, from its marker (None for a marker without it, e.g. prebuild.sh's)."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        return json.loads((compat_root() / key / MARKER).read_text())["seconds"]
    return None


# ---- the matrix ---------------------------------------------------------------------------------------------------

COLUMNS = ("capture", "main_first", "unknown_files", "replay_own", "replay_xlarun", "render")
HEADINGS = ("capture", "main module first (+ counts)", "unknown files", "replay own jaxlib", "replay xlarun's", "render")


@dataclass
class Cell:
    status: str  # ok | fail | n/a
    value: str = ""
    reason: str | None = None  # one line: the real error when not ok

    def markdown(self) -> str:
        mark = {"ok": "✅", "fail": "❌", "n/a": "–"}[self.status]
        text = " ".join(x for x in (mark, self.value) if x)
        if self.reason:
            text += f": {self.reason}"
        return text.replace("|", "\\|")


@dataclass
class VersionResult:
    key: str
    python: str = ""
    framework_version: str = ""
    cells: dict[str, Cell] = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str | None = None
    main_module: str | None = None
    date: str = field(default_factory=lambda: _now())


def is_main_module(framework: str, name: str | None) -> bool:
    """The example's main program: the training step, by the name each framework gives its module."""
    name = name or ""
    if framework == "jax":
        return name == "jit_train_step"
    if framework == "tensorflow":
        return "train_step" in name  # a_inference_train_step_<n>__XlaMustCompile_true_...
    return name.startswith("SyncTensorsGraph.")  # and the largest of them (see main_of)


def main_of(framework: str, modules: list[dict], counted) -> dict | None:
    """The main module among `modules` (dicts with name/module_id), `counted(m)` giving its size where names tie."""
    candidates = [m for m in modules if is_main_module(framework, m.get("name"))]
    if framework == "torch_xla":
        # Every PyTorch/XLA graph is a SyncTensorsGraph; the training step (forward, backward, update) is the largest.
        candidates.sort(key=lambda m: -(counted(m) or 0))
    return candidates[0] if candidates else None


# A line of a job's stderr that states why it died (XLA's fatal log lines, Python's exception line).
JOB_ERROR = re.compile(r"Unknown flags|^F\d{4} |Check failed|^\w*(Error|Exception)\b|error:", re.I)


def _last_line(text: str) -> str:
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    return _shorten(lines[-1] if lines else "")


def _shorten(line: str, limit: int = 160) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _json_out(proc: subprocess.CompletedProcess):
    with contextlib.suppress(ValueError):
        return json.loads(proc.stdout)
    return None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class VersionRun:
    """The cells of one version, run one after another in the version's own store under `work`."""

    def __init__(self, version: Version, work: Path):
        self.version, self.folder = version, work / version.key
        self.store = self.folder / "store"
        self.result = VersionResult(version.key)

    def xlarun(self, *args: str, python: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        """xlarun of this checkout, under .venv (default) or another venv's python."""
        env = dict(os.environ)
        env.pop("XLARUN_STORE", None)
        env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [str(python or sys.executable), "-m", "xlarun", *args, "--store", str(self.store)]
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=self.folder)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"timed out after {timeout:.0f} s")

    def write_spec(self) -> Path:
        """The framework's spec from configs/, run by this version's python."""
        import yaml  # .venv has it (an xlarun dependency)

        data = yaml.safe_load(self.version.spec.read_text())
        data["name"] = f"compat-{self.version.key}"
        data["script"] = str((self.version.spec.parent / data["script"]).resolve())
        data["python"] = str(venv_python(self.version.key))
        # Snapshots (module + real arguments + result) let replay compare with what the version computed itself.
        data.setdefault("dump", {}).update(formats=["text", "proto"], snapshots=True)
        path = self.folder / "spec.yaml"
        path.write_text(
            f"# {self.version.key}: {self.version.spec.relative_to(REPO)} run by that version's venv\n"
            + yaml.safe_dump(data, sort_keys=False)
        )
        return path

    def run(self) -> VersionResult:
        started = time.monotonic()
        r = self.result
        if self.folder.exists():
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        r.python, r.framework_version = self._versions()
        proc = self.xlarun("capture", str(self.write_spec()), "--json", "-q", "--top", "0", timeout=900)
        captured = _json_out(proc)
        run_id = (captured or {}).get("run_id") or (captured or {}).get("id")
        if proc.returncode == 0:
            r.cells["capture"] = Cell("ok", self._capture_value(captured))
        else:
            error = ((captured or {}).get("manifest") or {}).get("error")
            job = self._job_error(run_id)
            reason = "; ".join(x for x in (error or _last_line(proc.stderr), f"job: {job}" if job else "") if x)
            r.cells["capture"] = Cell("fail", f"exit {proc.returncode}", reason)
        r.run_id = run_id or self._latest_run()
        main = None
        if r.run_id:  # a failed job is archived all the same: its modules and files still get their cells
            main = self.cell_main_first()
            self.cell_unknown()
        for column, python in (("replay_own", venv_python(self.version.key)), ("replay_xlarun", None)):
            if column == "replay_own" and self.version.framework != "jax":
                r.cells[column] = Cell("n/a", "no jaxlib")
            elif main is None:
                r.cells[column] = Cell("fail", "", "no main module to replay")
            else:
                r.cells[column] = self.cell_replay(main, python)
        r.cells["render"] = self.cell_render(main) if main else Cell("fail", "", "no main module to render")
        for column in COLUMNS:
            r.cells.setdefault(column, Cell("fail", "", "nothing captured"))
        r.seconds = round(time.monotonic() - started, 1)
        return r

    def _job_error(self, run_id: str | None) -> str | None:
        """The job's own last error line (a failed job's real cause, e.g. XLA refusing a flag)."""
        if not run_id:
            return None
        lines = self.xlarun("logs", run_id, "--stream", "stderr").stdout.splitlines()
        errors = [line for line in lines if JOB_ERROR.search(line)]
        return _last_line(errors[-1]) if errors else None

    def _versions(self) -> tuple[str, str]:
        dist = {"jax": "jaxlib", "tensorflow": "tensorflow-cpu", "torch_xla": "torch_xla"}[self.version.framework]
        code = f"import importlib.metadata as m, platform; print(platform.python_version(), m.version({dist!r}))"
        proc = subprocess.run([str(venv_python(self.version.key)), "-c", code], capture_output=True, text=True, timeout=120)
        return tuple(proc.stdout.split()) if proc.returncode == 0 else ("?", "?")

    def _latest_run(self) -> str | None:
        runs = _json_out(self.xlarun("runs", "--json"))
        items = runs.get("runs", []) if isinstance(runs, dict) else (runs or [])
        return (items[-1].get("run_id") or items[-1].get("id")) if items else None

    @staticmethod
    def _capture_value(captured: dict | None) -> str:
        if not captured:
            return ""
        files = (captured.get("manifest") or {}).get("files")
        files = len(files) if isinstance(files, (list, dict)) else files
        modules = len(captured.get("modules") or [])
        return f"{modules} module{'s' * (modules != 1)}, {files} files"

    def cell_main_first(self) -> dict | None:
        r = self.result
        listing = self.xlarun("modules", r.run_id, "--json")
        modules = (_json_out(listing) or {}).get("modules")
        if listing.returncode != 0 or modules is None:
            r.cells["main_first"] = Cell("fail", "", _last_line(listing.stderr) or "no module listing")
            return None
        xla, problem = self.xla_view()
        # which SyncTensorsGraph is the training step is decided by XLA's counts, not by the ranking under test
        main = main_of(self.version.framework, modules, lambda m: xla.get(m["module_id"], {}).get("instr_before"))
        if main is None:
            r.cells["main_first"] = Cell(
                "fail", "", f"no main module among {len(modules)}: {', '.join(str(m['name']) for m in modules[:4])}"
            )
            return None
        r.main_module = main["name"]
        counts = "/".join("–" if main.get(k) is None else str(main[k]) for k in ("instr_before", "instr_after"))
        uncounted = [m for m in modules if m.get("instr_before") is None and "before_optimizations" in (m.get("stages") or [])]
        problems = []
        if modules[0]["module_id"] != main["module_id"]:
            problems.append(f"{modules[0]['name']} ranked first")
        if uncounted:
            error = next((m.get("parse_error") for m in uncounted if m.get("parse_error")), None)
            problems.append(
                f"{len(uncounted)}/{len(modules)} modules without counts" + (f" ({_shorten(error, 110)})" if error else "")
            )
        if main.get("instr_before") is None and main.get("instr_after") is None:
            problems.append("main module has no counts")
        said = xla.get(main["module_id"], {})
        if problem or any(main.get(k) != said.get(k) for k in ("instr_before", "instr_after")):
            counted = "/".join("–" if said.get(k) is None else str(said[k]) for k in ("instr_before", "instr_after"))
            problems.append(problem or f"XLA's parser counts {counted}")
        short = _short_module_name(main["name"])
        r.cells["main_first"] = Cell("fail" if problems else "ok", f"{short} {counts}", "; ".join(problems) or None)
        return main

    def xla_view(self) -> tuple[dict[int, dict], str | None]:
        """{module_id: XLA's own facts} for this version's run (exported under the version's folder), or a problem."""
        exported = self.folder / "files"
        if not exported.is_dir():
            proc = self.xlarun("export", self.result.run_id, str(exported), "--no-logs")
            if proc.returncode != 0:
                return {}, f"cannot export the run: {_last_line(proc.stderr)}"
        try:
            _by, ranked, errors = xla_modules(self.version, exported)
        except CompatError as exc:
            return {}, str(exc)
        problem = f"XLA's parser refused {len(errors)} dump(s): {_shorten(next(iter(errors.values())), 80)}" if errors else None
        return {m["module_id"]: m for m in ranked}, problem

    def cell_unknown(self) -> None:
        proc = self.xlarun("files", self.result.run_id, "--kind", "unknown", "--json")
        files = (_json_out(proc) or {}).get("files")
        if proc.returncode != 0 or files is None:
            self.result.cells["unknown_files"] = Cell("fail", "", _last_line(proc.stderr) or "no file listing")
        elif not files:
            self.result.cells["unknown_files"] = Cell("ok", "0")
        else:
            names = [f["path"] for f in files]
            name = names[0] if len(names[0]) <= 90 else "..." + names[0][-87:]  # the end of a name is what tells it apart
            self.result.cells["unknown_files"] = Cell("fail", str(len(names)), f"e.g. {name}")

    def cell_replay(self, main: dict, python: Path | None) -> Cell:
        ref = f"{self.result.run_id}/module_{main['module_id']:04d}"
        proc = self.xlarun("replay", ref, "--json", "-q", python=python, timeout=600)
        out = _json_out(proc) or {}
        verdict = out.get("verdict")
        if proc.returncode == 0 and verdict == "match":
            return Cell("ok", f"match ({out.get('input_kind') or out.get('arguments') or 'fake'})")
        if proc.returncode == 0:  # ran, but nothing said it computed the right thing
            if not any("snapshot" in p.name for p in (self.folder / "files").glob(f"*module*{main['name']}*")):
                # no recorded result: the best check left is XLA's own, against a second compile on the reference platform
                again = self.xlarun("replay", ref, "--json", "-q", "--reference-platform", "cpu", python=python, timeout=600)
                second = _json_out(again) or {}
                if again.returncode == 0 and second.get("verdict") == "match":
                    return Cell("ok", "match (no snapshot: fake data, against --reference-platform cpu)")
                return Cell(
                    "fail",
                    str(second.get("verdict") or verdict or "ran"),
                    f"{self.version.framework} wrote no snapshot (real arguments and result) to compare with",
                )
            said = (out.get("log") or "").strip().splitlines()
            return Cell(
                "fail", str(verdict or "ran"), _shorten(said[-1].removeprefix("ran; ") if said else "nothing to compare with")
            )
        return Cell(
            "fail", f"exit {proc.returncode}", _shorten(out.get("error") or _last_line(proc.stderr) or _last_line(proc.stdout))
        )

    def cell_render(self, main: dict) -> Cell:
        target = self.folder / "main.svg"
        proc = self.xlarun("render", f"{self.result.run_id}/module_{main['module_id']:04d}", "-o", str(target), timeout=300)
        if proc.returncode == 0 and target.is_file() and target.stat().st_size:
            return Cell("ok", f"{target.stat().st_size // 1024} KiB svg")
        return Cell("fail", f"exit {proc.returncode}", _last_line(proc.stderr) or _last_line(proc.stdout))


def _short_module_name(name: str) -> str:
    """a_inference_train_step_123__XlaMustCompile_true_config_proto_... -> a_inference_train_step_123 (for the table)."""
    return name.split("__XlaMustCompile")[0]


def markdown_table(results: list[dict]) -> str:
    head = ("version", "python", *HEADINGS, "seconds")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [Cell(**r["cells"][c]).markdown() for c in COLUMNS]
        lines.append("| " + " | ".join([r["key"], r["python"], *cells, f"{r['seconds']:.0f}"]) + " |")
    return "\n".join(lines)


def run_matrix(keys: list[str], work: Path, json_file: Path | None) -> list[dict]:
    work.mkdir(parents=True, exist_ok=True)
    document = {"date": _now(), "commit": _git_commit(), "command": "scripts/compat.py run " + " ".join(keys), "versions": []}
    earlier = work / "matrix.json"  # versions not run now keep their last results (each carries its date)
    kept = {v["key"]: v for v in json.loads(earlier.read_text())["versions"]} if earlier.is_file() else {}
    for key in keys:
        status = build_venv(key)  # a missing venv is a set-up problem, not a red cell
        log(f"{key}: venv {status}; running the matrix cells")
        result = VersionRun(VERSIONS[key], work).run()
        document["versions"].append(asdict(result))
        log(f"{key}: " + ", ".join(f"{c} {result.cells[c].status}" for c in COLUMNS) + f" ({result.seconds:.0f} s)")
        if json_file:
            json_file.write_text(json.dumps(document, indent=2) + "\n")
        kept[key] = document["versions"][-1]
        merged = dict(document, versions=[kept[k] for k in VERSIONS if k in kept])
        earlier.write_text(json.dumps(merged, indent=2) + "\n")
    return document["versions"]


def _git_commit() -> str | None:
    proc = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or None


# ---- fixtures -----------------------------------------------------------------------------------------------------

# What the README ranks modules by first (the rule itself; the counts it is applied to come from XLA's parser).
from xlarun.store.rows import COMPUTE_OPCODES  # noqa: E402

STAGE_DUMP = re.compile(
    r"^module_(?P<id>\d+)\.(?P<name>.+)\.(?P<stage>before_optimizations|(?:[\w.]+_)?after_optimizations)\.txt$"
)

# Runs in a venv with jaxlib: XLA's own parser builds each module; instructions are counted in the HloModuleProto it
# serializes (HloModuleProto.computations = 3, HloComputationProto.instructions = 2, HloInstructionProto.opcode = 2),
# with no xlarun code involved.
COUNT_WITH_XLA = r"""
import json, sys
from jax._src.lib import xla_client as xc
import jaxlib
parse = getattr(getattr(xc, "hlo", None), "hlo_module_from_text", None) or getattr(xc._xla, "hlo_module_from_text")

def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = varint(buf, i)
        elif kind == 1:
            value, i = None, i + 8
        elif kind == 5:
            value, i = None, i + 4
        elif kind == 2:
            size, i = varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError(f"wire type {kind}")
        yield number, value

def varint(buf, i):
    shift = result = 0
    while True:
        byte = buf[i]; i += 1
        result |= (byte & 0x7F) << shift; shift += 7
        if byte < 0x80:
            return result, i

def count(path):
    proto = parse(open(path).read()).as_serialized_hlo_module_proto()
    opcodes = {}
    for n, comp in fields(proto):
        for m, instruction in fields(comp) if n == 3 else ():
            if m == 2:  # HloInstructionProto.opcode = 2
                opcode = next(v.decode() for k, v in fields(instruction) if k == 2)
                opcodes[opcode] = opcodes.get(opcode, 0) + 1
    return {"instructions": sum(opcodes.values()), "opcodes": opcodes}

out = {"jaxlib": getattr(jaxlib, "__version__", None) or __import__("jaxlib.version").version.__version__, "counts": {}, "errors": {}}
for path in sys.argv[1:]:
    try:
        out["counts"][path] = count(path)
    except Exception as exc:
        out["errors"][path] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
print(json.dumps(out))
"""


def count_with_xla(python: Path, paths: list[Path]) -> tuple[str, dict[str, dict], dict[str, str]]:
    """(who counted, {path: {"instructions": n, "opcodes": {...}}}, {path: error}) from the jaxlib of `python`."""
    proc = subprocess.run([str(python), "-c", COUNT_WITH_XLA, *map(str, paths)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise CompatError(f"counting with {python}'s XLA failed: {_last_line(proc.stderr)}")
    out = json.loads(proc.stdout)
    return f"jaxlib {out['jaxlib']} hlo_module_from_text", out["counts"], out["errors"]


def xla_facts(version: Version, paths: list[Path]) -> tuple[str, dict[str, dict], dict[str, str]]:
    """XLA's own count of each HLO text: the version's jaxlib for jax; TF and PyTorch/XLA ship no Python binding of
    XLA's parser, so jaxlib's in .venv reads theirs (and whatever the version's own parser refused)."""
    counted_by, counts, errors = "", {}, {}
    if version.framework == "jax":
        counted_by, counts, errors = count_with_xla(venv_python(version.key), paths)
    rest = [p for p in paths if str(p) not in counts]
    if rest:
        by, more, errors = count_with_xla(Path(sys.executable), rest)
        counted_by = f"{counted_by}; {by} for {len(more)} file(s)" if counted_by else by
        counts.update(more)
    return counted_by, counts, errors


def xla_modules(version: Version, exported: Path) -> tuple[str, list[dict], dict[str, str]]:
    """The modules of an exported run as XLA's own parser reads their stage dumps (instructions before and after
    optimization, compute ops), ranked by the README's rule: compute ops, then instructions."""
    stage_dumps = {p.name: p for p in sorted(exported.iterdir()) if STAGE_DUMP.match(p.name)}
    counted_by, counts, errors = xla_facts(version, list(stage_dumps.values()))
    modules: dict[int, dict] = {}
    for name, path in stage_dumps.items():
        match = STAGE_DUMP.match(name)
        module = modules.setdefault(
            int(match["id"]),
            {"module_id": int(match["id"]), "name": match["name"], "instr_before": None, "instr_after": None, "compute_ops": 0},
        )
        facts = counts.get(str(path))
        if facts is None:  # refused: in errors
            continue
        if match["stage"] == "before_optimizations":
            module["instr_before"] = facts["instructions"]
            module["compute_ops"] = sum(n for op, n in facts["opcodes"].items() if op in COMPUTE_OPCODES)
        else:
            module["instr_after"] = facts["instructions"]
    ranked = sorted(
        modules.values(), key=lambda m: (-m["compute_ops"], -(m["instr_before"] or m["instr_after"] or 0), m["module_id"])
    )
    return counted_by, ranked, errors


def export_run(key: str, work: Path, dest: Path) -> None:
    run = VersionRun(VERSIONS[key], work)
    if not run.store.is_dir():
        raise CompatError(f"{key}: no matrix store under {run.store}: run `scripts/compat.py run {key}` first")
    proc = run.xlarun("export", f"compat-{key}", str(dest), "--no-logs")
    if proc.returncode != 0:
        raise CompatError(f"{key}: export failed: {_last_line(proc.stderr)}")


def write_fixture(key: str, work: Path) -> tuple[Path, dict[str, bytes]]:
    """tests/fixtures/compat/<key>/: names.txt, expected.json; returns the folder and the stage dumps to store."""
    version = VERSIONS[key]
    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "run"
        export_run(key, work, exported)
        names = sorted(p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file())
        counted_by, ranked, errors = xla_modules(version, exported)
        if errors:
            raise CompatError(f"{key}: XLA's parser refused {len(errors)} dump(s): {next(iter(errors.items()))}")
        data = {n: (exported / n).read_bytes() for n in names if STAGE_DUMP.match(n)}
    main = main_of(version.framework, ranked, lambda m: m["instr_before"] or m["instr_after"])
    if main is None:
        raise CompatError(f"{key}: no main module among {[m['name'] for m in ranked]}")
    if ranked[0] is not main:
        log(f"{key}: by XLA's counts {ranked[0]['name']} outranks the main module {main['name']}: check the example")
    folder = FIXTURES / key
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "names.txt").write_text("\n".join(names) + "\n")
    expected = {
        "key": key,
        "framework": version.framework,
        "pins": list(version.pins),
        "counted_by": counted_by,
        "main_module": {"module_id": main["module_id"], "name": main["name"]},
        "modules": ranked,
        "made_by": "scripts/compat.py fixtures",
        "date": _now(),
    }
    (folder / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return folder, data


def write_fixtures(keys: list[str], work: Path, pack: str) -> None:
    written = [write_fixture(key, work) for key in keys]
    plain = sum(len(b) for _, data in written for b in data.values())
    if pack == "auto":  # measured over every version written now and those already there
        others = sum(fixture_text_size(folder) for folder in FIXTURES.glob("*/") if folder.name not in keys)
        pack = "tar" if plain + others > FIXTURE_TEXT_LIMIT else "text"
    for folder, data in written:
        if pack == "tar":
            with tarfile.open(folder / "dumps.tar.gz", "w:gz", compresslevel=9) as tar:
                for name in sorted(data):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = len(data[name]), 0, 0o644
                    tar.addfile(info, fileobj=_BytesReader(data[name]))
        else:
            (folder / "dumps").mkdir()
            for name, payload in data.items():
                (folder / "dumps" / name).write_bytes(payload)
        log(f"{folder.name}: {len(data)} stage dumps ({sum(map(len, data.values())) // 1024} KiB text) as {pack}")
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    log(
        f"fixture tree {FIXTURES.relative_to(REPO)}: {total / 1024 / 1024:.2f} MiB on disk ({plain / 1024 / 1024:.2f} MiB of dumps written now, as {pack})"
    )


def fixture_text_size(folder: Path) -> int:
    """Bytes of stage-dump text a version's fixture holds, plain or in its tarball."""
    if (folder / "dumps.tar.gz").is_file():
        with tarfile.open(folder / "dumps.tar.gz") as tar:
            return sum(member.size for member in tar.getmembers())
    return sum(p.stat().st_size for p in (folder / "dumps").glob("*"))


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at : end], min(end, len(self.data))
        return chunk


# ---- command line -------------------------------------------------------------------------------------------------


def choose_keys(keys: list[str], ends: bool, everything: bool, default: tuple[str, ...]) -> list[str]:
    unknown = [k for k in keys if k not in VERSIONS]
    if unknown:
        raise CompatError(f"unknown key(s) {', '.join(unknown)}; `scripts/compat.py keys` lists them")
    chosen = list(keys) + (list(ENDS) if ends else []) + (list(VERSIONS) if everything else [])
    return list(dict.fromkeys(chosen or default))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/compat.py",
        description=__doc__.split("\n\n")[0],
        epilog="Examples: `scripts/compat.py venvs --ends` (what CI needs) · `scripts/compat.py run --all` "
        "(the README's table, ~10 min with warm venvs) · `scripts/compat.py run jax-0.4.30 tf-2.16.2` · "
        "`scripts/compat.py fixtures --all` (after a run)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_keys(p: argparse.ArgumentParser, default: str) -> None:
        p.add_argument(
            "keys", nargs="*", metavar="KEY", help=f"versions such as jax-0.4.30, tf-2.16.2, torch_xla-2.9.0 (default: {default})"
        )
        p.add_argument("--ends", action="store_true", help=f"the versions CI tests for real: {', '.join(ENDS)}")
        p.add_argument("--all", action="store_true", dest="everything", help="every version (`keys` lists them)")

    venvs = sub.add_parser(
        "venvs",
        help="build the per-version venvs (cached; a complete venv is skipped)",
        description="Build the venvs under $XLARUN_COMPAT_DIR or ~/.cache/xlarun/compat/<key>. A venv is complete once "
        f"its marker {MARKER} is written (last); a venv without it is rebuilt. One builder per key (a lock).",
    )
    with_keys(venvs, "--all")
    run = sub.add_parser(
        "run",
        help="run the matrix and print the table (builds missing venvs first)",
        description="Per version, one after another: capture the example with that version's python, check that the "
        "main module is ranked first with counts, that no file is 'unknown', replay the main module with the "
        "version's own jaxlib and with xlarun's (.venv), and render it. Each version's store lies under "
        "WORK/<key>/store; the JSON goes to WORK/matrix.json (and --json FILE).",
    )
    with_keys(run, "--all")
    run.add_argument("--json", type=Path, dest="json_file", metavar="FILE", help="also write the results here")
    run.add_argument(
        "--work", type=Path, default=DEFAULT_WORK, help=f"where the stores go (default {DEFAULT_WORK.relative_to(REPO)})"
    )
    fixtures = sub.add_parser(
        "fixtures",
        help="write tests/fixtures/compat/<key>/ from the matrix's stores",
        description="For each version with a store under WORK: names.txt (every file the capture wrote), the stage "
        "dumps (before_optimizations and *_after_optimizations text), and expected.json (modules ranked "
        "with their instruction counts as XLA's own parser counts them, and the main module).",
    )
    with_keys(fixtures, "every version with a store under WORK")
    fixtures.add_argument("--work", type=Path, default=DEFAULT_WORK, help="where `run` left its stores")
    fixtures.add_argument(
        "--pack",
        choices=("auto", "text", "tar"),
        default="auto",
        help=f"dumps as plain files or one dumps.tar.gz per version (auto: a tarball above {FIXTURE_TEXT_LIMIT >> 20} MB of text in all)",
    )
    table = sub.add_parser("table", help="print the markdown table of a matrix JSON")
    table.add_argument("file", type=Path, nargs="?", default=DEFAULT_WORK / "matrix.json")
    sub.add_parser("keys", help="list the versions: key, Python, pins, and whether the venv is built")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "keys":
            for v in VERSIONS.values():
                state = "built" if is_complete(v.key) else "missing"
                print(f"{v.key:18} python {v.python}  {' '.join(v.pins):40} {state}{'  (CI end)' if v.key in ENDS else ''}")
        elif args.command == "venvs":
            started = time.monotonic()
            for key in choose_keys(args.keys, args.ends, args.everything, tuple(VERSIONS)):
                print(f"{key}: {build_venv(key)}", flush=True)
            log(f"venvs ready under {compat_root()} in {time.monotonic() - started:.1f} s")
        elif args.command == "run":
            results = run_matrix(
                choose_keys(args.keys, args.ends, args.everything, tuple(VERSIONS)), args.work.resolve(), args.json_file
            )
            print(markdown_table(results))
        elif args.command == "fixtures":
            stored = tuple(k for k in VERSIONS if (args.work / k / "store").is_dir())
            write_fixtures(choose_keys(args.keys, args.ends, args.everything, stored), args.work.resolve(), args.pack)
        elif args.command == "table":
            print(markdown_table(json.loads(args.file.read_text())["versions"]))
    except CompatError as exc:
        print(f"compat: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
