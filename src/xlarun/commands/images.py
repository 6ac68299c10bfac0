"""``images build`` / ``images list``: the container images the docker backends run."""

from __future__ import annotations

from typing import Annotated

import typer

from xlarun.commands import JsonOption

images_app = typer.Typer(help="Build and list the xlarun container images (containers/<kind>/Dockerfile).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")


@images_app.command("build")
def build(
    kinds: Annotated[list[str] | None, typer.Argument(help="cpu, gpu, ipu (default: cpu).", show_default=False)] = None,
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            help="Base image (the Dockerfile's BASE_IMAGE), e.g. a local xlarun-base:bookworm when no registry is reachable.",
        ),
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Tag to build (default xlarun-<kind>:latest); only with one kind.")
    ] = None,
    build_arg: Annotated[
        list[str] | None, typer.Option("--build-arg", help="NAME=VALUE, e.g. JAX_VERSION=0.10.2 (default: this host's versions).")
    ] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every layer.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Don't stream the build log.")] = False,
) -> None:
    """Build the images the docker-cpu / docker-gpu / docker-ipu backends run.

    Framework versions default to this host's, so a module captured in the container fingerprints like the
    same module captured locally. Example: xlarun images build cpu --base xlarun-base:bookworm
    """
    import time

    from xlarun.capture.images import build_image
    from xlarun.console import say
    from xlarun.errors import InputError

    kinds = kinds or ["cpu"]
    if tag and len(kinds) > 1:
        raise InputError("--tag goes with one kind", "build the kinds one at a time")
    args = {}
    for item in build_arg or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError(f"--build-arg {item!r} is not NAME=VALUE", "e.g. --build-arg JAX_VERSION=0.10.2")
        args[name] = value
    for kind in kinds:
        started = time.monotonic()
        say(f"[bold]building[/bold] {tag or f'xlarun-{kind}:latest'}" + (f" on {base}" if base else ""))
        info = build_image(
            kind,
            base=base,
            tag=tag,
            build_args=args,
            no_cache=no_cache,
            progress=None if quiet else (lambda line: typer.echo(f"  {line}", err=True)),
        )
        say(f"[green]built[/green] {info.ref} ({info.id[:19]}) in {time.monotonic() - started:.1f} s")


@images_app.command("list")
def list_images(as_json: JsonOption = False) -> None:
    """The xlarun images present on the Docker host, with their framework versions."""
    from xlarun.capture.images import connect_docker, image_info
    from xlarun.console import human_bytes, print_json, print_table

    client = connect_docker(timeout=10)
    infos = []
    for image in client.images.list():
        for ref in image.tags:
            if ref.startswith("xlarun-"):
                infos.append(image_info(image, ref=ref, client=client))
    if as_json:
        print_json(infos)
        return
    print_table(
        ("image", "id", "created", "size", "versions"),
        [
            (
                i.ref,
                i.id.removeprefix("sha256:")[:12],
                (i.created or "")[:19],
                human_bytes(i.size),
                ", ".join(
                    f"{k.removeprefix('xlarun.')} {v}"
                    for k, v in i.labels.items()
                    if k.endswith("version") and k != "xlarun.version"
                ),
            )
            for i in infos
        ],
        right=("size",),
    )
