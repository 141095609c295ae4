"""The Sentry integration's tests: Sentry's real SDK initialised with a
recording transport, and the worker processes' fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk

from django_delayq.contrib.sentry import monitors
from django_delayq.testing import test_mode
from tests.acceptance.processes import processes
from tests.support.sentry import DSN, Init, Recording

__all__ = ["processes", "sentry"]


@pytest.fixture
def sentry() -> Iterator[Init]:
    """Initialise Sentry (with the options given) in manual test mode; no
    client is left active afterwards."""

    def init(*integrations: Any, **options: Any) -> Recording:
        transport = Recording()
        sentry_sdk.init(
            dsn=DSN, transport=transport, integrations=list(integrations), **options
        )
        return transport

    monitors.forget()
    try:
        with test_mode("manual"):
            yield init
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)
        monitors.forget()
