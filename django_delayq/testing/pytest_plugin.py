"""The ``delayq`` pytest fixture: the testing toolkit in a test.

Registered under the ``pytest11`` entry point, so pytest loads it in every
session where django-delayq is installed: it imports nothing of Django, and
the fixture needs pytest-django's database access only when a test uses it
(``@pytest.mark.django_db``, or the ``db`` fixture).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..models import DelayedTask
    from .modes import Mode, test_mode
    from .running import Ran


class DelayQueueFixture:
    """What the ``delayq`` fixture gives a test: the functions of
    :mod:`django_delayq.testing`, as methods."""

    @property
    def mode(self) -> str | None:
        """The test mode in force."""
        from .modes import current_mode

        return current_mode()

    def scheduled(self, task: Any = None, **filters: Any) -> list[DelayedTask]:
        """:func:`django_delayq.testing.scheduled`."""
        from .assertions import scheduled

        return scheduled(task, **filters)

    def assert_scheduled(self, task: Any = None, **filters: Any) -> list[DelayedTask]:
        """:func:`django_delayq.testing.assert_scheduled`."""
        from .assertions import assert_scheduled

        return assert_scheduled(task, **filters)

    def assert_not_scheduled(self, task: Any = None, **filters: Any) -> None:
        """:func:`django_delayq.testing.assert_not_scheduled`."""
        from .assertions import assert_not_scheduled

        assert_not_scheduled(task, **filters)

    def run_due(
        self, until: datetime.datetime | None = None, **options: Any
    ) -> list[Ran]:
        """:func:`django_delayq.testing.run_due`."""
        from .running import run_due

        return run_due(until, **options)

    def test_mode(self, mode: Mode | None) -> test_mode:
        """:func:`django_delayq.testing.test_mode`: a context manager."""
        from .modes import test_mode

        return test_mode(mode)


@pytest.fixture
def delayq() -> Iterator[DelayQueueFixture]:
    """The testing toolkit, with the test in ``DELAYQ["TEST_MODE"]``, or in
    the manual mode if the settings set none."""
    from .modes import current_mode, test_mode

    with test_mode(current_mode() or "manual"):
        yield DelayQueueFixture()
