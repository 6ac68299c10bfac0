"""Names that would write outside their target: a run's files.json naming ``../x`` or ``/abs`` paths (for export),
and a shipment from a Ray node (for the driver's receive_run, which `xlarun collect` uses too) with a run id
``../../X``, a metadata name ``../../../X`` or ``..`` file paths. Each is refused with a line naming the bad name,
and nothing is written outside the target: the tree around the store is the same before and after."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from xlarun.errors import StoreError

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"


@pytest.fixture(scope="module")
def sound_store(tmp_path_factory):
    from typer.testing import CliRunner

    from xlarun.cli import app

    root = tmp_path_factory.mktemp("escapes") / "store"
    result = CliRunner().invoke(app, ["import", str(FIXTURE), "--store", str(root), "--name", "dumps"])
    assert result.exit_code == 0, result.output
    return root


def _tree(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def _hostile_paths(tmp_path: Path) -> dict[str, str]:
    """What a hostile files.json may name, each aimed at a place outside DEST that the test then looks at."""
    return {
        "dotdot": "../escaped-dotdot",
        "dotdot-inner": "a/b/../../../escaped-inner",
        "absolute": str(tmp_path / "escaped-absolute"),
        "dot-slash-dotdot": "./../escaped-dot",
    }


@pytest.mark.slow
def test_export_of_a_file_list_naming_paths_outside_dest_writes_nothing_outside(sound_store, tmp_path, cli, figures):
    tried = escapes = refused = 0
    for kind, bad in sorted(_hostile_paths(tmp_path).items()):
        tried += 1
        store = tmp_path / f"store-{kind}"
        shutil.copytree(sound_store, store)
        (run_id,) = [p.name for p in (store / "runs").iterdir()]
        listing = store / "runs" / run_id / "files.json"
        entries = json.loads(listing.read_text())
        listing.write_text(json.dumps([*entries, {**entries[0], "path": bad}]))
        dest = tmp_path / f"dest-{kind}" / "out"
        dest.parent.mkdir()
        before = _tree(tmp_path)
        result = cli("export", "dumps", dest, "--store", store)
        after = _tree(tmp_path) - before
        outside = [p for p in after if not p.startswith(f"dest-{kind}/out") and not p.startswith(f"store-{kind}/")]
        escapes += bool(outside or list(tmp_path.rglob("escaped*")))
        assert result.exit_code == 1, (kind, result.output)
        assert repr(bad) in result.stderr and "files.json" in result.stderr, (kind, result.stderr)
        assert not dest.exists() or not any(dest.iterdir()), kind  # refused before a byte was written
        refused += 1
        check = cli("check", "--store", store)
        assert check.exit_code == 1 and run_id in check.stdout, check.output
        assert "path traversal" in check.stdout or "absolute path" in check.stdout, check.output
    figures(tried=tried, refused=refused, escapes=escapes)
    assert (refused, escapes) == (tried, 0)


def _node_store(sound_store: Path, tmp_path: Path):
    from xlarun.store.facade import LocalStore

    shutil.copytree(sound_store, tmp_path / "node")
    return LocalStore.open(tmp_path / "node", create=False)


def _hostile_shipments(shipment, tmp_path: Path) -> dict:
    """kind -> (the shipment, the bad name its refusal must quote)."""
    first, outside = shipment.files[0], str(tmp_path / "X")

    def metadata(name: str, data: bytes = b"pwned"):
        return replace(shipment, metadata={**shipment.metadata, name: data}), name

    def file(path: str):
        return replace(shipment, files=[*shipment.files, replace(first, path=path)]), path

    return {
        "run-id-dotdot": (replace(shipment, run_id="../../X"), "../../X"),
        "run-id-absolute": (replace(shipment, run_id=outside), outside),
        "run-id-hidden": (replace(shipment, run_id=".X"), ".X"),
        "run-id-empty": (replace(shipment, run_id=""), ""),
        "metadata-dotdot": metadata("../../../X"),
        "metadata-files-json": metadata("files.json", b"[]"),
        "metadata-absolute": metadata(outside),
        "file-dotdot": file("../../X"),
        "file-inner-dotdot": file("dump/../../../X"),
        "file-absolute": file(outside),
        "no-manifest": (replace(shipment, metadata={k: v for k, v in shipment.metadata.items() if k != "manifest.json"}), None),
    }


@pytest.mark.slow
def test_a_hostile_shipment_is_refused_and_nothing_lands_outside_the_store(sound_store, tmp_path, figures):
    from xlarun.executors.shipping import pack_run, receive_run
    from xlarun.store.facade import LocalStore

    node = _node_store(sound_store, tmp_path)
    (run_id,) = node.run_ids()
    shipment = pack_run(node, run_id)
    driver_root = tmp_path / "deep" / "er" / "driver"
    driver = LocalStore.open(driver_root)
    tried = refused = escapes = 0
    try:
        for kind, (hostile, bad) in sorted(_hostile_shipments(shipment, tmp_path).items()):
            tried += 1
            before = _tree(tmp_path)
            with pytest.raises(StoreError) as refusal:
                receive_run(driver, hostile)
            refused += 1
            new = _tree(tmp_path) - before
            outside = [p for p in new if not p.startswith("deep/er/driver/")]
            escapes += bool(outside)
            assert not outside, (kind, outside)
            assert driver.run_ids() == [] and not [p for p in driver.staging_dir.iterdir()], kind
            said = refusal.value.message
            assert (repr(bad) in said) if bad is not None else "without a manifest" in said, (kind, said)
        figures(tried=tried, refused=refused, escapes=escapes)
        assert (refused, escapes) == (tried, 0)
        assert receive_run(driver, shipment).new  # the same shipment, sound, is taken
        assert driver.run_ids() == [run_id]
        assert all(driver.read_file(run_id, f.path) == node.read_file(run_id, f.path) for f in node.stored_files(run_id))
    finally:
        driver.close()
        node.close()
    assert LocalStore.open(driver_root, create=False).check().damaged == []
