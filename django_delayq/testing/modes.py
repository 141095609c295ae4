"""The test modes: what happens after a transaction that schedules commits.

In production the task is added to the Redis index on commit
(:class:`django_delayq.outbox.RedisIndexer`). With ``DELAYQ["TEST_MODE"]``
(or inside :func:`test_mode`) one of these stands in for it, at that one
seam (:func:`django_delayq.outbox.indexer`): ``schedule()``, ``cancel()``
and the rest write their rows exactly as in production, and nothing reaches
Redis.

``"manual"``
    nothing happens: the rows wait for :func:`~django_delayq.testing.run_due`.
``"immediate"``
    each task runs when the transaction that scheduled it commits. Inside
    Django's ``TestCase``, whose own transaction never commits, the end of
    the outermost ``atomic()`` block the test's code opened counts as the
    commit, and a ``schedule()`` outside any such block runs at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from django.conf import settings as django_settings
from django.db import connections, transaction
from django.test.utils import TestContextDecorator, override_settings

from ..conf import get_settings
from ..conf.schema import is_test_mode
from ..db.testcase_blocks import inside_testcase, run_at_release, test_code_savepoint
from ..models import DelayedTask
from .running import run_first_attempts

Mode = Literal["manual", "immediate"]


class ManualIndexer:
    """Nothing after the commit: the rows are all a test needs."""

    def index(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        pass

    def unindex(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        pass


class ImmediateIndexer:
    """Run each newly scheduled task when its transaction commits."""

    def index(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        run = _Run([task.pk for task in tasks])
        connection = connections[using]
        if not inside_testcase(connection):
            # A real transaction (TransactionTestCase, a live server) or
            # autocommit: Django runs it at the commit, or at once.
            transaction.on_commit(run, using=using)
            return
        # Inside TestCase: the end of the outermost block the test's code
        # opened counts as the commit.
        release = test_code_savepoint(connection)
        if release is None:
            run()  # no block of the test's own: as in autocommit
            return
        # Registered as any on_commit callback, so that a savepoint rolled
        # back drops it as Django drops callbacks; run when that block's
        # savepoint is released.
        run.release = release
        transaction.on_commit(run, using=using)
        run_at_release(connection, _waits_for)

    def unindex(self, tasks: Sequence[DelayedTask], action: str, using: str) -> None:
        pass


class _Run:
    """The immediate mode's callback for one commit: run these tasks."""

    def __init__(self, task_ids: list[Any]) -> None:
        self.task_ids = task_ids
        #: inside TestCase, the savepoint whose release counts as the commit
        self.release: str | None = None
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            run_first_attempts(self.task_ids)


def _waits_for(callback: Any, sid: str) -> bool:
    return isinstance(callback, _Run) and callback.release == sid


def current_mode() -> str | None:
    """The test mode in force: ``"manual"``, ``"immediate"``, an indexer's
    dotted path, or None."""
    return get_settings().test_mode


class test_mode(TestContextDecorator):
    """Put the code inside in a test mode: a context manager, or a decorator
    of a test function or a ``TestCase`` class.

    ``test_mode("manual")``: tasks are scheduled as in production and run
    only when the test calls :func:`~django_delayq.testing.run_due`.
    ``test_mode("immediate")``: each runs when its transaction commits.
    ``test_mode(None)``: production behaviour (Redis indexes the tasks).

    It overrides ``DELAYQ["TEST_MODE"]`` (``override_settings``), keeping the
    rest of ``DELAYQ``.
    """

    def __init__(self, mode: Mode | str | None) -> None:
        if mode is not None and not is_test_mode(mode):
            raise ValueError(
                f'test_mode() takes "manual", "immediate", the dotted path of an '
                f"indexer class, or None; got {mode!r}."
            )
        self.mode = mode
        self._override: override_settings | None = None
        super().__init__()

    def enable(self) -> None:
        # Read when entered, not when decorated: the settings of the moment.
        current = getattr(django_settings, "DELAYQ", None)
        base = dict(current) if isinstance(current, dict) else {}
        self._override = override_settings(DELAYQ={**base, "TEST_MODE": self.mode})
        self._override.enable()

    def disable(self) -> None:
        assert self._override is not None
        self._override.disable()
        self._override = None
