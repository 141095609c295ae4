"""``async def`` task functions, run by the worker: their ORM calls run on
the worker thread's connection, inside the task's transaction."""

from __future__ import annotations

import inspect
import time

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction

from django_delayq import schedule, schedule_many
from django_delayq.api import Call
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import drain, due_members, expected_score, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import (
    async_create_order,
    async_create_order_non_atomic,
    async_schedules,
    async_waits,
    async_writes_through_sync_code,
    order_cancel,
)
from tests.worker.test_group_commit import _batch, _read_all

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_async_task_runs_and_its_writes_commit_with_its_success(redis_client):
    row = schedule(async_create_order, args=["paid"])
    drain()
    row = refresh(row)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 1)
    assert Order.objects.get(pk=row.result).status == "paid"


def test_an_async_task_that_raises_takes_its_writes_with_it(redis_client):
    row = schedule(async_create_order, args=["bad"])
    drain(rounds=1)
    row = refresh(row)
    # Retried later, with its error kept; its order was rolled back.
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == "ValueError: bad order"
    assert not Order.objects.exists()


def test_sync_to_async_in_an_async_task_runs_in_the_tasks_transaction(
    redis_client,
):
    good = schedule(async_writes_through_sync_code, args=["good"])
    bad = schedule(async_writes_through_sync_code, args=["bad"])
    drain()
    assert refresh(good).status == Status.SUCCEEDED
    assert refresh(good).result["in_atomic_block"] is True
    assert refresh(bad).status == Status.FAILED
    assert list(Order.objects.values_list("status", flat=True)) == ["good"]


def test_in_a_group_a_raising_async_task_takes_only_its_own_writes(redis_client):
    schedule_many(
        Call(async_create_order, args=[status]) for status in ["a", "bad", "b", "c"]
    )
    result = _batch(redis_client).handle(_read_all(redis_client))
    assert result.processed == 4
    statuses = {row.args[0]: row.status for row in DelayedTask.objects.all()}
    assert statuses == {
        "a": Status.SUCCEEDED,
        "bad": Status.SCHEDULED,
        "b": Status.SUCCEEDED,
        "c": Status.SUCCEEDED,
    }
    assert sorted(Order.objects.values_list("status", flat=True)) == ["a", "b", "c"]


def test_a_non_atomic_async_task_keeps_what_it_wrote_before_raising(
    redis_client,
):
    row = schedule(async_create_order_non_atomic, args=["bad"])
    drain()
    assert refresh(row).status == Status.FAILED
    assert list(Order.objects.values_list("status", flat=True)) == ["bad"]


def test_an_async_task_past_its_time_limit_is_cancelled_and_rolled_back(
    redis_client,
):
    row = schedule(async_waits, args=["waited"])
    began = time.monotonic()
    drain(rounds=1)
    # Stopped at its limit (0.3 s), not after its 60 s wait, and not given
    # up on as stuck (after the 5 s grace).
    assert time.monotonic() - began < 5
    row = refresh(row)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.last_error == (
        "TimeLimitExceeded: the task ran longer than its time limit of 0.3 s"
    )
    assert not Order.objects.exists()


def test_aschedule_in_an_async_task_joins_the_tasks_transaction(redis_client):
    kept = schedule(async_schedules, args=[5])
    dropped = schedule(async_schedules, args=[0])
    drain(rounds=1)
    assert refresh(dropped).status == Status.FAILED
    assert refresh(kept).status == Status.SUCCEEDED
    [follow_up] = DelayedTask.objects.filter(name=order_cancel.name)
    assert str(follow_up.pk) == refresh(kept).result
    assert follow_up.args == [5]
    assert due_members(redis_client) == {follow_up.pk: expected_score(follow_up)}


def test_calling_an_async_task_returns_its_coroutine(redis_client):
    # Marked as a coroutine function, for Django and asgiref.
    assert iscoroutinefunction(async_create_order)
    coroutine = async_create_order("direct")
    assert inspect.iscoroutine(coroutine)
    coroutine.close()
    # From sync code, as for any coroutine function: async_to_sync().
    pk = async_to_sync(async_create_order)("direct")
    assert Order.objects.get(pk=pk).status == "direct"
