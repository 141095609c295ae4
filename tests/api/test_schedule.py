"""schedule(): the row commits with the caller's transaction, Redis follows."""

from __future__ import annotations

import datetime

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import shard_keys
from tests.support.helpers import due_members, expected_score, indexed_score
from tests.testapp.models import Order
from tests.testapp.tasks import add, order_cancel, reads_meta, send_reminder

pytestmark = pytest.mark.django_db(transaction=True)


def test_committed_task_is_indexed_in_its_shard_with_its_ms_score(redis_client):
    with transaction.atomic():
        task = schedule(order_cancel, delay=900, args=[42])
    row = DelayedTask.objects.get(pk=task.pk)
    assert row.status == Status.SCHEDULED
    assert row.name == "tests.testapp.tasks.order_cancel"
    assert row.queue == "orders"
    assert row.args == [42]
    assert row.max_attempts == 5
    assert row.run_at == task.run_at
    assert row.run_at.microsecond % 1000 == 0
    assert indexed_score(redis_client, row) == expected_score(row)
    assert due_members(redis_client) == {row.pk: expected_score(row)}


def test_delay_sets_run_at_that_far_from_now(redis_client):
    before = timezone.now()
    task = schedule(add, delay=datetime.timedelta(minutes=15), args=[1, 2])
    after = timezone.now()
    low = before + datetime.timedelta(minutes=15)
    high = after + datetime.timedelta(minutes=15, milliseconds=1)
    assert low <= task.run_at <= high


def test_nothing_reaches_redis_before_commit(redis_client):
    with transaction.atomic():
        task = schedule(add, delay=60, args=[1, 2])
        assert indexed_score(redis_client, task) is None
    assert indexed_score(redis_client, task) == expected_score(task)


def test_outside_a_transaction_the_task_is_indexed_at_once(redis_client):
    task = schedule(add, args=[1, 2], kwargs={})
    assert indexed_score(redis_client, task) == expected_score(task)


def test_rollback_leaves_no_row_and_no_member(redis_client):
    with pytest.raises(RuntimeError), transaction.atomic():
        Order.objects.create()
        schedule(order_cancel, delay=900, args=[1])
        raise RuntimeError("the view failed")
    assert not DelayedTask.objects.exists()
    assert not Order.objects.exists()
    assert due_members(redis_client) == {}


def test_savepoint_rollback_drops_only_the_tasks_inside_it(redis_client):
    with transaction.atomic():
        kept = schedule(add, delay=60, args=[1, 1])
        try:
            with transaction.atomic():
                schedule(add, delay=60, args=[2, 2])
                raise ValueError("inner step failed")
        except ValueError:
            pass
    assert list(DelayedTask.objects.values_list("pk", flat=True)) == [kept.pk]
    assert set(due_members(redis_client)) == {kept.pk}


def test_eta_and_explicit_queue_and_name(redis_client):
    eta = timezone.now() + datetime.timedelta(hours=2)
    task = schedule(
        "reminders.send", eta=eta, args=[7], kwargs={"text": "hi"}, queue="orders"
    )
    assert task.name == "reminders.send"
    assert task.queue == "orders"
    assert 0 <= task.shard < 4
    assert task.kwargs == {"text": "hi"}
    assert task.run_at - eta < datetime.timedelta(milliseconds=1)
    assert indexed_score(redis_client, task) == expected_score(task)
    assert send_reminder.name == "reminders.send"


def test_tasks_spread_over_the_queues_shards(redis_client):
    tasks = [schedule(order_cancel, delay=60, args=[i]) for i in range(40)]
    shards = {task.shard for task in tasks}
    assert len(shards) > 1
    for task in tasks:
        key = shard_keys("delayq", "orders", task.shard).due
        assert redis_client.zscore(key, task.pk.bytes) == expected_score(task)


def test_task_object_schedule_shortcut(redis_client):
    task = add.schedule(args=[1, 2], delay=5)
    assert DelayedTask.objects.get(pk=task.pk).args == [1, 2]


def test_a_new_earliest_task_wakes_the_shard_dispatcher(redis_client):
    wake = shard_keys("delayq", "default", 0).wake
    schedule(add, delay=600, args=[1, 1])
    assert redis_client.lrange(wake, 0, -1) == [b"1"]
    redis_client.delete(wake)
    schedule(add, delay=1200, args=[1, 1])  # later than the head: no wake-up
    assert redis_client.llen(wake) == 0
    schedule(add, delay=1, args=[1, 1])  # new head
    assert redis_client.lrange(wake, 0, -1) == [b"1"]


def test_metadata_is_stored_with_the_row_in_the_callers_transaction(redis_client):
    given = {"tenant": "acme", "request_id": "r-1", "trace": {"sampled": True}}
    with transaction.atomic():
        task = schedule(order_cancel, delay=900, args=[42], meta=given)
        plain = schedule(order_cancel, delay=900, args=[43])
        emptied = schedule(order_cancel, delay=900, args=[44], meta={})
    assert DelayedTask.objects.get(pk=task.pk).meta == given == task.meta
    # No metadata is NULL, as in the rows of earlier versions.
    assert set(
        DelayedTask.objects.filter(meta__isnull=True).values_list("pk", flat=True)
    ) == {plain.pk, emptied.pk}
    assert (plain.meta, emptied.meta) == (None, None)
    with pytest.raises(RuntimeError), transaction.atomic():
        schedule(order_cancel, delay=900, args=[45], meta=given)
        raise RuntimeError
    assert DelayedTask.objects.count() == 3


def test_a_tasks_metadata_is_merged_under_the_calls(redis_client):
    given = {"tenant": "acme", "order": 42}
    task = reads_meta.schedule(args=["k"], meta=given)
    assert task.meta == {"team": "billing", "tenant": "acme", "order": 42}
    assert DelayedTask.objects.get(pk=task.pk).meta == task.meta
    # Neither the caller's dict nor the task's was changed.
    assert given == {"tenant": "acme", "order": 42}
    assert reads_meta.meta == {"team": "billing", "tenant": "default"}
    by_name = schedule(reads_meta.name, args=["k"])
    assert by_name.meta == {"team": "billing", "tenant": "default"}


def test_expires_counts_seconds_or_a_timedelta_from_the_call(redis_client):
    before = timezone.now()
    in_seconds = schedule(add, args=[1, 2], delay=900, expires=1800)
    in_delta = add.schedule(
        args=[1, 2], delay=60, expires=datetime.timedelta(minutes=10)
    )
    after = timezone.now()
    for task, span in [
        (in_seconds, datetime.timedelta(seconds=1800)),
        (in_delta, datetime.timedelta(minutes=10)),
    ]:
        row = DelayedTask.objects.get(pk=task.pk)
        # From now, as Celery counts it: not from the due time.
        assert before + span <= row.expires_at <= after + span
        assert row.expires_at == task.expires_at
        assert indexed_score(redis_client, row) == expected_score(row)
    assert schedule(add, args=[1, 2]).expires_at is None


def test_an_expiry_datetime_is_kept_as_given(redis_client):
    expires = datetime.datetime(2031, 5, 4, 3, 2, 1, 123456, tzinfo=datetime.UTC)
    task = schedule(
        add, args=[1, 2], eta=expires - datetime.timedelta(days=1), expires=expires
    )
    assert DelayedTask.objects.get(pk=task.pk).expires_at == expires
    # A task due now (a past eta) may expire any moment after now.
    past = timezone.now() - datetime.timedelta(hours=1)
    soon = timezone.now() + datetime.timedelta(minutes=1)
    assert schedule(add, args=[1, 2], eta=past, expires=soon).expires_at == soon
