"""The upgrade test's summary line."""

from __future__ import annotations

from typing import Any

from tests.upgrade import SUMMARY


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SUMMARY:
        return
    terminalreporter.section("django-delayq upgrade")
    for line in SUMMARY:
        terminalreporter.write_line(line)
