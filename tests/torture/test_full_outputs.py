"""Writing outside the store onto a full disk (`export`, `render`, `bundle`, `report`) crashed with an
ENOSPC traceback (exit 4). Where the size is known (`export`, `render`) it is checked before a byte is written;
anything else a full disk stops ends with exit 3 saying the disk is full; no half drawing is left; the store is
untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import assert_sound, fill_disk, xlarun

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "compat" / "jax-0.10.2" / "dumps.tar.gz"


@pytest.mark.slow
def test_outputs_onto_a_full_disk_end_in_exit_3_saying_so(tmp_path, small_disk, cli, figures):
    store = tmp_path / "store"
    importer = xlarun("import", str(FIXTURE), store=store)
    assert importer.wait(timeout=300) == 0, importer.communicate()
    fill_disk(small_disk, 4 << 10)  # a page free
    codes = {}
    for label, command, checked in (
        ("export", ("export", "latest", small_disk / "exported"), True),
        ("render", ("render", "train_step", "-o", small_disk / "graph.svg"), True),
        ("bundle", ("bundle", "train_step", "-o", small_disk / "bug.zip", "--passes"), False),
        ("report", ("report", "-o", small_disk / "report"), False),
    ):
        result = cli(*command, "--store", store)
        codes[label] = result.exit_code
        assert "Traceback" not in result.output and "internal error" not in result.output, f"{label}: {result.output}"
        assert result.exit_code == 3 and "the disk is full" in result.stderr, f"{label}: {result.output}"
        if checked:  # refused before writing
            assert "nothing was written" in result.stderr, f"{label}: {result.stderr}"
    assert not (small_disk / "graph.svg").exists() and not list(small_disk.glob(".graph.svg*"))
    assert not (small_disk / "exported").exists() or not any((small_disk / "exported").iterdir())
    assert not list(small_disk.glob(".bug.zip*"))  # the bundle's temporary file is gone
    state = assert_sound(store)
    crashes = sum(code not in (0, 1, 2, 3) for code in codes.values())
    figures(tried=len(codes), clean=len(codes) - crashes, crashes=crashes, exit_codes=codes)
    assert codes == dict.fromkeys(("export", "render", "bundle", "report"), 3) and len(state.runs) == 1


@pytest.mark.slow
def test_the_pack_table_on_a_full_disk_says_so_not_cannot_rollback(small_disk, figures):
    """An ENOSPC while archiving was reported as "cannot rollback - no transaction is active" (SQLite
    had rolled back itself, and the second ROLLBACK masked the first error)."""
    from xlarun.errors import StoreError
    from xlarun.store.pack_table import PackTable

    table = PackTable(small_disk / "packs.sqlite", small_disk / "packs")
    (small_disk / "packs").mkdir()
    table.add("first", [("a" * 64, 0, 1)])
    try:
        with open(small_disk / "filler", "wb") as filler:
            while True:
                filler.write(bytes(4096))
                filler.flush()
    except OSError:
        pass  # the disk is full
    with pytest.raises(StoreError, match="the disk is full"):
        table.add("second", [(f"{i:064x}", i, 1) for i in range(200_000)])
    (small_disk / "filler").unlink()
    table.add("third", [("b" * 64, 0, 1)])  # with room again, the table works
    assert table.lookup("b" * 64) == ("third", 0, 1) and table.lookup("a" * 64) == ("first", 0, 1)
    figures(tried=1, clean=1, crashes=0)
