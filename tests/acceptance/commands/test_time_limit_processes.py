"""A task that cannot be interrupted past its time limit costs its worker
process, and only its own attempt: the tasks claimed with it go back."""

from __future__ import annotations

import re

import pytest
import redis

from django_delayq import cancel, schedule
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.models import Order
from tests.testapp.tasks import blocks, create_order, holds_the_gil
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

READY = "delayq:{default:0}:ready"


def _ready(client: redis.Redis, n: int) -> None:
    wait_for(lambda: client.xlen(READY) == n, 20, f"{n} tasks in the ready stream")


def test_a_stuck_task_fails_its_attempt_and_the_worker_exits_70(
    processes: Processes, redis_client: redis.Redis
) -> None:
    stuck = schedule(blocks, args=[60])
    neighbours = [schedule(create_order, args=[f"n{i}"]) for i in range(3)]
    processes.start("delayq_dispatch")
    _ready(redis_client, 4)
    worker = processes.start("delayq_worker")
    assert worker.wait(timeout=40) == 70
    assert "could not be interrupted" in processes.log(worker)

    row = DelayedTask.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == (
        "TimeLimitExceeded: the task ran longer than its time limit of 0.5 s, "
        "and could not be interrupted"
    )
    # Read with it: either finished before it, or handed back uncounted.
    for task in neighbours:
        got = DelayedTask.objects.get(pk=task.pk)
        assert (got.status, got.attempts) in {
            (Status.SUCCEEDED, 1),
            (Status.SCHEDULED, 0),
        }

    assert cancel(stuck)
    processes.start("delayq_worker")
    wait_for(
        lambda: DelayedTask.objects.filter(status=Status.SUCCEEDED).count() == 3,
        30,
        "the neighbours succeeded",
    )
    for task in neighbours:
        assert DelayedTask.objects.get(pk=task.pk).attempts == 1
    assert sorted(Order.objects.values_list("status", flat=True)) == ["n0", "n1", "n2"]


def test_a_supervisor_replaces_a_child_stuck_in_a_task(
    processes: Processes, redis_client: redis.Redis
) -> None:
    stuck = schedule(blocks, args=[60])
    processes.start("delayq_dispatch")
    # A grace period makes a supervisor even of one worker process.
    supervisor = processes.start(
        "delayq_worker", "--processes", "1", "--grace-period", "10"
    )
    wait_for(
        lambda: "could not be interrupted; replacing it" in processes.log(supervisor),
        40,
        "the stuck child replaced",
    )
    # The replacement is forked after that line is written: wait for it.
    wait_for(
        lambda: re.search(r"started worker process \d+", processes.log(supervisor)),
        20,
        "the replacement started",
    )
    row = DelayedTask.objects.get(pk=stuck.pk)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert cancel(stuck)


def test_a_supervisor_kills_a_child_whose_task_holds_the_gil_past_its_limit(
    processes: Processes, redis_client: redis.Redis
) -> None:
    """The task blocks in C code without releasing the GIL: the child's own
    watchdog never runs, so its supervisor kills it, and the task (out of
    attempts) fails with the time limit error. Its neighbour runs."""
    hog = schedule(holds_the_gil, args=[300])
    processes.start("delayq_dispatch")
    _ready(redis_client, 1)
    # A grace period makes a supervisor even of one worker process.
    supervisor = processes.start(
        "delayq_worker", "--processes", "1", "--grace-period", "10"
    )
    wait_for(
        lambda: DelayedTask.objects.get(pk=hog.pk).status == Status.FAILED,
        60,
        "the task failed",
    )
    row = DelayedTask.objects.get(pk=hog.pk)
    assert (row.attempts, row.last_error) == (
        1,
        "TimeLimitExceeded: the task ran longer than its time limit of 0.5 s, "
        "and could not be interrupted",
    )
    # The supervisor logs the child's death just after forking the rescue
    # that records the failure: the line may come after the row changed.
    killed = re.compile(r"worker process \d+ was killed by SIGKILL after")
    wait_for(
        lambda: killed.search(processes.log(supervisor)),
        20,
        "the supervisor logging the kill",
    )
    log = processes.log(supervisor)
    assert f"has run task {hog.pk} more than 20 s past its time limit" in log
    assert killed.search(log)

    neighbour = schedule(create_order, args=["after"])
    wait_for(
        lambda: DelayedTask.objects.get(pk=neighbour.pk).status == Status.SUCCEEDED,
        30,
        "the replacement ran the next task",
    )
