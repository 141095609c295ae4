"""Redis down at schedule time: the caller succeeds, the outbox keeps the task."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import cancel, reschedule, schedule, schedule_many, signals
from django_delayq.api import Call
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.outbox import replay_outbox
from django_delayq.store import connection
from tests.support.helpers import due_members, expected_score
from tests.testapp.models import Order
from tests.testapp.tasks import add, order_cancel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_down]


def test_schedule_succeeds_with_redis_stopped_and_the_outbox_keeps_it(
    private_redis, caplog
):
    private_redis.stop()
    with caplog.at_level(logging.WARNING, logger="django_delayq"), transaction.atomic():
        order = Order.objects.create()
        task = schedule(order_cancel, delay=900, args=[order.pk])
    assert Order.objects.filter(pk=order.pk).exists()
    row = DelayedTask.objects.get(pk=task.pk)
    assert row.status == Status.SCHEDULED
    [entry] = OutboxEntry.objects.all()
    assert entry.task_id == task.pk
    assert entry.action == "schedule"
    assert (entry.queue, entry.shard) == ("orders", task.shard)
    assert "ConnectionError" in entry.last_error
    assert "queued in the outbox" in caplog.text


def test_replay_indexes_the_outbox_once_redis_is_back(private_redis):
    private_redis.stop()
    tasks = [schedule(order_cancel, delay=900, args=[i]) for i in range(3)]
    assert OutboxEntry.objects.count() == 3

    failed = replay_outbox()
    assert (failed.replayed, failed.failed) == (0, 3)
    entry = OutboxEntry.objects.first()
    assert entry.attempts == 1
    assert entry.next_attempt_at > entry.created_at

    private_redis.start()
    connection.reset()
    # Backed-off entries wait for their next attempt.
    assert replay_outbox().replayed == 0
    OutboxEntry.objects.update(next_attempt_at=entry.created_at)
    assert replay_outbox().replayed == 3
    assert not OutboxEntry.objects.exists()
    client = connection.get_client()
    assert due_members(client) == {task.pk: expected_score(task) for task in tasks}


def test_cancel_and_reschedule_with_redis_down_are_replayed_from_the_row(private_redis):
    keep = schedule(add, delay=60, args=[1, 1])
    gone = schedule(add, delay=60, args=[2, 2])
    private_redis.stop()
    moved = reschedule(keep, delay=3600)
    assert cancel(gone) is True
    assert sorted(OutboxEntry.objects.values_list("action", flat=True)) == [
        "cancel",
        "reschedule",
    ]
    private_redis.start()  # restarted empty, like a Redis without persistence
    connection.reset()
    client = connection.get_client()
    client.zadd("delayq:{default:0}:due", {gone.pk.bytes: 1})  # a stale member
    assert replay_outbox().replayed == 2
    assert due_members(client) == {keep.pk: expected_score(moved)}


def test_bulk_schedule_with_redis_down_goes_to_the_outbox(private_redis):
    private_redis.stop()
    tasks = schedule_many([Call(add, args=[i, i], delay=30) for i in range(50)])
    assert DelayedTask.objects.count() == 50
    assert set(OutboxEntry.objects.values_list("task_id", flat=True)) == {
        task.pk for task in tasks
    }


def test_outbox_writes_and_replays_send_their_signals(private_redis):
    sent = []

    def receiver(sender, signal, queues, **kwargs):
        sent.append((sender, signal, queues))

    signals.outbox_written.connect(receiver)
    signals.outbox_replayed.connect(receiver)
    try:
        private_redis.stop()
        schedule_many([Call(order_cancel, args=[i], delay=900) for i in range(2)])
        assert sent == [(OutboxEntry, signals.outbox_written, ["orders", "orders"])]
        private_redis.start()
        connection.reset()
        OutboxEntry.objects.update(next_attempt_at=timezone.now())
        assert replay_outbox().replayed == 2
    finally:
        signals.outbox_written.disconnect(receiver)
        signals.outbox_replayed.disconnect(receiver)
    assert sent[1:] == [(OutboxEntry, signals.outbox_replayed, ["orders", "orders"])]
