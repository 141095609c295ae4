"""Celery-style tasks run by a real ``delayq_run`` process: ``self.retry()``
and ``self.request`` in a worker, and results read from this process."""

from __future__ import annotations

import pytest

from django_delayq.contrib.celery import AsyncResult
from tests.acceptance.processes import Processes
from tests.testapp.celery_style import add, breaks, in_a_worker
from tests.testapp.models import Ledger

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def test_celery_style_tasks_run_and_retry_in_a_worker(processes: Processes) -> None:
    processes.env["DELAYQ_TEST_CELERY"] = "1"
    processes.start("delayq_run", "--concurrency", "2")
    summed = add.delay(2, 3)
    retried = in_a_worker.delay("worker")
    failed = breaks.delay("worker")

    assert summed.get(timeout=60) == 5
    assert retried.get(timeout=60) == {"id": retried.id, "retries": 2}
    # The task is atomic, as every django-delayq task by default: the writes
    # of the attempts that asked for a retry were rolled back with them.
    assert list(Ledger.objects.values_list("key", flat=True)) == ["worker:2"]
    with pytest.raises(ValueError, match="bad input"):
        AsyncResult(failed.id).get(timeout=60)
    assert AsyncResult(failed.id).state == "FAILURE"
