"""Testing code that schedules tasks: the test modes, what is scheduled, and
running what is due, in the test's own process and without Redis.

In your test settings::

    DELAYQ = {**DELAYQ, "TEST_MODE": "manual"}

then, in a test::

    from django_delayq.testing import assert_scheduled, run_due

    order_cancel.schedule(args=[order.pk], delay=900)
    assert_scheduled(order_cancel, args=[order.pk])
    run_due(until=timezone.now() + timedelta(minutes=16))

``test_mode`` switches the mode for one test; the pytest plugin
(:mod:`django_delayq.testing.pytest_plugin`) gives the same as the ``delayq``
fixture. See the guide's "Testing your tasks".

Nothing is imported until used: the pytest plugin imports this package in
every pytest session where django-delayq is installed, Django or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Ran",
    "assert_not_scheduled",
    "assert_scheduled",
    "run_due",
    "scheduled",
    "test_mode",
]

if TYPE_CHECKING:
    from .assertions import assert_not_scheduled, assert_scheduled, scheduled
    from .modes import test_mode
    from .running import Ran, run_due

_WHERE = {
    "Ran": "running",
    "run_due": "running",
    "assert_not_scheduled": "assertions",
    "assert_scheduled": "assertions",
    "scheduled": "assertions",
    "test_mode": "modes",
}


def __getattr__(name: str) -> Any:
    # The helpers import the models, which need Django's app registry.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
