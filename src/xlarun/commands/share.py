"""``import`` and ``bundle``: bring a dump made elsewhere into the store, and pack one module for a bug report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xlarun.commands import JsonOption, RunOption, StoreOption, complete_module_ref, open_store

IMPORT_EPILOG = (
    "Refused (exit 2, nothing imported): names with '..', absolute paths or control characters (a NUL included), "
    "symbolic links, hard links to anything but the archive's own files (or, in a folder, to files outside it), "
    "devices, FIFOs, duplicate names, names that are not UTF-8, encrypted zip members, a .tar.zst needing a zstd "
    "window over 128 MiB, a file whose bytes are another kind than its name says, an _xlarun/manifest.json or "
    "bundle.json that is not what xlarun writes, and decompression bombs (past --max-bytes, --max-files or --max-ratio, "
    "judged as bytes are written). A store whose disk is too full (checked before unpacking) or read-only: exit 3."
)


def register(app: typer.Typer) -> None:
    app.command("import", epilog=IMPORT_EPILOG)(import_)
    app.command("bundle")(bundle)


def import_(
    source: Annotated[
        Path,
        typer.Argument(
            help="A dump folder, a .zip / .tar / .tar.gz / .tgz / .tar.zst of one, an `xlarun export` folder, or a bundle .zip.",
            show_default=False,
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option("--name", help="Name of the new run (default: the original run's name, else the folder or archive name)."),
    ] = None,
    max_bytes: Annotated[int, typer.Option("--max-bytes", help="Refuse a source that unpacks to more bytes than this.")] = 16
    << 30,
    max_files: Annotated[int, typer.Option("--max-files", help="Refuse a source with more files than this.")] = 200_000,
    max_ratio: Annotated[
        float, typer.Option("--max-ratio", help="Refuse an archive that unpacks to more than this times its size (past 64 MiB).")
    ] = 500.0,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Import an XLA dump made outside xlarun as a run of kind 'import', archived and indexed as a capture's
    dump is: `modules`, `show`, `find`, `replay`, `diff` and `report` then work on it.

    Examples: xlarun import /tmp/dump (what XLA_FLAGS=--xla_dump_to=/tmp/dump wrote) ·
    xlarun import ci-artifact.tar.zst · xlarun import bug-bundle.zip
    """
    from xlarun.console import print_json, say, warn
    from xlarun.navigate.desync import compare_processes
    from xlarun.present import print_modules, print_process_report
    from xlarun.share.import_dump import import_dump
    from xlarun.share.safe_unpack import UnpackLimits

    limits = UnpackLimits(max_total_bytes=max_bytes, max_files=max_files, max_ratio=max_ratio)
    result = import_dump(source, open_store(store, create=True), name=name, limits=limits)
    if as_json:
        print_json(result)
        return
    for line in result.warnings:
        warn(line)
    took = sum(result.timings_s.values())
    say(
        f"imported {result.source_kind} {source} as run [bold]{result.run_id}[/bold] in {took:.1f} s: {result.files} files, {len(result.modules)} modules"
    )
    if result.hosts:
        say("per-host folders as processes: " + ", ".join(f"{folder}/ -> process {k}" for folder, k in result.hosts.items()))
    print_modules(result.modules[:10], more=max(0, len(result.modules) - 10))
    print_process_report(compare_processes(result.modules))


def bundle(
    ref: Annotated[
        str,
        typer.Argument(
            autocompletion=complete_module_ref,
            help="Module REF (jit_train_step, module_0006, RUN/module_0006), or a module file: the STEM.hlo.txt or STEM.snapshot.pb `xlarun extract` wrote.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The .zip to write (default: <module name>.bundle.zip here; for a file, STEM.bundle.zip beside it).",
        ),
    ] = None,
    no_snapshot: Annotated[bool, typer.Option("--no-snapshot", help="Leave the snapshot (the real arguments) out.")] = False,
    snapshot_limit_mb: Annotated[
        float, typer.Option("--snapshot-limit-mb", help="Leave out a snapshot bigger than this.")
    ] = 20.0,
    passes: Annotated[bool, typer.Option("--passes", help="Add the per-pass dumps (many files).")] = False,
    with_sources: Annotated[
        bool, typer.Option("--with-sources", help="Add the Python files the module's metadata names (off: they may be private).")
    ] = False,
    redact_paths: Annotated[
        bool, typer.Option("--redact-paths", help="Replace your home and work folders in every file by same-length placeholders.")
    ] = False,
    store: StoreOption = None,
    run: RunOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write one .zip for a bug report: the module's before/after-optimizations dumps (text and proto),
    buffer assignment, memory report, debug_options, one snapshot, the redacted manifest and spec, and a
    README.md saying what each file is, the versions and flags, and the commands that replay it.

    The receiver runs `xlarun replay BUNDLE.zip` or `xlarun show BUNDLE.zip` (no import needed), or
    `xlarun import BUNDLE.zip`. A warning says what to drop when the zip passes 25 MB.

    What `xlarun extract` wrote bundles the same way, from its file: the bundle holds the extract's module and
    its snapshot (the run's values, and the instruction's value as the result), a few kilobytes.

    Examples: xlarun bundle jit_train_step · xlarun bundle RUN/module_0006 --passes -o bug.zip ·
    xlarun bundle extract_mul.2.snapshot.pb -o bug.zip
    """
    from xlarun.console import human_bytes, print_json, say, warn
    from xlarun.errors import InputError
    from xlarun.share.bundle import BundleOptions, make_bundle
    from xlarun.share.extract_bundle import FILE_SUFFIXES, is_module_file

    options = BundleOptions(
        snapshot=not no_snapshot,
        snapshot_limit_bytes=int(snapshot_limit_mb * (1 << 20)),
        passes=passes,
        with_sources=with_sources,
        redact_paths=redact_paths,
    )
    if ref.lower().endswith(FILE_SUFFIXES) and not Path(ref).exists():
        raise InputError(f"{ref}: no such file", "give the .hlo.txt or .snapshot.pb that `xlarun extract` wrote")
    if is_module_file(ref):
        from xlarun.share.extract_bundle import bundle_module_files

        if run is not None:
            raise InputError(f"--run names a run of the store, and {ref} is a file", "leave --run out to bundle the file")
        result = bundle_module_files(ref, output, options)
        source = f"the module in {ref}"
    else:
        from xlarun.navigate.refs import resolve_module

        the_store = open_store(store)
        module = resolve_module(the_store.index, ref, run=run)
        result = make_bundle(the_store, module, output, options)
        source = f"{module.label}, run {module.run_id}"
    if as_json:
        print_json(result)
        return
    for line in result.warnings:
        warn(line)
    say(f"wrote [bold]{result.path}[/bold]: {len(result.entries)} files, {human_bytes(result.zip_bytes)} ({source})")
    typer.echo(f"replay it anywhere: xlarun replay {result.path}")


def bundle_or_ref(ctx: typer.Context, ref: str, store: str | None, run: str | None) -> tuple[str | None, str, str | None]:
    """(store, REF, run) for a command given a REF: a bundle .zip becomes its module in a temporary store,
    imported for this command only and deleted when it ends (``ctx``, the running command's context, holds it);
    any other REF is returned unchanged."""
    if not (ref.lower().endswith(".zip") and Path(ref).is_file()):  # a REF, not a bundle: no bundle reader imported
        return store, ref, run
    from xlarun.share.bundle import opened_bundle

    the_store, module = ctx.with_resource(opened_bundle(ref))
    return str(the_store.root), module.ref, None
