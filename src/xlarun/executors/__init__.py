"""Executors: where the cells of a batch run.

``local`` (the default) captures every cell in this process's threads (:func:`xlarun.batch.run_batch`);
``ray`` sends each cell to a node of a Ray cluster that serves its backend and ships the finished run back
into this store (:mod:`xlarun.executors.ray_cluster`; needs ``pip install 'xlarun[ray]'``).
"""

from __future__ import annotations

from xlarun.batch import BatchEvent, BatchResult, run_batch
from xlarun.capture.spec_yaml import LoadedSpec
from xlarun.errors import InputError
from xlarun.store.facade import LocalStore
from xlarun.store.remote import RemoteSpec

#: The executors a batch can run on (``--executor``, ``executor:`` in a spec).
EXECUTORS = ("local", "ray")


def executor_of(cells: list[LoadedSpec], asked: str | None) -> str:
    """The executor a batch runs on: the one asked for on the command line, else the spec's (default local)."""
    name = asked or next((c.spec.executor for c in cells if getattr(c.spec, "executor", None)), "local")
    if name not in EXECUTORS:
        raise InputError(f"unknown executor {name!r}", f"use one of: {', '.join(EXECUTORS)}")
    return name


def run_batch_on(
    executor: str,
    cells: list[LoadedSpec],
    store: LocalStore,
    *,
    jobs: int | None = None,
    fail_fast: bool | None = None,
    on_event: BatchEvent | None = None,
    address: str | None = None,
    retries: int = 0,
    ship: str = "auto",
    remote: RemoteSpec | None = None,
) -> BatchResult:
    """Run a batch on ``executor``: ``local`` runs ``jobs`` cells at a time here (default 1); ``ray`` submits every
    cell at once (at most ``jobs`` when given) to the cluster at ``address`` and retries a cell whose node was
    lost up to ``retries`` times, sending the spec's folder to the nodes as ``ship`` says (auto, always, never).
    ``remote`` (ray only): each node pushes its cell's run to that team store; nothing is shipped back here."""
    from xlarun.executors.project import SHIP_MODES

    if ship not in SHIP_MODES:
        raise InputError(f"unknown --ship setting {ship!r}", f"use one of: {', '.join(SHIP_MODES)}")
    if executor == "ray":
        from xlarun.executors.ray_cluster import run_batch_on_ray

        return run_batch_on_ray(
            cells, store, address=address, jobs=jobs, fail_fast=fail_fast, on_event=on_event, retries=retries, ship=ship,
            remote=remote,
        )  # fmt: skip
    if remote is not None:
        raise InputError(
            "a batch pushes straight to a remote only on Ray (--executor ray)",
            f"run it here, then `xlarun push --remote {remote.name}` sends its runs",
        )
    return run_batch(cells, store, jobs=jobs or 1, fail_fast=fail_fast, on_event=on_event)
