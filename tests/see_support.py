"""Helpers for the render/diff/report tests: runs written into a store by hand, and synthetic HLO."""

from __future__ import annotations

import shutil
from pathlib import Path

from xlarun.store.facade import LocalStore
from xlarun.store.manifest import Manifest

#: Headless Chromium as the browser tests drive it (report, view, the API's HTML).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def add_run(store: LocalStore, files: dict[str, str | bytes], name: str = "handmade", **manifest_fields) -> str:
    """Archive ``files`` (dump-relative path -> content) as a committed, indexed run; returns its id."""
    run_id, staging = store.begin_run()
    for path, content in files.items():
        target = staging / ("dump/" + path if not path.startswith(("tf_graphs/", "jax_ir/")) else path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    stored = store.archive_outputs(staging)
    manifest = Manifest(
        run_id=run_id,
        name=name,
        status="succeeded",
        exit_code=0,
        started="2026-01-01T00:00:00+00:00",
        ended="2026-01-01T00:00:01+00:00",
        duration_s=1.0,
        files=len(stored),
        **manifest_fields,
    )
    store.commit_run(run_id, staging, stored, {"manifest.json": manifest.to_json()})
    store.ingest(run_id)
    return run_id


def copy_run_files(store: LocalStore, run_id: str) -> dict[str, bytes]:
    """Every archived file of a run, by path (to build a new run from a real capture)."""
    return {f.path: store.blobs.get(f.digest) for f in store.stored_files(run_id)}


def copy_store(store: LocalStore, target: Path) -> LocalStore:
    """A private copy of a session fixture's store, to add runs to without disturbing other tests."""
    store.close()
    shutil.copytree(store.root, target)
    return LocalStore.open(target)


def ladder_hlo(rungs: int) -> str:
    """An HLO module of 2*rungs+2 instructions where every instruction has at most four neighbours:
    x_i = x_{i-1} + y_{i-1}, y_i = x_{i-1} * y_{i-1}. Too big to lay out whole, quick to draw in part."""
    lines = [
        "HloModule ladder, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}",
        "",
        "ENTRY %main (a: f32[8], b: f32[8]) -> f32[8] {",
        "  %x.0 = f32[8]{0} parameter(0)",
        "  %y.0 = f32[8]{0} parameter(1)",
    ]
    for i in range(1, rungs + 1):
        lines.append(f'  %x.{i} = f32[8]{{0}} add(%x.{i - 1}, %y.{i - 1}), metadata={{op_name="rung{i}/add"}}')
        lines.append(f"  %y.{i} = f32[8]{{0}} multiply(%x.{i - 1}, %y.{i - 1})")
    lines.append(f"  ROOT %out = f32[8]{{0}} add(%x.{rungs}, %y.{rungs})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def svg_nodes(svg: bytes | str) -> dict[str, dict]:
    """Node id -> {'fill', 'tooltip', 'text'} of a graphviz SVG (ids are the <title> of each node group)."""
    import xml.etree.ElementTree as ET

    ns = {"s": "http://www.w3.org/2000/svg"}
    xlink = "{http://www.w3.org/1999/xlink}title"
    root = ET.fromstring(svg if isinstance(svg, bytes) else svg.encode("utf-8"))
    nodes = {}
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        if group.get("class") != "node":
            continue
        title = group.find("s:title", ns).text
        shape = next(
            (
                e
                for e in group.iter()
                if e.tag.rsplit("}", 1)[-1] in ("path", "polygon", "ellipse") and e.get("fill") not in (None, "none")
            ),
            None,
        )
        anchor = next((e for e in group.iter() if e.get(xlink) is not None), None)
        texts = [t.text or "" for t in group.iter("{http://www.w3.org/2000/svg}text")]
        nodes[title] = {
            "fill": shape.get("fill") if shape is not None else None,
            "tooltip": anchor.get(xlink) if anchor is not None else "",
            "text": texts,
        }
    return nodes


def svg_clusters(svg: bytes | str) -> list[str]:
    """The label texts of a graphviz SVG's clusters."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg if isinstance(svg, bytes) else svg.encode("utf-8"))
    labels = []
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        if group.get("class") == "cluster":
            labels.append(" ".join(t.text or "" for t in group.iter("{http://www.w3.org/2000/svg}text")))
    return labels
