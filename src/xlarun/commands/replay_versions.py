"""``xlarun replay REF --jaxlib A,B,C``: the module's most faithful file replayed on several jaxlib releases."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from xlarun.commands import open_store


def replay_versions_command(
    ref: str,
    jaxlib: str,
    options: Any,
    sink: Any,
    *,
    file: Any,
    store: Any,
    run: Any,
    as_json: bool,
    time_tolerance: float | None = None,
) -> int:
    """Replay on each release, print the table (or JSON); the exit code of :class:`ReleaseReplays`."""
    from xlarun.replay.releases import replay_on_releases

    releases = [r.strip() for r in jaxlib.split(",") if r.strip()]
    path = Path(ref)
    if path.is_file() and run is None:
        result = replay_on_releases(path, releases, options, sink, time_tolerance=time_tolerance)
    else:
        from xlarun.navigate.refs import resolve_module
        from xlarun.replay.choose import choose_replay_input

        the_store = open_store(store)
        module = resolve_module(the_store.index, ref, run=run)
        chosen = (
            file
            or choose_replay_input([(f.path, f) for f in module.files], read=lambda p: the_store.read_file(module.run_id, p)).path
        )
        with tempfile.TemporaryDirectory(prefix="xlarun-releases-module-") as tmp:
            for f in module.files:  # the module's dumps side by side, as XLA wrote them: replay finds its fallbacks
                if f.kind in ("hlo", "snapshot"):
                    (Path(tmp) / Path(f.path).name).write_bytes(the_store.read_file(module.run_id, f.path))
            result = replay_on_releases(Path(tmp) / Path(chosen).name, releases, options, sink, time_tolerance=time_tolerance)
            result.file = f"{module.ref}: {Path(chosen).name}"
    _print(result, as_json)
    return int(result.exit_code)


def _ns(value: float | None) -> str:
    from xlarun.present.times import duration_words

    return "(not there)" if value is None else duration_words(value)


def _print(result: Any, as_json: bool) -> None:
    from xlarun.console import print_json, print_table, say

    if as_json:
        print_json(result.to_dict())
        return

    def num(value: Any, scale: float = 1.0, fmt: str = ".3g") -> str:
        return "" if value is None else format(value * scale, fmt)

    rows = [
        (
            r.release,
            r.jaxlib or "",
            r.error or r.verdict or "",
            num(r.max_abs_error),
            "identical" if r.identical_to_first else num(r.vs_first_abs),
            "" if r.moved is None else ("MOVED" if r.moved else "within"),
            "" if r.identical_to_previous is None else ("identical" if r.identical_to_previous else num(r.vs_previous_abs)),
            num(r.compile_s, 1, ".3f"),
            num(r.median_run_s, 1e3, ".3f"),
            "" if r.time_vs_first is None else f"{r.time_vs_first:.2f}x" + (" MOVED" if r.time_moved else ""),
        )
        for r in result.releases
    ]
    print_table(
        ("release", "jaxlib", "verdict", "max abs err", "vs first", "", "vs previous", "compile s", "run ms", "run vs first"),
        rows,
        title=f"{result.file} on {len(rows)} releases (bounds abs {result.abs_error_bound:g} or rel {result.rel_error_bound:g})",
        right=("max abs err", "vs first", "vs previous", "compile s", "run ms", "run vs first"),
    )
    first = next((r for r in result.releases if r.release == result.ops_against), None)
    for r in result.releases:
        if r.moved_ops and first is not None:
            a, b = first.jaxlib or first.release, r.jaxlib or r.release
            print_table(
                ("op", f"each on {a}", f"each on {b}", "ratio"),
                [
                    (m["op"], _ns(m["a_ns"]), _ns(m["b_ns"]), "" if m["ratio"] is None else f"{m['ratio']:.2f}x")
                    for m in r.moved_ops
                ],
                title=f"ops that moved most from {a} to {b} (time per execution after the first)",
                right=(f"each on {a}", f"each on {b}", "ratio"),
            )
    changed = result.changes()
    if changed:
        say("outputs change between: " + "; ".join(changed))
    for note in result.notes:
        say(f"[dim]{note}[/dim]")
    say(result.headline())
