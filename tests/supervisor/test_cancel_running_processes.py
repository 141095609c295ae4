"""cancel() of a task running under ``delayq_worker --processes``: a task
blocked where no interruption reaches it costs its worker process, which
the supervisor replaces, and its row stays cancelled."""

from __future__ import annotations

import re

import pytest
import redis

from django_delayq import cancel, schedule
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.tasks import blocks_through_cancel, create_order, ignores_cancel
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

REPLACED = re.compile(r"started worker process (\d+)")


def _status(row: DelayedTask) -> str:
    return DelayedTask.objects.values_list("status", flat=True).get(pk=row.pk)


def test_a_blocked_cancelled_task_costs_its_child_which_is_replaced(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.env["DELAYQ_TEST_CANCEL_GRACE"] = "1"
    row = schedule(blocks_through_cancel, args=[60], queue="default")
    processes.start("delayq_dispatch")
    supervisor = processes.start("delayq_worker", "--processes", "2")
    wait_for(lambda: _status(row) == Status.RUNNING, 30, "the task running")

    assert cancel(row) is True
    # The look (1 s), the grace (1 s), the interruption's grace (5 s): then
    # the child gives up on itself and the supervisor starts another.
    wait_for(
        lambda: REPLACED.search(processes.log(supervisor)) is not None,
        40,
        "the child replaced",
    )
    log = processes.log(supervisor)
    assert "was cancelled while running and could not be interrupted" in log
    got = DelayedTask.objects.get(pk=row.pk)
    assert (got.status, got.attempts) == (Status.CANCELLED, 1)
    assert got.last_error == "cancelled while running (attempt 1)"

    # The new child works, and the cancelled task stays cancelled.
    after = schedule(create_order, args=["after"])
    wait_for(lambda: _status(after) == Status.SUCCEEDED, 30, "the next task ran")
    got = DelayedTask.objects.get(pk=row.pk)
    assert (got.status, got.last_error) == (
        Status.CANCELLED,
        "cancelled while running (attempt 1)",
    )


def test_a_python_loop_that_ignores_the_cancel_is_interrupted_in_its_child(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.env["DELAYQ_TEST_CANCEL_GRACE"] = "1"
    row = schedule(ignores_cancel, queue="default")
    processes.start("delayq_dispatch")
    supervisor = processes.start("delayq_worker", "--processes", "2")
    wait_for(lambda: _status(row) == Status.RUNNING, 30, "the task running")

    assert cancel(row) is True
    after = schedule(create_order, args=["after"])
    # Interrupted at its next instruction once the grace has run out: the
    # same child is free again and runs the next task.
    wait_for(lambda: _status(after) == Status.SUCCEEDED, 20, "the next task ran")
    assert REPLACED.search(processes.log(supervisor)) is None
    got = DelayedTask.objects.get(pk=row.pk)
    assert (got.status, got.last_error) == (
        Status.CANCELLED,
        "cancelled while running (attempt 1)",
    )
