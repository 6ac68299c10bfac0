"""Command modules of the ``xlarun`` CLI, one per group; each has ``register(app)``.

The option types every command shares are defined here so they read the same everywhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from xlarun.api import Store as ApiStore
    from xlarun.declared_options import Declared
    from xlarun.store.facade import LocalStore


def _store_of(ctx: typer.Context) -> Path:
    """The store a command line being completed names (--store typed before the Tab, else $XLARUN_STORE or ./.xlarun)."""
    from xlarun.store.runs import default_store_path

    given = ctx.params.get("store")
    return Path(given) if given else default_store_path()


def complete_run_ref(ctx: typer.Context, incomplete: str) -> list[str]:
    from xlarun.navigate.complete import complete_runs

    return complete_runs(_store_of(ctx), incomplete)


def complete_module_ref(ctx: typer.Context, incomplete: str) -> list[str]:
    from xlarun.navigate.complete import complete_modules

    return complete_modules(_store_of(ctx), incomplete)


def complete_stage(ctx: typer.Context, incomplete: str) -> list[str]:
    from xlarun.navigate.complete import complete_stages

    return complete_stages(_store_of(ctx), incomplete)


def complete_pass(ctx: typer.Context, incomplete: str) -> list[str]:
    from xlarun.navigate.complete import complete_passes

    return complete_passes(_store_of(ctx), incomplete)


# a str, not a Path: typer coerces Path parameters through pydantic, too slow to import for every command
RemoteReadOption = Annotated[
    str | None,
    typer.Option(
        "--remote",
        metavar="NAME",
        help="Work on the runs of this remote (a name or s3:// URL) instead of --store: found from their index objects, "
        "a file's blobs fetched when read and kept in a local cache.",
        show_default=False,
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", envvar="XLARUN_STORE", metavar="PATH", help="Run store folder (default ./.xlarun).", show_default=False
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]
RunOption = Annotated[
    str | None,
    typer.Option("--run", "-r", help="Run id, unique id prefix, spec name, or 'latest'.", autocompletion=complete_run_ref),
]
# --stage/--pass/--step/--format are read by xlarun.navigate.select, the same for every command
StageOption = Annotated[
    str | None,
    typer.Option(
        "--stage",
        "-s",
        help="before (before_optimizations, the default) or after (after_optimizations, cpu_after_optimizations, optimized).",
        autocompletion=complete_stage,
    ),
]
PassOption = Annotated[
    str | None,
    typer.Option(
        "--pass",
        "-p",
        help="The dump right after this pass (its first run that changed the module, else its first run; PIPELINE/PASS narrows it).",
        autocompletion=complete_pass,
    ),
]
StepOption = Annotated[
    int | None, typer.Option("--step", help="The per-pass dump with this step number (show's pass timeline lists them).")
]


def front_door(path: str | Path | None, create: bool = False, remote: str | None = None) -> ApiStore:
    """The Python front door's Store (``xlarun.open_store``) over the store a command works on: a command is a call
    into it, then a printer of :mod:`xlarun.present`."""
    from xlarun.api import Store

    return Store(open_store(path, create=create, remote=remote))


def open_store(path: str | Path | None, create: bool = False, remote: str | None = None) -> LocalStore:
    """The store a command works on (created only by commands that write); with ``remote``, that remote's local
    mirror, up to date with its runs (their small index objects only: blobs are fetched when read)."""
    if remote is not None:
        from xlarun.store.remote import find_remote
        from xlarun.store.remote_index import open_mirror

        return open_mirror(find_remote(remote))
    from xlarun.store.facade import LocalStore

    return LocalStore.open(path, create=create)


def store_path_or_mirror(path: str | None, remote: str | None) -> str | None:
    """``--store`` as given, or with ``--remote`` the path of that remote's mirror, brought up to date (for commands
    that open their store in several places, and child processes that open it again by its path)."""
    return path if remote is None else str(open_store(None, remote=remote).root)


@contextmanager
def json_on_failure(as_json: bool, document: Callable[[BaseException], dict]) -> Iterator[None]:
    """With ``--json``, whatever fails inside prints ``document(exc)`` as the command's one JSON document (a
    command's own keys plus :func:`xlarun.errors.error_document`'s), and the CLI's handler adds no second one."""
    try:
        yield
    except BaseException as exc:
        if as_json and not isinstance(exc, (typer.Exit, typer.Abort, SystemExit)):
            from xlarun.console import print_json
            from xlarun.errors import mark_json_reported

            print_json(document(exc))
            mark_json_reported(exc)
        raise


#: The default of a command's parameter that is a declared option (:func:`with_declared` gives it its type,
#: flags, help and default from :mod:`xlarun.declared_options`).
DECLARED: Any = object()

_Command = TypeVar("_Command", bound=Callable[..., Any])


def with_declared(declared: Iterable[Declared]) -> Callable[[_Command], _Command]:
    """Make the parameters of a command whose default is :data:`DECLARED` the options ``declared`` holds, where the
    command lists them (so ``--help`` keeps its order): typer reads each one's type, flags, help and default from
    its declaration. Every declared option must be such a parameter, and no other, or defining the command raises
    TypeError."""

    def build(command: _Command) -> _Command:
        options = {d.name: d for d in declared}
        signature = inspect.signature(command, eval_str=True)  # typer reads this signature as it is
        parameters, named = [], []
        for p in signature.parameters.values():
            if p.default is DECLARED:
                if p.name not in options:
                    raise TypeError(f"{command.__qualname__}: no option {p.name!r} is declared")
                d = options[p.name]
                p = p.replace(annotation=Annotated[d.type, typer.Option(*d.cli_flags, help=d.help)], default=d.default)
                named.append(p.name)
            parameters.append(p)
        if named != list(options):
            raise TypeError(f"{command.__qualname__} lists the declared options {named}, not {list(options)}")
        command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        return command

    return build
