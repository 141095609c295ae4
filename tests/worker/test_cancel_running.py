"""cancel() of a running task: the row ends cancelled at once, the worker
stops the run (at a check of the task's own, or by force after the grace
period), and nothing the run does afterwards is recorded or kept."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.test import override_settings

from django_delayq import cancel, current_run, raise_if_cancelled, schedule
from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import TaskCancelled
from django_delayq.models import DelayedTask, Status
from django_delayq.signals import task_cancelled
from django_delayq.store.keys import shard_keys
from django_delayq.worker import Worker
from tests.support.helpers import refresh
from tests.testapp.models import Order
from tests.testapp.tasks import (
    checks_for_cancel,
    create_order,
    ignores_cancel,
    writes_once_cancelled,
)
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _status(row: DelayedTask) -> str:
    return DelayedTask.objects.values_list("status", flat=True).get(pk=row.pk)


def _start_worker() -> threading.Thread:
    """Dispatch what is due, then work it in a thread until nothing is left."""
    Dispatcher().run(once=True)
    runner = threading.Thread(
        target=Worker(queues=["default"]).run, kwargs={"once": True}
    )
    runner.start()
    return runner


def _pending(client: redis.Redis, row: DelayedTask) -> int:
    stream = shard_keys("delayq", row.queue, row.shard).ready
    return sum(g["pending"] for g in client.xinfo_groups(stream))


def test_a_running_task_that_checks_is_stopped_at_its_check(
    redis_client: redis.Redis,
) -> None:
    sent: list[DelayedTask] = []

    def receiver(sender: object, task: DelayedTask, **kwargs: object) -> None:
        sent.append(task)

    task_cancelled.connect(receiver)
    try:
        row = schedule(checks_for_cancel)
        runner = _start_worker()
        wait_for(lambda: _status(row) == Status.RUNNING, 10, "the task running")

        asked = time.monotonic()
        assert cancel(row) is True
        runner.join(timeout=10)
        assert not runner.is_alive()
    finally:
        task_cancelled.disconnect(receiver)
    # Its check saw the cancel within about a second of the commit.
    assert time.monotonic() - asked < 5
    got = refresh(row)
    assert (got.status, got.attempts) == (Status.CANCELLED, 1)
    assert got.last_error == "cancelled while running (attempt 1)"
    assert got.result is None
    assert [t.pk for t in sent] == [row.pk]
    assert _pending(redis_client, row) == 0  # its entry is done with
    assert cancel(row) is False  # finished now


def test_what_a_cancelled_run_writes_and_returns_is_rolled_back(
    redis_client: redis.Redis,
) -> None:
    row = schedule(writes_once_cancelled, args=["after-cancel"])
    runner = _start_worker()
    wait_for(lambda: _status(row) == Status.RUNNING, 10, "the task running")
    assert cancel(row.pk) is True
    runner.join(timeout=10)
    assert not runner.is_alive()
    got = refresh(row)
    assert got.status == Status.CANCELLED
    assert got.last_error == "cancelled while running (attempt 1)"
    assert got.result is None
    # Its success was fenced (the row was cancelled), which rolled back the
    # order the function wrote after it saw the cancel.
    assert not Order.objects.filter(status="after-cancel").exists()
    assert _pending(redis_client, row) == 0


def test_a_task_that_ignores_the_cancel_is_stopped_by_force(
    redis_client: redis.Redis, settings: object
) -> None:
    delayq = {**settings.DELAYQ, "CANCEL_GRACE": 0.5}  # type: ignore[attr-defined]
    with override_settings(DELAYQ=delayq):
        row = schedule(ignores_cancel)
        runner = _start_worker()
        wait_for(lambda: _status(row) == Status.RUNNING, 10, "the task running")
        asked = time.monotonic()
        assert cancel(row.pk) is True
        runner.join(timeout=15)
        assert not runner.is_alive()
    # Well before the task's own 60 s: the look (1 s) and the grace (0.5 s).
    assert time.monotonic() - asked < 8
    got = refresh(row)
    assert (got.status, got.attempts) == (Status.CANCELLED, 1)
    assert got.last_error == "cancelled while running (attempt 1)"
    assert _pending(redis_client, row) == 0


def test_a_task_cancelled_in_a_group_takes_none_of_its_neighbours_with_it(
    redis_client: redis.Redis,
) -> None:
    # Claimed together and run in one transaction, the waiting task first.
    row = schedule(checks_for_cancel)
    neighbours = [schedule(create_order, args=[f"n{i}"]) for i in range(3)]
    runner = _start_worker()
    wait_for(lambda: _status(row) == Status.RUNNING, 10, "the task running")
    assert cancel(row) is True
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert _status(row) == Status.CANCELLED
    for task in neighbours:
        got = refresh(task)
        assert (got.status, got.attempts) == (Status.SUCCEEDED, 1)
    assert sorted(Order.objects.values_list("status", flat=True)) == ["n0", "n1", "n2"]
    assert _pending(redis_client, row) == 0


def test_a_cancel_racing_the_tasks_end_wins_or_loses_never_both(
    redis_client: redis.Redis,
) -> None:
    outcomes = []
    for n in range(20):
        row = schedule(create_order, args=[f"race-{n}"])
        runner = _start_worker()
        # The moment it is claimed: its function runs at once, and ends in
        # about a millisecond, as the cancel lands.
        wait_for(
            lambda row=row: _status(row) != Status.SCHEDULED,
            10,
            "the task claimed",
            poll=0.0005,
        )
        cancelled = cancel(row)
        runner.join(timeout=10)
        assert not runner.is_alive()
        got = refresh(row)
        kept = Order.objects.filter(status=f"race-{n}").count()
        if cancelled:
            assert (got.status, kept, got.result) == (Status.CANCELLED, 0, None)
            assert got.last_error == "cancelled while running (attempt 1)"
        else:
            assert (got.status, kept) == (Status.SUCCEEDED, 1)
            assert got.result == Order.objects.get(status=f"race-{n}").pk
        assert _pending(redis_client, row) == 0
        outcomes.append(cancelled)
    # Which one wins is the race's; that each run has exactly one winner is
    # what the assertions above check.
    assert len(outcomes) == 20


def test_the_checks_say_nothing_outside_a_run_or_before_a_cancel() -> None:
    assert current_run() is None
    raise_if_cancelled()  # outside a run: nothing to check


def test_task_cancelled_is_not_swallowed_by_except_exception() -> None:
    assert not issubclass(TaskCancelled, Exception)
    assert issubclass(TaskCancelled, BaseException)


def test_cancel_of_a_finished_task_is_false(redis_client: redis.Redis) -> None:
    row = schedule(create_order, args=["done"])
    runner = _start_worker()
    runner.join(timeout=10)
    assert refresh(row).status == Status.SUCCEEDED
    assert cancel(row) is False
    assert refresh(row).status == Status.SUCCEEDED
