"""The backlog gauges against real Redis and a real database: what they read,
and that they read nothing until scraped."""

from __future__ import annotations

import datetime
import time

import pytest
import redis
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from django_delayq import metrics, schedule
from django_delayq.metrics.collector import BacklogCollector
from django_delayq.metrics.server import serve_this_process
from django_delayq.models import DelayedTask, OutboxEntry, PeriodicSchedule
from tests.support.metrics_scrape import parse, scrape, value
from tests.testapp.tasks import add, record
from tools.servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True)]


def collected() -> dict:
    registry = CollectorRegistry()
    registry.register(BacklogCollector())
    return parse(generate_latest(registry).decode())


def commands(client: redis.Redis) -> int:
    """Commands Redis processed so far, less the INFO that asks."""
    return int(client.info("stats")["total_commands_processed"])


def test_overdue_and_outbox_gauges_per_queue(redis_client: redis.Redis) -> None:
    late = schedule(record, args=["late"])
    schedule(record, args=["on time"], delay=3600)
    recent = schedule(add, args=[1, 2])
    now = timezone.now()
    DelayedTask.objects.filter(pk=late.pk).update(
        run_at=now - datetime.timedelta(seconds=120)
    )
    DelayedTask.objects.filter(pk=recent.pk).update(
        run_at=now - datetime.timedelta(seconds=5)
    )
    OutboxEntry.objects.create(
        task_id=recent.pk,
        queue="default",
        action="schedule",
        created_at=now - datetime.timedelta(seconds=30),
    )
    samples = collected()
    assert value(samples, "delayq_overdue_backlog", queue="orders") == 1
    assert value(samples, "delayq_oldest_due_seconds", queue="orders") >= 120
    # Due 5 s ago: late, not yet overdue (60 s).
    assert value(samples, "delayq_overdue_backlog", queue="default") == 0
    assert 5 <= value(samples, "delayq_oldest_due_seconds", queue="default") < 60
    assert value(samples, "delayq_overdue_backlog", queue="reports") == 0
    assert value(samples, "delayq_oldest_due_seconds", queue="reports") == 0
    assert value(samples, "delayq_outbox_backlog", queue="default") == 1
    assert value(samples, "delayq_outbox_oldest_seconds", queue="default") >= 30
    assert value(samples, "delayq_outbox_backlog", queue="orders") == 0
    # Redis: the three tasks are in their due-sets, no dispatcher, no worker.
    assert value(samples, "delayq_due_backlog", queue="orders") == 2
    assert value(samples, "delayq_due_backlog", queue="default") == 1
    assert value(samples, "delayq_unleased_shards", queue="orders") == 4
    assert value(samples, "delayq_workers", queue="orders") == 0


def test_periodic_schedules_by_state_and_those_behind(
    redis_client: redis.Redis,
) -> None:
    samples = collected()
    assert ("delayq_periodic_behind", ()) in samples  # 0, not missing
    assert value(samples, "delayq_periodic_schedules", state="active") == 0
    now = timezone.now()
    ahead, ago = (
        now + datetime.timedelta(seconds=5),
        now - datetime.timedelta(minutes=1),
    )
    for name, planned_through, extra in [
        ("kept", ahead, {}),
        ("stopped", ago, {}),  # nothing planned it for a minute: behind
        ("late-tick", ahead, {}),
        ("paused", ago, {"paused": True, "paused_at": ago}),
        ("removed", ago, {"removed_at": ago}),
    ]:
        PeriodicSchedule.objects.create(
            name=name, definition="every 1 s", planned_through=planned_through, **extra
        )
    tick = schedule(
        record, args=["tick"], key="periodic:late-tick@2026-01-01T00:00:00.000000Z"
    )
    DelayedTask.objects.filter(pk=tick.pk).update(
        run_at=now - datetime.timedelta(seconds=11)
    )
    samples = collected()
    assert value(samples, "delayq_periodic_schedules", state="active") == 3
    assert value(samples, "delayq_periodic_schedules", state="paused") == 1
    assert value(samples, "delayq_periodic_schedules", state="removed") == 1
    assert value(samples, "delayq_periodic_behind") == 2


def test_a_served_process_sends_redis_nothing_until_scraped(
    redis_client: redis.Redis,
) -> None:
    metrics.enable()
    port = free_port()
    before = commands(redis_client)
    stop = serve_this_process("127.0.0.1", port)
    try:
        time.sleep(1.0)
        # Nothing but the first INFO of this test itself.
        assert commands(redis_client) - before == 1
        samples = scrape(port)
        assert value(samples, "delayq_up", store="redis") == 1
        assert commands(redis_client) - before > 2
    finally:
        stop()


def test_the_queue_of_a_stream_key() -> None:
    from django_delayq.metrics.counters import queue_of

    assert queue_of("delayq:{orders:3}:ready") == "orders"
    assert queue_of("my:app:{a:b:0}:ready") == "a:b"
    assert queue_of("garbage") == "unknown"
