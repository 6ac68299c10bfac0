"""The torture suite's figures: each test records its own, printed together at the end of the session."""

from __future__ import annotations

import pytest

_FIGURES: list[tuple[str, dict]] = []


@pytest.fixture
def figures(request):
    """figures(**numbers): record this test's figures (trials, runs lost, exit-4 crashes, hangs...)."""

    def record(**numbers) -> None:
        _FIGURES.append((request.node.name, numbers))
        print(f"\n[torture] {request.node.name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))

    return record


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES:
        return
    terminalreporter.section("torture figures")
    for name, numbers in _FIGURES:
        terminalreporter.write_line(f"{name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))
