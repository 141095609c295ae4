"""A task that has expired when a worker is about to start it is cancelled,
its function never called; a retry that would fall after the expiry is not
made. Run by the in-process dispatcher and worker, on Redis and the
database."""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_delayq import schedule, signals, transitions
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import shard_keys
from django_delayq.worker import Worker
from tests.support.helpers import drain, due_members, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import always_fails, create_order, create_order_non_atomic

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

READY = shard_keys("delayq", "default", 0).ready
#: The error an expired task keeps (its expiry in UTC, to the millisecond).
MOMENT = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})? UTC"


def expired(which: str) -> str:
    return rf"expired at {MOMENT}, before {which} could start"


def wait_until_past(moment: datetime.datetime) -> None:
    """Return once this process's clock, which the worker reads, is past
    ``moment``."""
    while timezone.now() <= moment:
        time.sleep(0.01)


class Recorder:
    """A receiver that notes a signal's name and task id."""

    def __init__(self, name: str, seen: list[tuple[str, Any]]) -> None:
        self.name, self.seen = name, seen

    def __call__(self, sender: Any, task: DelayedTask, **kwargs: Any) -> None:
        self.seen.append((self.name, task.pk))


@pytest.fixture
def events() -> Iterator[list[tuple[str, Any]]]:
    """The task signals sent, as (name, task id), in order."""
    seen: list[tuple[str, Any]] = []
    names = ("task_started", "task_cancelled", "task_failed", "task_succeeded")
    receivers = {name: Recorder(name, seen) for name in names}
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver)
    try:
        yield seen
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver)


def test_an_expired_task_is_cancelled_and_its_neighbour_in_the_group_runs(
    redis_client, events, caplog
):
    late = schedule(create_order, args=["late"], expires=0.3)
    wait_until_past(late.expires_at)
    on_time = schedule(create_order, args=["on time"], expires=600)
    with caplog.at_level("INFO", logger="django_delayq.execution"):
        drain()

    row = refresh(late)
    assert row.status == Status.CANCELLED
    assert re.fullmatch(expired("it"), row.last_error), row.last_error
    assert (row.started_at, row.last_traceback) == (None, "")
    assert row.finished_at >= row.expires_at
    assert refresh(on_time).status == Status.SUCCEEDED
    # Claimed together, in one statement, and run as one group.
    assert transitions.claimed_in_batch(row)
    assert transitions.claimed_in_batch(refresh(on_time))
    # Its function never ran: only the neighbour's order exists.
    assert list(Order.objects.values_list("status", flat=True)) == ["on time"]
    assert ("task_cancelled", late.pk) in events
    assert ("task_started", late.pk) not in events
    assert due_members(redis_client) == {}
    assert redis_client.xlen(READY) == 0  # acknowledged like any outcome
    [line] = [r.getMessage() for r in caplog.records if "expired" in r.getMessage()]
    assert line.startswith(f"task expired id={late.pk} name={create_order.name} ")
    assert f"error='{row.last_error}'" in line


def test_a_non_atomic_task_that_expired_is_cancelled_on_the_one_row_path(
    redis_client, events
):
    late = schedule(create_order_non_atomic, args=["late"], expires=0.3)
    wait_until_past(late.expires_at)
    drain()
    row = refresh(late)
    assert row.status == Status.CANCELLED
    assert re.fullmatch(expired("it"), row.last_error)
    assert not Order.objects.exists()
    assert events == [("task_cancelled", late.pk)]
    assert due_members(redis_client) == {}


def test_a_retry_that_would_fall_after_the_expiry_is_not_made(
    redis_client, settings, events
):
    # The next attempt would be due 30 to 60 s after this one: past the expiry.
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 60.0}
    task = schedule(always_fails, args=["boom"], expires=20)
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert re.fullmatch(
        r"RuntimeError: boom \(not retried: the next attempt would be due after "
        rf"the task expires, at {MOMENT}\)",
        row.last_error,
    ), row.last_error
    assert "RuntimeError: boom" in row.last_traceback
    assert events == [("task_started", task.pk), ("task_failed", task.pk)]
    assert due_members(redis_client) == {}


def test_a_retry_claimed_after_the_expiry_is_cancelled(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    task = schedule(always_fails, args=["boom"], expires=600)
    Dispatcher().run(once=True)
    Worker().run(once=True)
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    # The expiry passes while the retry waits for a worker.
    DelayedTask.objects.filter(pk=task.pk).update(expires_at=timezone.now())
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.CANCELLED, 2)
    assert re.fullmatch(expired("attempt 2"), row.last_error)
    assert due_members(redis_client) == {}
