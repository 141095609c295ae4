"""Django Tasks on DelayQueueBackend, run by a real ``delayq_run`` process:
tasks run there, at their time, and this process reads their results."""

from __future__ import annotations

import datetime
import os

import pytest
from django.utils import timezone

from django_delayq.contrib.tasks.compat import TaskResult, TaskResultStatus
from tests.acceptance.processes import Processes
from tests.testapp.django_tasks import Boom, add, fails, flaky, record
from tests.testapp.models import Ledger
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def finished(result: TaskResult) -> bool:
    result.refresh()  # get_result(): a read of the row this process did not write
    return result.is_finished


def test_tasks_run_in_the_worker_process_never_before_run_after(
    processes: Processes,
) -> None:
    processes.start("delayq_run", "--concurrency", "2")
    run_after = timezone.now() + datetime.timedelta(seconds=2)
    deferred = record.using(run_after=run_after).enqueue("deferred")
    at_once = add.enqueue(2, 3)
    with_context = flaky.enqueue("process")  # fails once, then succeeds
    failing = fails.enqueue("in the worker")

    wait_for(lambda: finished(at_once), 60, "the task without run_after ran")
    assert (at_once.status, at_once.return_value) == (TaskResultStatus.SUCCESSFUL, 5)

    wait_for(lambda: finished(deferred), 60, "the deferred task ran")
    assert deferred.status == TaskResultStatus.SUCCESSFUL
    value = deferred.return_value
    assert value["key"] == "deferred"
    assert value["pid"] != os.getpid()
    # Never early: neither by the worker's clock nor by the row's.
    assert datetime.datetime.fromisoformat(value["at"]) >= run_after
    assert deferred.started_at is not None
    assert deferred.started_at >= run_after
    [ran] = Ledger.objects.filter(key="deferred")
    assert ran.at >= run_after
    assert deferred.attempts == 1

    wait_for(lambda: finished(with_context), 60, "the context task succeeded")
    assert with_context.return_value == {
        "attempt": 2,
        "id": with_context.id,
        "status": "RUNNING",
        "backend": "default",
        "args": ["process"],
    }

    wait_for(lambda: finished(failing), 60, "the failing task used its attempts")
    assert (failing.status, failing.attempts) == (TaskResultStatus.FAILED, 3)
    [error] = failing.errors
    assert error.exception_class is Boom
    assert "Boom: in the worker" in error.traceback
