"""The flags XLA's replay runners define, per XLA commit of each supported jaxlib: tests/fixtures/xla_runner_flags/.

Run it with the project's venv, given bare git mirrors (or clones) of openxla/xla and jax-ml/jax:

  .venv/bin/python scripts/xla_runner_flags.py --xla-git DIR --jax-git DIR [--out DIR] [TAG ...]

For every jax tag or commit (default: the releases of the compatibility matrix in scripts/compat.py; a tag the
mirror lacks: the nearest older one, recorded as standing in for it) it reads the XLA commit jaxlib was built from (third_party/xla/revision.bzl, older
workspace.bzl), then, at that commit, the names every `tsl::Flag("name", ...)` of each runner's source files
defines. One JSON file per (runner, XLA commit) records the jax tag(s), the commit, the files read, whether the
tool also appends XLA's DebugOptions flags (`--xla_*`), and the sorted flag names: facts only, no code.
tests/test_replay_runner_argv.py checks every command line xlarun builds against these lists.

The committed fixtures come from the default tags plus jax main at cec06d116c05 (the XLA of the newest jaxlib
tested), with a mirror of openxla/xla that holds every commit they name:

  .venv/bin/python scripts/xla_runner_flags.py --xla-git XLA.git --jax-git JAX.git --out /tmp/flags \
      jax-v0.4.30 jax-v0.4.38 jax-v0.5.0 jax-v0.5.3 jax-v0.6.2 jax-v0.7.2 jax-v0.8.3 jax-v0.9.2 jax-v0.10.2 \
      jax-v0.11.2 jax-v0.12.0 cec06d116c05f0d52adfceee3d3b730fdbcb0ce5
  diff -r /tmp/flags tests/fixtures/xla_runner_flags   # no difference
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "xla_runner_flags"

#: jax releases of the compatibility matrix (scripts/compat.py); a tag the mirror lacks falls back to the nearest older one.
JAX_TAGS = (
    "jax-v0.4.30",
    "jax-v0.4.38",
    "jax-v0.5.0",
    "jax-v0.5.3",
    "jax-v0.6.2",
    "jax-v0.7.2",
    "jax-v0.8.3",
    "jax-v0.9.2",
    "jax-v0.10.2",
    "jax-v0.11.2",
    "jax-v0.12.0",
)
#: Where each runner's flag list has lived (a file missing at a commit is skipped; at least one must exist).
RUNNER_SOURCES = {
    "run_hlo_module": ("xla/tools/run_hlo_module_main.cc", "xla/tools/run_hlo_module.h", "xla/tools/run_hlo_module.cc"),
    "hlo_runner_main": (
        "xla/tools/multihost_hlo_runner/hlo_runner_main.cc",
        "xla/tools/multihost_hlo_runner/hlo_runner_flags.cc",
        "xla/tools/multihost_hlo_runner/hlo_runner_flags.h",
    ),
}
_FLAG = re.compile(r'\b(?:tsl|tensorflow)::Flag\(\s*"([A-Za-z0-9_]+)"')
_DEBUG_OPTIONS = re.compile(r"\bAppendDebugOptionsFlags\s*\(")
_XLA_COMMIT = re.compile(r'^\s*XLA_COMMIT\s*=\s*"([0-9a-f]{40})"', re.MULTILINE)
_TAG_VERSION = re.compile(r"^jax-v(\d+(?:\.\d+)*)$")


def git_show(git_dir: Path, commit: str, path: str) -> str | None:
    """The file at ``commit``, or None when it does not exist there."""
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True, text=True, errors="replace"
    )
    return proc.stdout if proc.returncode == 0 else None


def jax_tags(jax_git: Path) -> list[str]:
    proc = subprocess.run(["git", f"--git-dir={jax_git}", "tag", "--list", "jax-v*"], capture_output=True, text=True, check=True)
    return [t for t in proc.stdout.split() if _TAG_VERSION.match(t)]


def _version(tag: str) -> tuple[int, ...]:
    match = _TAG_VERSION.match(tag)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def nearest_tag(wanted: str, available: list[str]) -> str | None:
    """``wanted`` if the mirror has it, else the newest available tag not newer than it."""
    if wanted in available:
        return wanted
    older = [t for t in available if _version(t) <= _version(wanted)]
    return max(older, key=_version) if older else None


def xla_commit(jax_git: Path, tag: str) -> str:
    """The XLA commit the jaxlib of ``tag`` was built from."""
    for path in ("third_party/xla/revision.bzl", "third_party/xla/workspace.bzl"):
        text = git_show(jax_git, tag, path)
        match = _XLA_COMMIT.search(text or "")
        if match:
            return match.group(1)
    raise SystemExit(f"{tag}: no XLA_COMMIT in third_party/xla/revision.bzl or workspace.bzl")


def commit_date(git_dir: Path, commit: str) -> str:
    """The commit's date (ISO 8601, UTC), which orders the fixtures."""
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", "log", "-1", "--format=%cd", "--date=iso-strict-local", commit],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TZ": "UTC"},
    )
    return proc.stdout.strip()


def runner_flags(xla_git: Path, commit: str, runner: str) -> dict:
    """The flag names ``runner`` defines at ``commit``, the files they came from, and its --xla_* support."""
    names: set[str] = set()
    read: list[str] = []
    debug_options = False
    for path in RUNNER_SOURCES[runner]:
        text = git_show(xla_git, commit, path)
        if text is None:
            continue
        read.append(path)
        names.update(_FLAG.findall(text))
        debug_options = debug_options or bool(_DEBUG_OPTIONS.search(text))
    if not names:
        raise SystemExit(f"{runner} at {commit}: no tsl::Flag found in {', '.join(RUNNER_SOURCES[runner])}")
    return {"sources": read, "appends_debug_options_flags": debug_options, "flags": sorted(names)}


def build(xla_git: Path, jax_git: Path, refs: list[str], out: Path) -> list[Path]:
    """Write one fixture per (runner, XLA commit); return their paths."""
    available = jax_tags(jax_git)
    by_commit: dict[str, dict[str, list[str]]] = {}
    for wanted in refs:
        ref = nearest_tag(wanted, available) if _TAG_VERSION.match(wanted) else wanted
        if ref is None:
            print(f"{wanted}: neither it nor an older tag is in {jax_git}; skipped", file=sys.stderr)
            continue
        seen = by_commit.setdefault(xla_commit(jax_git, ref), {"jax_refs": [], "stands_in_for": []})
        if ref not in seen["jax_refs"]:
            seen["jax_refs"].append(ref)
        if ref != wanted:
            print(f"{wanted}: not in the jax mirror, {ref} stands in for it", file=sys.stderr)
            seen["stands_in_for"].append(wanted)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for commit, seen in by_commit.items():
        for runner in RUNNER_SOURCES:
            record = {
                "runner": runner,
                "xla_commit": commit,
                "xla_commit_date": commit_date(xla_git, commit),
                **seen,
                **runner_flags(xla_git, commit, runner),
            }
            path = out / f"{runner}.{commit[:12]}.json"
            path.write_text(json.dumps(record, indent=1) + "\n")
            written.append(path)
            print(f"{path.name}: {len(record['flags'])} flags, for {', '.join(seen['jax_refs'])}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--xla-git", type=Path, required=True, help="git directory of an openxla/xla mirror or clone")
    parser.add_argument("--jax-git", type=Path, required=True, help="git directory of a jax-ml/jax mirror or clone")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the fixtures go (default: {OUT.relative_to(REPO)})")
    parser.add_argument(
        "refs", nargs="*", default=list(JAX_TAGS), help="jax tags or commits (default: the compatibility matrix's tags)"
    )
    args = parser.parse_args(argv)
    build(args.xla_git, args.jax_git, args.refs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
