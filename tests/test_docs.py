"""The documentation site: its generated pages are current, it builds strictly, and the README stays a front page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_generated_pages_are_up_to_date():
    proc = subprocess.run([sys.executable, "scripts/docs.py", "check"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_command_reference_has_every_command_with_its_options():
    from tests.test_cli import command_names

    reference = (REPO / "docs" / "reference" / "cli.md").read_text()
    for name in command_names():
        assert f"\n## xlarun {name}\n" in reference and f"Usage: xlarun {name}" in reference, name
    assert "--stage" in reference.split("## xlarun cat\n")[1].split("\n## ")[0]


def test_the_readme_is_a_front_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "bash scripts/setup.sh && .venv/bin/xlarun capture configs/jax-cpu.yaml && .venv/bin/xlarun modules" in readme
    assert "bash scripts/test.sh" in readme


def test_every_page_is_in_the_sites_navigation():
    import yaml

    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())

    def pages(nav):
        for entry in nav:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(config["nav"]))
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == listed


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.fail("mkdocs is not installed: `bash scripts/setup.sh --dev` installs it")
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_every_console_block_is_checked_or_says_why_not():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import tutorial
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert tutorial.unmarked() == []
    kinds = [b.checked for page in tutorial.pages() for b in tutorial.blocks(page.read_text())]
    assert len(kinds) >= 45 and sum(kinds) >= 39  # the pages' console blocks, and those run for real


@pytest.mark.slow
def test_the_tutorial_output_is_what_the_commands_print():
    """Every console block of the README and the docs marked `<!-- tutorial -->`, run for real, page by page."""
    proc = subprocess.run(
        [sys.executable, "scripts/tutorial.py", "check"], cwd=REPO, capture_output=True, text=True, timeout=2400
    )
    if proc.returncode == 2 and os.environ.get("CI", "").lower() != "true":
        pytest.skip(proc.stderr.strip())  # made with another jax: regenerate with `scripts/tutorial.py write`
    assert proc.returncode == 0, proc.stderr[-5000:]
