"""``xlarun collect``: the runs that stopped Ray batches left on the nodes, shipped into the store, verified and
committed as a batch's runs are, then removed from the nodes."""

from __future__ import annotations

from typing import Any

from xlarun.executors.node_side import discard_scratch, fetch_run, left_on_node
from xlarun.executors.ray_cluster import ray_details
from xlarun.executors.ray_connect import connect
from xlarun.executors.shipping import lacking, receive_run
from xlarun.store.facade import LocalStore


def collect_left_runs(store: LocalStore, address: str | None = None, *, prune: bool = False) -> list[dict]:
    """``xlarun collect``: ship into ``store`` the runs that Ray batches left on the nodes of the cluster at
    ``address`` (a driver stopped while a node still archived an interrupted cell; see
    :func:`~xlarun.executors.node_side.left_on_node`), verified and committed as a batch's runs are, then removed
    from the nodes. One entry per staging folder found: node, scratch, state, run_id, and ``action`` (collected,
    already here, left, pruned). ``prune`` also removes the folders of captures that ended without a run."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray, connected_here = connect(address)
    try:
        listing = ray.remote(num_cpus=0, max_retries=0)(left_on_node)
        fetch = ray.remote(num_cpus=0, max_retries=0)(fetch_run)
        discard = ray.remote(num_cpus=0, max_retries=0)(discard_scratch)
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        pins = {node: NodeAffinitySchedulingStrategy(node_id=node, soft=False) for node in nodes}
        found: dict[tuple[str, str], tuple[str, dict]] = {}
        listed = ray.get([listing.options(scheduling_strategy=pins[n]).remote() for n in nodes])
        for node, entries in zip(nodes, listed, strict=True):
            for entry in entries:
                # nodes of one machine share its staging folder: each folder once, by the node that ran it when alive
                key = (entry["hostname"], entry["scratch"])
                if key not in found or entry.get("ran_on") == node:
                    found[key] = (node, entry)
        out = []
        for node, entry in found.values():
            row = {
                "node": f"{entry['node_ip']}/{node[:8]}",
                "scratch": entry["scratch"],
                "state": entry["state"],
                "run_id": entry.get("run_id"),
                "status": entry.get("status"),
                "action": "left",
                "error": entry.get("error"),
            }
            out.append(row)
            if entry["state"] == "dead" and prune:
                ray.get(discard.options(scheduling_strategy=pins[node]).remote(entry["scratch"]), timeout=60)
                row["action"] = "pruned"
            if entry["state"] != "collect":
                continue
            try:
                row.update(_collect_one(ray, store, fetch, discard, pins[node], node, entry))
            except Exception as exc:  # the node went away, or the run arrived damaged: it stays on its node
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
                row.update(action="failed", error=first)
        return out
    finally:
        if connected_here:
            ray.shutdown()


def _collect_one(ray: Any, store: LocalStore, fetch: Any, discard: Any, pinned: Any, node: str, entry: dict) -> dict:
    """Ship one left run from its node into ``store``, then remove it there; the row's new fields."""
    missing = sorted(lacking(store, [digest for _path, digest, _size in entry["files"]]))
    shipment = ray.get(fetch.options(scheduling_strategy=pinned).remote(entry["scratch"], entry["run_id"], missing), timeout=600)
    received = receive_run(store, shipment, ray_details(node, entry, shipment, entry.get("project"), collected=True))
    ray.get(discard.options(scheduling_strategy=pinned).remote(entry["scratch"]), timeout=60)
    return {"action": "collected" if received.new else "already here", "shipped_bytes": shipment.wire_bytes}
