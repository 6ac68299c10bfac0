"""The ``xlarun`` command: parses arguments, calls the library, prints. Nothing else lives here.

Commands live in ``xlarun.commands.<module>``; each module has ``register(app)`` that adds its
commands to a Typer app. To add a command, register it in such a module and name it in ``COMMANDS`` (in the
order ``xlarun --help`` lists it). A command is built from its function, and its module imported, only when it is
run or its help is shown: building all of them took more time than ``xlarun runs`` itself. Command modules
import the library lazily (inside the command) for the same reason.
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import typer
import typer.core

from xlarun.errors import EnvironmentProblem, ExitCode, XlarunError, disk_trouble, error_document, json_reported

#: Every command, in the order ``xlarun --help`` lists it, and the module of ``xlarun.commands`` that registers it
#: (tests/test_cli_lazy.py holds this table to what the modules register).
COMMANDS = {
    "capture": "capture", "validate": "capture", "schema": "capture", "flags": "capture",
    "batch": "batch",
    "runs": "navigate", "modules": "navigate", "files": "navigate", "show": "navigate", "cat": "navigate",
    "find": "navigate", "explain": "navigate", "logs": "navigate", "export": "navigate",
    "profile": "profile",
    "memory": "memory",
    "replay": "replay", "convert": "replay",
    "bisect": "bisect", "extract": "bisect",
    "rm": "housekeeping", "gc": "housekeeping", "recover": "housekeeping", "reindex": "housekeeping",
    "check": "housekeeping",
    "doctor": "doctor",
    "render": "see", "diff": "see", "report": "see",
    "import": "share", "bundle": "share",
    "push": "remote", "pull": "remote",
    "view": "view",
    "worker": "ray", "collect": "ray",
    "completion": "completion",
    "remote": "remote",
    "images": "images",
}  # fmt: skip
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))

EXIT_CODES_HELP = """
Exit codes: 0 ok · 1 the answer is no (the job failed or made no dump, a replay miscompared, bisect found a culprit,
find matched nothing, check found damage) · 2 bad usage, spec or input ·
3 a component xlarun drives failed or is missing (Docker, graphviz, jaxlib, a replay engine) ·
4 a bug in xlarun (a crash log is written) · 124 the job hit its timeout · 129 SIGHUP · 130 interrupted (Ctrl-C) · 143 SIGTERM
(the run is archived as interrupted).
"""


#: what :func:`plain_value` answers for a value typer must coerce itself
TYPER_COERCES = object()
_DECIMAL = re.compile(r"\s*[+-]?[0-9]+\s*")


def plain_value(param: typer.core.TyperOption | typer.core.TyperArgument, value: Any) -> Any:
    """``value`` as typer would make it, when that needs no coercion: a missing value, a ``str`` / ``list[str]``
    parameter given strings, a default of its own type, a plain decimal ``int`` within its bounds, a ``Path`` with
    no checks asked. Anything else (other numbers, paths with checks, choices, a ``parser=``) is
    :data:`TYPER_COERCES`, and gets typer's coercion and messages. typer 0.29 coerces every value through a
    pydantic TypeAdapter, and importing pydantic costs more than the rest of ``xlarun modules`` (~0.1 s)."""
    described = param.type_descriptor
    info, annotation = described.parameter_info, described.annotation
    if value is None:
        return () if param.multiple or param.nargs == -1 else None
    if info.parser is not None or described.is_choice or described.is_file:
        return TYPER_COERCES
    if isinstance(value, str) and annotation is str:
        return value
    strings = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
    if annotation == list[str] and strings:
        return list(value)
    low, high = info.min, info.max

    def inside(number: float) -> bool:  # within the option's bounds, so typer would take it as it is
        return not info.clamp and (low is None or number >= low) and (high is None or number <= high)

    if annotation in (int, bool, float) and type(value) is annotation and inside(value):
        return value  # a default, or a flag click already made a bool
    if annotation is int and isinstance(value, str) and _DECIMAL.fullmatch(value) and inside(int(value)):
        return int(value)  # what pydantic makes of it; anything else (and out of bounds) gets typer's own message
    if annotation is Path and isinstance(value, str) and _plain_path(info, value):
        return Path(value)
    return TYPER_COERCES


def _plain_path(info: Any, value: str) -> bool:
    """A path typer would take as it is: no checks asked of it but readability, which holds."""
    if not value or "\0" in value or info.exists or info.resolve_path or info.writable or info.allow_dash:
        return False
    if not (info.file_okay and info.dir_okay):
        return False
    return not (info.readable and os.path.lexists(value) and not os.access(value, os.R_OK))


def _process_plain(
    param: typer.core.TyperOption | typer.core.TyperArgument, ctx: Any, value: Any, typers: Callable[[Any, Any], Any]
) -> Any:
    """``process_value`` (click's hook for a parameter's value) that answers a plain value itself, and hands
    the rest, and a missing required one, to ``typers`` (typer's own)."""
    plain = plain_value(param, value)
    if plain is TYPER_COERCES or (param.required and param.value_is_missing(plain)):
        return typers(ctx, value)
    return plain if param.callback is None else param.callback(ctx, param, plain)


class PlainOption(typer.core.TyperOption):
    """A typer option whose plain values need no pydantic (:func:`plain_value`)."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        return _process_plain(self, ctx, value, super().process_value)


class PlainArgument(typer.core.TyperArgument):
    """A typer argument whose plain values need no pydantic (:func:`plain_value`)."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        return _process_plain(self, ctx, value, super().process_value)


def _plain(param: Any) -> Any:
    """``param`` taking plain values without pydantic, when typer built it (click's own are left alone).
    ``XLARUN_TYPER_PATCH=0`` leaves typer's coercion alone (bench/navigation.py compares the two)."""
    if os.environ.get("XLARUN_TYPER_PATCH") == "0":
        return param
    if type(param) is typer.core.TyperOption:
        param.__class__ = PlainOption  # same fields, one method more: typer builds the parameter, xlarun types it
    elif type(param) is typer.core.TyperArgument:
        param.__class__ = PlainArgument
    return param


class PlainCommand(typer.core.TyperCommand):
    """A typer command (``@app.command(cls=PlainCommand)``) whose options and arguments, ``--help`` included,
    take plain values without pydantic (:func:`plain_value`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _plain(param)

    def get_help_option(self, ctx: Any) -> Any:
        return _plain(super().get_help_option(ctx))  # built while parsing


class PlainGroup(typer.core.TyperGroup):
    """A typer group (``typer.Typer(cls=PlainGroup)``) whose own options take plain values, as :class:`PlainCommand`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _plain(param)

    def get_help_option(self, ctx: Any) -> Any:
        return _plain(super().get_help_option(ctx))


def use_plain_values(registered: typer.Typer) -> None:
    """Build the commands and groups ``registered`` holds as :class:`PlainCommand` / :class:`PlainGroup` (those
    that ask for no class of their own)."""
    for command in registered.registered_commands:
        if command.cls in (None, typer.core.TyperCommand):  # typer's default
            command.cls = PlainCommand
    for group in registered.registered_groups:
        if group.cls in (None, typer.core.TyperGroup) or isinstance(group.cls, typer.models.DefaultPlaceholder):
            group.cls = PlainGroup
        if group.typer_instance is not None:
            use_plain_values(group.typer_instance)


class _LazyCommands(MutableMapping):
    """The root group's commands by name (``COMMANDS``' order), each built by typer from its function the first
    time it is looked up: ``xlarun runs`` builds ``runs`` alone, ``xlarun --help`` every one."""

    def __init__(self, table: dict[str, str], settings: dict) -> None:
        self._modules: dict[str, str] = dict(table)  # "": a command added built
        self._built: dict = {}
        self._registered: dict[str, typer.Typer] = {}
        self._settings = settings  # how the root app asks typer to build its commands

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            module = self._modules[name]  # KeyError: no such command
            self._built[name] = self._build(name, module)
        return self._built[name]

    def _build(self, name: str, module: str) -> Any:
        if module not in self._registered:
            scratch = typer.Typer()
            importlib.import_module(f".commands.{module}", __package__).register(scratch)
            use_plain_values(scratch)
            self._registered[module] = scratch
        scratch = self._registered[module]
        settings = self._settings
        for info in scratch.registered_commands:
            if (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))) == name:
                return typer.main.get_command_from_info(
                    info,
                    pretty_exceptions_short=settings["pretty_exceptions_short"],
                    rich_markup_mode=settings["rich_markup_mode"],
                )
        for group in scratch.registered_groups:
            if group.name == name:
                return typer.main.get_group_from_info(group, **settings)
        raise KeyError(name)  # COMMANDS names a command its module does not register (a test catches it)

    def __setitem__(self, name: str, command: Any) -> None:
        self._modules.setdefault(name, "")
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._modules[name]
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __contains__(self, name: object) -> bool:
        return name in self._modules


_WANTS_JSON = "xlarun.wants_json"


class _XlarunGroup(PlainGroup):
    """Maps the library's errors to one red line and a documented exit code, for every command; its commands are
    built when looked up (:class:`_LazyCommands`)."""

    def __init__(self, *, commands: Any = None, **attrs: Any) -> None:
        super().__init__(**attrs)
        lazy = _LazyCommands(COMMANDS, _BUILD_SETTINGS)
        lazy.update(commands or {})
        self.commands = lazy

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names alone: typer's own builds every command to list them

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[_WANTS_JSON] = "--json" in args  # scripts get one JSON document, also on failure
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        from xlarun.console import error_line

        wants_json = ctx.meta.get(_WANTS_JSON, False)
        try:
            return super().invoke(ctx)
        except XlarunError as exc:
            error_line(exc.one_line())
            if wants_json and not json_reported(exc):  # scripts get one JSON document, also on failure
                from xlarun.console import print_json

                print_json(error_document(exc))
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            error_line("interrupted")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise  # usage errors and exits: typer prints them (exit 2 for usage)
        except BrokenPipeError:
            raise typer.Exit(int(ExitCode.OK)) from None  # `xlarun ... | head`
        except Exception as exc:  # a bug: traceback + crash log
            if _interrupted_inside(exc):
                error_line("interrupted")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
            if (trouble := _machine_trouble(exc)) is not None:  # a full disk, a limit: the machine's, not a bug
                _let_go(exc)  # out of memory: what filled it is freed before printing needs any
                error_line(trouble.one_line())
                if wants_json and not json_reported(exc):
                    from xlarun.console import print_json

                    print_json(error_document(trouble))
                raise typer.Exit(int(trouble.exit_code)) from None
            import traceback

            traceback.print_exc()
            log = _crash_log(exc)
            error_line(f"internal error: {exc!r}; the traceback is in {log}; please report it")
            if wants_json and not json_reported(exc):
                from xlarun.console import print_json

                print_json(error_document(exc, crash_log=str(log)))
            raise typer.Exit(int(ExitCode.INTERNAL)) from None


app = typer.Typer(
    name="xlarun",
    cls=_XlarunGroup,
    help=(
        "Capture, archive, index, navigate and replay XLA dumps.\n\n"
        "Start with `xlarun capture configs/jax-cpu.yaml`, then `xlarun modules` (the main program is listed first), "
        "`xlarun show REF` and `xlarun cat REF`. The store is ./.xlarun (override with --store or XLARUN_STORE).\n\n"
        + EXIT_CODES_HELP
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        from xlarun import __version__

        typer.echo(f"xlarun {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Capture, archive, index, navigate and replay XLA dumps."""
    from xlarun.console import forget_notes

    forget_notes()  # each command's --json carries its own notes only (many commands run in one process in tests)


_BUILD_SETTINGS = {
    "pretty_exceptions_short": app.pretty_exceptions_short,
    "rich_markup_mode": app.rich_markup_mode,
    "suggest_commands": app.suggest_commands,
}


def _interrupted_inside(exc: BaseException) -> bool:
    """A Ctrl-C that a library turned into its own error: pydantic-core reports a KeyboardInterrupt raised
    while it builds a model's validators (a command's first use of a spec model) as a SchemaError naming it."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        if type(link).__name__ == "SchemaError" and "KeyboardInterrupt" in str(link):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def _let_go(exc: BaseException) -> None:
    """Drop the frames ``exc`` and the errors it was raised while handling hold (their locals: a module that filled
    the memory), and collect them."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    import gc

    gc.collect()


def _machine_trouble(exc: BaseException) -> XlarunError | None:
    """:func:`_refusal` of ``exc``; out of memory also when ``exc`` was raised while handling a MemoryError (the
    handler itself found no memory)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, MemoryError):
            return _refusal(link)
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return _refusal(exc)


def _refusal(exc: BaseException) -> XlarunError | None:
    """What the machine refused, as one line: a file not written for a full disk, a quota or a read-only file system;
    too many open files or too little memory (the process's limits); a file this user may not read."""
    if isinstance(exc, MemoryError):
        return EnvironmentProblem(
            "out of memory: the machine or this process's limit (ulimit -v, a cgroup) has too little for this command",
            "raise the limit, or ask for less (a smaller module, fewer runs); nothing was changed in the store",
        )
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return EnvironmentProblem(
            f"too many open files (this process may open {soft}, `ulimit -n`)",
            "raise the limit, e.g. `ulimit -n 1024`, and run the command again",
        )
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        from xlarun.errors import InputError

        name = str(exc.filename or "")
        return InputError(
            f"a name too long for the file system ({len(name)} characters): {name[:60]}…",
            "give a shorter REF or path",
        )
    if isinstance(exc, PermissionError):
        from xlarun.errors import current_user

        return EnvironmentProblem(
            f"cannot read or write {exc.filename or 'a file'}: permission denied to user {current_user()}",
            "run the command as a user who may, or ask the store's owner for access",
        )
    why = disk_trouble(exc) if isinstance(exc, OSError) else None
    if why is None:
        return None
    where = exc.filename or "a file"  # type: ignore[attr-defined]
    return EnvironmentProblem(
        f"cannot write {where}: {why}", "free space on that disk" if why == "the disk is full" else "write somewhere else"
    )


def _crash_log(exc: BaseException) -> Path:
    import tempfile
    import traceback
    from datetime import datetime, timezone

    from xlarun import __version__

    name = f"crash-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.log"
    folders = [Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlarun", Path(tempfile.gettempdir())]
    for folder in folders:  # the cache may be another user's or read-only: the log goes where it can
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            with path.open("w") as log:
                log.write(f"xlarun {__version__} on Python {sys.version}\nargv: {sys.argv}\n\n")
                traceback.print_exception(exc, file=log)
            return path
        except OSError:
            continue
    return Path(os.devnull)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: runs the command and exits with its :class:`ExitCode`.

    With ``argv`` given (from Python), returns the exit code instead of exiting.
    """
    try:
        from xlarun.commands.completion import prepare_completion_request

        prepare_completion_request(os.environ)  # type: ignore[arg-type]
        command = typer.main.get_command(app)
        command.main(args=argv, prog_name="xlarun")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:  # Ctrl-C before the command runs (its own handler says "interrupted")
        code = int(ExitCode.INTERRUPTED)
    if argv is None:
        # the interpreter's teardown is skipped (60-100 ms for a capture): threads joined and atexit handlers run,
        # among them the one that closes every index and pack-table connection, so each is checkpointed at exit
        # (xlarun.store.pack_table.close_wal_connections)
        from xlarun.process_exit import exit_without_teardown

        exit_without_teardown(code)
    return code
