"""One module replayed on several jaxlib releases, side by side (``xlarun replay REF --jaxlib A,B,C``).

Each release runs in its own venv, as ``scripts/compat.py venvs`` builds them (``jax-0.4.30`` ... under
``$XLARUN_COMPAT_DIR``, default ``~/.cache/xlarun/compat``; ``current`` is the running Python), with this
xlarun's code on its path: ``python -m xlarun replay FILE --json --save-outputs OUT.npz`` on the same file and
inputs (a snapshot's arguments, else the same seeded fake data). Each release's outputs are compared with the
first release's; the first release whose outputs move past the bounds is where the numbers changed (a user
upgrading jaxlib and seeing the loss move reads it here), and the run times say whether speed moved too.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from xlarun import deadline
from xlarun.errors import EnvironmentProblem, ExitCode, InputError
from xlarun.replay.compare import compare_outputs
from xlarun.replay.options import DEFAULT_ENGINE_TIMEOUT_S, ReplayOptions
from xlarun.replay.release_ops import moved_ops, op_each_ns

#: The file scripts/compat.py writes into a venv once it is complete.
COMPAT_MARKER = ".xlarun-compat-ok"
_JAXLIB = re.compile(r"jaxlib (\d[\w.]*)")
_RELEASE = re.compile(r"^(?:jax-)?(\d+\.\d+\.\d+(?:\.\d+)?)$")
Log = Callable[[str], None]


def compat_dir() -> Path:
    """Where the per-release venvs live: ``$XLARUN_COMPAT_DIR``, else ``~/.cache/xlarun/compat``."""
    explicit = os.environ.get("XLARUN_COMPAT_DIR")
    return Path(explicit) if explicit else Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "xlarun" / "compat"


def release_python(release: str) -> Path:
    """The Python of a release's venv (``0.4.30`` or ``jax-0.4.30``; ``current``: this one), or why there is none."""
    if release == "current":
        return Path(sys.executable)
    matched = _RELEASE.match(release.strip())
    if not matched:
        raise InputError(f"not a jaxlib release: {release!r}", "give versions like 0.4.30,0.8.3,current")
    key = f"jax-{matched.group(1)}"
    venv = compat_dir() / key
    python = venv / "bin" / "python"
    if not (venv / COMPAT_MARKER).is_file() or not python.exists():
        raise EnvironmentProblem(
            f"no venv for jaxlib {matched.group(1)} under {compat_dir()}",
            f"build it from xlarun's source checkout: python scripts/compat.py venvs {key}",
        )
    return python


@dataclass
class ReleaseReplay:
    """One release's replay: its verdict against what the file records, its timings, and its outputs against the first release's."""

    release: str
    jaxlib: str | None = None
    verdict: str | None = None
    error: str | None = None
    max_abs_error: float | None = None  # against the recorded result (or reference), as `replay` says
    compile_s: float | None = None
    median_run_s: float | None = None
    vs_first_abs: float | None = None
    vs_first_rel: float | None = None
    identical_to_first: bool | None = None
    moved: bool | None = None  # past the bounds against the first release's outputs
    #: Against the release listed before it: where between two releases the numbers changed.
    vs_previous_abs: float | None = None
    identical_to_previous: bool | None = None
    #: Its median run time over the first release's (1.8: 80% slower), and whether that is past --time-tolerance.
    time_vs_first: float | None = None
    time_moved: bool | None = None
    #: ``--profile``: each op's time per execution after the first (ns), as this release's replay timed it.
    op_each_ns: dict[str, float] | None = None
    #: ``--profile``: the ops whose time moved most against the first release (op, a_ns, b_ns, ratio, change_ns).
    moved_ops: list[dict] = field(default_factory=list)


@dataclass
class ReleaseReplays:
    """The releases side by side, and the first whose outputs moved."""

    file: str
    abs_error_bound: float
    rel_error_bound: float
    releases: list[ReleaseReplay] = field(default_factory=list)
    first_moved: str | None = None
    notes: list[str] = field(default_factory=list)
    #: A release whose median run time is more than this fraction off the first's has moved (None: times not judged).
    time_tolerance: float | None = None
    first_time_moved: str | None = None
    #: ``--profile``: the release whose op times the others' are compared with (the first that timed any).
    ops_against: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        """0: every release ran and none moved; 1: a release's outputs (or, with a time tolerance, its run time)
        moved; 3: a release could not replay."""
        if any(r.error for r in self.releases):
            return ExitCode.ENVIRONMENT
        return ExitCode.FAILED if self.first_moved or self.first_time_moved else ExitCode.OK

    def to_dict(self) -> dict:
        return asdict(self) | {"exit_code": int(self.exit_code)}

    def headline(self) -> str:
        first = self.releases[0].jaxlib or self.releases[0].release
        if self.first_moved:
            return f"the outputs move at jaxlib {self.first_moved} (against {first})" + self._time_words(first, ", and ")
        if any(r.error for r in self.releases):
            return "not every release could replay the module"
        same = all(r.identical_to_first for r in self.releases[1:])
        outputs = "every release gives the same outputs" + (", bit for bit" if same else " within the bounds")
        return outputs + self._time_words(first, "; ")

    def _time_words(self, first: str, joint: str) -> str:
        if self.time_tolerance is None:
            return ""
        if self.first_time_moved is None:
            return f"{joint}every run time is within {self.time_tolerance:.0%} of {first}'s"
        moved = next(r for r in self.releases if (r.jaxlib or r.release) == self.first_time_moved)
        return f"{joint}the run time moves at jaxlib {self.first_time_moved} ({moved.time_vs_first:.2f}x {first}'s median)"

    def changes(self) -> list[str]:
        """Each pair of neighbouring releases between which the outputs changed at all, bit for bit."""
        out = []
        for before, after in zip(self.releases, self.releases[1:], strict=False):
            if after.identical_to_previous is False:
                out.append(
                    f"{before.jaxlib or before.release} -> {after.jaxlib or after.release}: max abs {after.vs_previous_abs:.3g}"
                )
        return out


def replay_on_releases(
    path: Path, releases: list[str], options: ReplayOptions, log: Log | None = None, *, time_tolerance: float | None = None
) -> ReleaseReplays:
    """Replay ``path`` on each release (see the module doc); the first release is the one the others are compared with.
    ``time_tolerance``: a median run time more than this fraction off the first release's counts as moved too."""
    say = log or (lambda _line: None)
    if len(releases) < 2:
        raise InputError("--jaxlib needs at least two releases to compare", "e.g. --jaxlib 0.4.30,current")
    if time_tolerance is not None and not 0 < time_tolerance < 1e6:
        raise InputError(f"--time-tolerance must be a positive fraction, not {time_tolerance}", "e.g. 0.3: 30% slower or faster")
    pythons = [release_python(r) for r in releases]  # all found before any runs
    answer = ReleaseReplays(str(path), options.abs_error_bound, options.rel_error_bound, time_tolerance=time_tolerance)
    first_outputs: list | None = None
    previous: list | None = None
    with tempfile.TemporaryDirectory(prefix="xlarun-releases-") as tmp:
        for i, (release, python) in enumerate(zip(releases, pythons, strict=True)):
            say(f"replaying {path.name} on {release} ({python})")
            one, outputs = _replay_one(release, python, path, options, Path(tmp), i)
            answer.releases.append(one)
            if outputs is None:
                previous = None
                continue
            if previous is not None:
                one.identical_to_previous = _identical(outputs, previous)
                one.vs_previous_abs = compare_outputs(outputs, previous, 0.0, 0.0, "previous").max_abs_error
            previous = outputs
            if first_outputs is None and i == 0:
                first_outputs = outputs
                one.identical_to_first, one.moved, one.vs_first_abs, one.vs_first_rel = True, False, 0.0, 0.0
            elif first_outputs is not None:
                _against_first(one, outputs, first_outputs, options)
                if one.moved and answer.first_moved is None:
                    answer.first_moved = one.jaxlib or release
            say(
                f"{release}: {one.verdict or 'error'}"
                + (f", outputs vs the first: max abs {one.vs_first_abs:.3g}" if one.vs_first_abs is not None else "")
            )
    if answer.releases and answer.releases[0].error:
        answer.notes.append("the first release did not replay: nothing to compare the others with")
    judge_times(answer)
    if options.profile:
        _judge_ops(answer)
    return answer


def _judge_ops(answer: ReleaseReplays) -> None:
    """With --profile: each release's ops against those of the first release that timed any, most moved first."""
    timed = [one for one in answer.releases if one.op_each_ns is not None]
    for one in answer.releases:
        if one.op_each_ns is None and not one.error:
            answer.notes.append(
                f"{one.jaxlib or one.release} timed no op (its profiler does not trace the ops of its CPU client)"
            )
        elif timed and one is not timed[0] and one.op_each_ns is not None and timed[0].op_each_ns is not None:
            one.moved_ops = [
                move.to_dict() | {"against": timed[0].release} for move in moved_ops(timed[0].op_each_ns, one.op_each_ns)
            ]
    answer.ops_against = timed[0].release if timed else None


def judge_times(answer: ReleaseReplays) -> None:
    """Each release's median run time against the first's; with a tolerance, the first release past it."""
    first = answer.releases[0].median_run_s if answer.releases else None
    if not first:
        return
    for one in answer.releases:
        if one.median_run_s is None:
            continue
        one.time_vs_first = one.median_run_s / first
        if answer.time_tolerance is not None:
            one.time_moved = abs(one.time_vs_first - 1) > answer.time_tolerance
            if one.time_moved and answer.first_time_moved is None:
                answer.first_time_moved = one.jaxlib or one.release


def _replay_one(
    release: str, python: Path, path: Path, options: ReplayOptions, tmp: Path, index: int
) -> tuple[ReleaseReplay, list | None]:
    out = tmp / f"outputs-{index}.npz"
    argv = [str(python), "-m", "xlarun", "replay", str(path), "--json", "--quiet", "--store", str(tmp / "no-store")]
    argv += ["--save-outputs", str(out), "--inputs", options.inputs, "-n", str(options.iterations)]
    argv += ["--abs-error-bound", repr(options.abs_error_bound), "--rel-error-bound", repr(options.rel_error_bound)]
    argv += ["--seed", str(options.seed)] if options.seed is not None else []
    argv += ["--timeout", repr(options.timeout_s)] if options.timeout_s else []
    argv += ["--profile"] if options.profile else []
    package_root = str(Path(__file__).resolve().parents[2])  # this xlarun, whatever the venv has
    env = {
        **os.environ,
        "PYTHONPATH": package_root + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    }
    env.pop("XLARUN_STORE", None)
    one = ReleaseReplay(release)
    proc = deadline.run_within(argv, (options.timeout_s or DEFAULT_ENGINE_TIMEOUT_S) + 120, text=True, env=env)
    if proc.timed_out:  # the replay and its engine's child were killed
        one.error = "the replay did not end in time"
        return one, None
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        one.error = f"no result from {release}: {tail}"
        return one, None
    one.verdict, one.error = data.get("verdict"), _one_line(data.get("error"))
    one.max_abs_error, one.compile_s = data.get("max_abs_error"), data.get("compile_s")
    times = data.get("run_times_s") or []
    one.median_run_s = statistics.median(times) if times else None
    one.op_each_ns = op_each_ns(data.get("profile"))
    found = _JAXLIB.search(data.get("log") or "")
    one.jaxlib = found.group(1) if found else None
    if one.error or not out.is_file():
        one.error = one.error or "no outputs were written"
        return one, None
    with np.load(out) as saved:
        return one, [saved[k] for k in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


def _one_line(error: str | None) -> str | None:
    """A release's error as one line of its table: a traceback's last line (the exception), else the first."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return error
    return lines[-1] if lines[0].startswith("Traceback") else " ".join(lines)


def _against_first(one: ReleaseReplay, outputs: list, first: list, options: ReplayOptions) -> None:
    one.identical_to_first = _identical(outputs, first)
    comparison = compare_outputs(outputs, first, options.abs_error_bound, options.rel_error_bound, "first release's outputs")
    one.vs_first_abs, one.vs_first_rel, one.moved = comparison.max_abs_error, comparison.max_rel_error, not comparison.matched


def _identical(outputs: list, other: list) -> bool:
    return len(outputs) == len(other) and all(
        a.shape == b.shape and np.array_equal(a, b, equal_nan=True) for a, b in zip(outputs, other, strict=True)
    )
