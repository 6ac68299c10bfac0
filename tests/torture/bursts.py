"""Bursts of stop signals sent to ``xlarun capture`` of a cheap job (no JAX): the tests in test_signals.py
and `python -m tests.torture.bursts 500` (the long run) use it. A burst is 2 to 6 signals, SIGINT, SIGTERM and SIGHUP mixed, 0 to 5 ms
apart, sent once the job runs (or, at random, while xlarun is still starting); one in five reaches xlarun
while it is stopped (SIGSTOP before, SIGCONT after), so its signals arrive at once, as under load.

xlarun runs here as a user runs it: without the suite's coverage start-up hook. That hook (a ``.pth`` file that
coverage's ``patch = subprocess`` installs) imports coverage inside a bare ``try/except``, so a Ctrl-C landing
there during start-up is swallowed and the capture goes on as if no signal was sent: under load, where the few
SIGINTs of a burst reach Python as one, that was the one hang a CI run saw in 100 bursts (then the job ran out
its 60 s). A signal that lands in Python's own start-up, before any xlarun code, ends it as Python decides: a
KeyboardInterrupt raised while ``site`` or ``runpy`` is imported exits 1 with its traceback, which counts as
clean here. One that some library swallows later is remembered by the CLI and still stops the capture
(``xlarun.interrupts.remember_early_interrupts``)."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHEAP_JOB = """
import os, sys, time
print("ready", os.getpid(), flush=True)
time.sleep(60)
"""

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


#: The variables that make a Python process start coverage (see the module doc): not passed to xlarun here.
COVERAGE_HOOKS = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")


def burst_env(store: Path) -> dict[str, str]:
    """The environment xlarun runs in for a burst: the caller's, with ``store``, minus coverage's start-up hook."""
    env = {key: value for key, value in os.environ.items() if key not in COVERAGE_HOOKS}
    env.update(XLARUN_STORE=str(store), PYTHONUNBUFFERED="1")
    return env


def _stopped_in_python_startup(returncode: int, stderr: str) -> bool:
    """Python itself met a KeyboardInterrupt before running any xlarun code, in one of the three ways it has:
    a traceback through its own start-up (``site``, or ``runpy`` finding the module for ``-m``), exit 1; a
    fatal error while it initializes (``Fatal Python error: init_sys_streams: ...``, ``init_import_site``,
    ``init_fs_encoding``), exit 1 or aborted; or the interrupt raised inside a callback of its import machinery,
    which Python reports as ``Exception ignored in: ...`` and swallows, so the program then runs to its end
    (exit 0: the signal was lost by Python, nothing of xlarun's ran under it). Never with one xlarun frame."""
    own = f"{os.sep}xlarun{os.sep}" in stderr
    if own or "KeyboardInterrupt" not in stderr:
        return False
    traceback = returncode == 1 and ("<frozen site>" in stderr or "runpy" in stderr)
    fatal = returncode in (1, -signal.SIGABRT) and re.search(r"^Fatal Python error: init_\w+: ", stderr, re.M) is not None
    return traceback or fatal or (returncode == 0 and SWALLOWED.search(stderr) is not None)


# an interrupt Python raised in a callback of its own frozen import machinery and then ignored
SWALLOWED = re.compile(
    r"^Exception ignored in: <function _\w+(?:\.<locals>\.\w+)? at 0x[0-9a-f]+>\n"
    r"Traceback \(most recent call last\):\n"
    r"(?:  File \"<frozen [\w.]+>\", line \d+, in \w+\n)+"
    r"KeyboardInterrupt: ?$",
    re.M,
)


def report_hang(proc: subprocess.Popen, what: str) -> None:
    """Kill a hung xlarun and print what the hang looked like, for whoever reads the failure: its threads'
    states, the signals pending, the ends of its output."""
    try:
        status = [
            line
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith(("State", "Threads", "Sig", "ShdPnd"))
        ]
    except OSError as exc:
        status = [str(exc)]
    proc.kill()
    out, err = proc.communicate()
    print(f"[hung] {what}; {status}; stdout ...{out[-300:]!r}; stderr ...{err[-1500:]!r}", file=sys.stderr)


def one_burst(folder: Path, rng: random.Random, hang_s: float = 60) -> str:
    """Run one capture, send it one burst; returns ``clean``, ``hung`` (killed after ``hang_s``),
    ``orphaned`` (the job outlived xlarun) or ``lost`` (a bad exit code or a staging folder left behind)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.py").write_text(CHEAP_JOB)
    (folder / "spec.yaml").write_text("name: burst\nscript: job.py\n")
    env = burst_env(folder / "s")
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "capture", str(folder / "spec.yaml")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in STOPS],
    )
    job_pid = None
    if rng.random() < 0.9:  # most bursts land while the job runs; some while xlarun starts
        line = proc.stdout.readline()
        if line.startswith("ready"):
            job_pid = int(line.split()[1])
    burst = [rng.choice(STOPS) for _ in range(rng.randint(2, 6))]
    # some bursts reach xlarun while it is not running (SIGSTOP ... SIGCONT), as on a loaded machine: the
    # signals then arrive together and Python runs its handler once for each kind
    frozen = rng.random() < 0.2
    if frozen:
        proc.send_signal(signal.SIGSTOP)
    for sig in burst:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            break
        time.sleep(rng.uniform(0, 0.005))
    if frozen:
        try:
            proc.send_signal(signal.SIGCONT)
        except ProcessLookupError:
            pass
    try:
        _, err = proc.communicate(timeout=hang_s)
    except subprocess.TimeoutExpired:
        sent = f"sent {[s.name for s in burst]}{' while stopped' if frozen else ''}, job {job_pid} alive={_alive(job_pid) if job_pid else None}"
        report_hang(proc, f"{folder.name}: {sent}")
        return "hung"
    if job_pid is not None:
        deadline = time.monotonic() + 5
        while _alive(job_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(job_pid):
            os.kill(job_pid, signal.SIGKILL)
            return "orphaned"
    staging = folder / "s" / "staging"
    left = [p for p in staging.iterdir()] if staging.is_dir() else []
    # the exit code a shell expects for one of the signals sent (the first acted on, or the one that killed it)
    expected = {128 + int(s) for s in burst} | {-int(s) for s in burst}
    if left or (proc.returncode not in expected and not _stopped_in_python_startup(proc.returncode, err)):
        sent = f"sent {[s.name for s in burst]}{' while stopped' if frozen else ''}"
        print(
            f"[lost] {folder.name}: {sent}; exit {proc.returncode}; left {[p.name for p in left]}; stderr ...{err[-1500:]!r}",
            file=sys.stderr,
        )
        return "lost"
    return "clean"


def run_bursts(root: Path, count: int, seed: int, parallel: int = 4, hang_s: float = 60) -> dict[str, int]:
    """``count`` bursts, ``parallel`` at a time; the figures: tried, clean, lost, hung, orphaned."""
    rng = random.Random(seed)
    seeds = [rng.randrange(1 << 30) for _ in range(count)]
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        outcomes = list(pool.map(lambda i: one_burst(root / f"b{i:04d}", random.Random(seeds[i]), hang_s), range(count)))
    figures = {"tried": count}
    for kind in ("clean", "lost", "hung", "orphaned"):
        figures[kind] = outcomes.count(kind)
    return figures


def main() -> None:
    """``python -m tests.torture.bursts [COUNT] [SEED]``: the long run (500 bursts by default), figures printed."""
    import json
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xlarun-bursts-") as root:
        figures = run_bursts(Path(root), count, seed)
    figures["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
