"""Fixtures of the fault scenarios, their marker, and their summary lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_delayq.store import connection
from tests.conftest import delayq_settings
from tests.faults.harness import FAULT_DELAYQ, SUMMARY, Rig
from tools.servers import RedisServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "faults: a fault-injection scenario (real processes and servers; slow)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Kept on the item, so a rig's teardown knows whether its test failed.
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


#: Whether the test's own body failed.
CALL_FAILED = pytest.StashKey[bool]()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SUMMARY:
        return
    terminalreporter.section("django-delayq fault scenarios")
    for line in SUMMARY:
        terminalreporter.write_line(line)


@pytest.fixture
def make_rig(
    request: pytest.FixtureRequest,
    settings: Any,
    tmp_path: Path,
    transactional_db: None,
) -> Iterator[Callable[..., Rig]]:
    """Build a :class:`Rig` on a private redis-server (started here, in the main
    thread); the test process and every command it starts use that server."""
    rigs: list[Rig] = []

    def make(*, persistence: bool = False, save: str = "", **overrides: Any) -> Rig:
        server = RedisServer(persistence=persistence, save=save)
        server.start()
        delayq = delayq_settings(server.url, **{**FAULT_DELAYQ, **overrides})
        settings.DELAYQ = delayq
        connection.reset()
        logs = tmp_path / f"rig-{len(rigs)}"
        logs.mkdir()
        rig = Rig(server, delayq, logs)
        rigs.append(rig)
        return rig

    try:
        yield make
    finally:
        for rig in rigs:
            rig.close()
        connection.reset()
        if request.node.stash.get(CALL_FAILED, False):
            # A scenario that failed on a loaded CI machine cannot be run
            # again as it was: what each process said is the evidence. Shown
            # in the failure's "captured stdout teardown" section.
            for rig in rigs:
                for proc in rig.procs:
                    print(f"--- {proc.label} (pid {proc.pid}), end of its log ---")
                    print(proc.tail(60))


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()
