"""The backends :mod:`tools.django_tasks_suite` runs in place of Django's:
``RunningDelayQueueBackend`` for its ``ImmediateBackend`` (tasks are
enqueued as rows, then run by the real dispatcher and worker before
``enqueue()`` returns) and ``StoringDelayQueueBackend`` for its
``DummyBackend`` (the dummy's ``results`` and ``clear()``, on the rows)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from django.core.management import call_command
from django.db import connections, transaction

from django_delayq.backends import DelayQueueBackend


class RunningDelayQueueBackend(DelayQueueBackend):
    """``DelayQueueBackend`` whose ``enqueue()``, outside a transaction, runs
    ``delayq_dispatch --once`` and ``delayq_worker --once`` and returns the
    result as the worker left it. Inside a transaction the task cannot run
    yet (it is indexed in Redis on commit), so the result is the enqueued
    one, as with any ``DelayQueueBackend``."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        if transaction.get_autocommit():
            call_command("delayq_dispatch", once=True, verbosity=0)
            call_command("delayq_worker", once=True, verbosity=0)
            result.refresh()
        return result


class StoringDelayQueueBackend(DelayQueueBackend):
    """``DelayQueueBackend`` with the two members of Django's ``DummyBackend``
    that the suite's set-up and assertions use: ``results``, the results of
    the task rows read back from the database (oldest first), and
    ``clear()``, which deletes them."""

    @property
    def results(self) -> list[Any]:
        # DummyBackend.results is a plain list, read from async tests too;
        # there a query must run outside the event loop's thread.
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._read_results()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(self._read_results_in_thread).result()

    def _read_results(self) -> list[Any]:
        from django_delayq.models import DelayedTask

        ids = DelayedTask.objects.order_by("created_at", "pk").values_list(
            "pk", flat=True
        )
        return [self.get_result(str(pk)) for pk in ids]

    def _read_results_in_thread(self) -> list[Any]:
        try:
            return self._read_results()
        finally:
            connections.close_all()

    def clear(self) -> None:
        from django_delayq.models import DelayedTask

        DelayedTask.objects.all().delete()
