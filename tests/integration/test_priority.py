"""Priorities: among due tasks, a higher band starts first, through a real
dispatcher and worker; the sweeper, cancel and the Django Tasks backend
keep each task's band."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import Call, cancel, schedule, schedule_many
from django_delayq.dispatcher import Dispatcher
from django_delayq.exceptions import InvalidArgument
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import encode_member, shard_keys
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from tests.helpers import expected_score, indexed_score
from tests.testapp import django_tasks
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = shard_keys("delayq", "default", 0)
#: low, normal and high tasks of one burst, all due at the same moment
BURST = {-7: 300, 0: 300, 42: 50}


@pytest.mark.parametrize("value", [101, -101, 2.5, True, "1"])
def test_priority_outside_minus_100_to_100_is_refused_and_writes_nothing(value):
    with pytest.raises(InvalidArgument, match=r"priority=.*-100 to 100"):
        schedule(add, args=[1, 2], priority=value)
    with pytest.raises(InvalidArgument, match=r"priority=.*-100 to 100"):
        schedule_many([Call(add, [1, 2]), Call(add, [1, 2], priority=value)])
    assert not DelayedTask.objects.exists()


def test_the_row_keeps_its_priority_and_the_due_set_its_band(redis_client):
    high = schedule(add, args=[1, 1], delay=60, priority=100)
    normal = schedule(add, args=[1, 1], delay=60)
    low = add.schedule(args=[1, 1], delay=60, priority=-1)
    assert [DelayedTask.objects.get(pk=t.pk).priority for t in (high, normal, low)] == [
        100,
        0,
        -1,
    ]
    members = dict(redis_client.zrange(KEYS.due, 0, -1, withscores=True))
    assert members == {
        encode_member(high.pk, b"h"): expected_score(high),
        normal.pk.bytes: expected_score(normal),  # unchanged: the bare id
        encode_member(low.pk, b"l"): expected_score(low),
    }


def test_a_due_task_goes_to_its_bands_stream(redis_client):
    high = schedule(add, args=[1, 1], priority=3)
    normal = schedule(add, args=[1, 1])
    low = schedule(add, args=[1, 1], priority=-3)
    assert Dispatcher().run(once=True).moved == 3
    found = {
        stream: [fields[b"id"] for _, fields in redis_client.xrange(stream)]
        for stream in KEYS.ready_bands
    }
    assert found == {
        KEYS.ready_hi: [high.pk.bytes],
        KEYS.ready: [normal.pk.bytes],
        KEYS.ready_lo: [low.pk.bytes],
    }
    assert redis_client.zcard(KEYS.due) == 0


def run_burst(schedule_all: Callable[[datetime.datetime], None]) -> list[Any]:
    """Schedule a burst due at one moment on one shard, run it through a
    dispatcher and a one-thread worker; the rows, by priority band."""
    schedule_all(timezone.now() + datetime.timedelta(seconds=0.5))
    worker = Worker(["default"], concurrency=1)
    dispatcher = Dispatcher(["default"])
    threads = [
        threading.Thread(target=worker.run, daemon=True),
        threading.Thread(target=dispatcher.run, daemon=True),
    ]
    threads[0].start()
    time.sleep(0.3)  # the worker waits for work before the burst is due
    threads[1].start()
    total = sum(BURST.values())
    deadline = time.monotonic() + 180
    try:
        while DelayedTask.objects.filter(status=Status.SUCCEEDED).count() < total:
            assert time.monotonic() < deadline, "the burst did not finish in time"
            time.sleep(0.2)
    finally:
        worker.stop()
        dispatcher.stop()
        for thread in threads:
            thread.join(timeout=30)
    return list(DelayedTask.objects.all())


def assert_started_by_band(rows: list[DelayedTask]) -> None:
    started = {
        band: [row.started_at for row in rows if test(row.priority)]
        for band, test in (
            ("high", lambda p: p > 0),
            ("normal", lambda p: p == 0),
            ("low", lambda p: p < 0),
        )
    }
    assert [len(times) for times in started.values()] == [50, 300, 300]
    # Tasks claimed in one group share their start time, hence <= between
    # neighbouring bands; hundreds of normal tasks lie between high and low.
    assert max(started["high"]) <= min(started["normal"])
    assert max(started["normal"]) <= min(started["low"])
    assert max(started["high"]) < min(started["low"])


def test_a_burst_starts_high_then_normal_then_low(redis_client):
    def schedule_all(eta: datetime.datetime) -> None:
        # Low first: by due order alone, they would start first.
        schedule_many(
            Call(add, [n, n], eta=eta, priority=priority)
            for priority, count in BURST.items()
            for n in range(count)
        )

    assert_started_by_band(run_burst(schedule_all))


def test_a_burst_through_the_django_tasks_backend(redis_client):
    def schedule_all(eta: datetime.datetime) -> None:
        with transaction.atomic():
            for priority, count in BURST.items():
                task = django_tasks.add.using(priority=priority, run_after=eta)
                for n in range(count):
                    task.enqueue(n, n)

    assert_started_by_band(run_burst(schedule_all))


def test_the_sweeper_leaves_a_task_in_a_high_band_stream_alone(redis_client):
    task = schedule(add, args=[1, 1], priority=5)
    assert Dispatcher().run(once=True).moved == 1
    assert redis_client.xlen(KEYS.ready_hi) == 1
    result = Sweeper().sweep()
    assert (result.reindexed, result.corrected) == (0, 0)
    assert redis_client.zcard(KEYS.due) == 0  # not indexed a second time
    assert indexed_score(redis_client, task) is None


def test_after_a_flushall_the_sweeper_indexes_each_task_in_its_band(redis_client):
    tasks = [schedule(add, args=[1, 1], delay=30, priority=p) for p in (9, 0, -9)]
    redis_client.flushall()
    assert Sweeper().sweep().reindexed == 3
    for task in tasks:
        assert indexed_score(redis_client, task) == expected_score(task)
    assert redis_client.zcard(KEYS.due) == 3


def test_a_member_in_the_wrong_band_is_corrected(redis_client):
    task = schedule(add, args=[1, 1], delay=30, priority=-2)
    redis_client.zrem(KEYS.due, encode_member(task.pk, b"l"))
    redis_client.zadd(KEYS.due, {encode_member(task.pk, b"h"): expected_score(task)})
    assert Sweeper().sweep().corrected == 1
    assert redis_client.zrange(KEYS.due, 0, -1) == [encode_member(task.pk, b"l")]


def test_cancel_removes_a_banded_member(redis_client):
    high = schedule(add, args=[1, 1], delay=60, priority=1)
    low = schedule(add, args=[1, 1], delay=60, priority=-100)
    assert redis_client.zcard(KEYS.due) == 2
    assert cancel(high)
    assert cancel(low)
    assert redis_client.zcard(KEYS.due) == 0


def test_task_decorator_priority_is_the_default_and_schedule_overrides_it():
    from tests.testapp.tasks import urgent

    assert schedule(urgent).priority == 50
    assert schedule(urgent, priority=0).priority == 0
    assert urgent.schedule(priority=-5).priority == -5


def test_the_ready_backlog_counts_every_band(redis_client):
    from django_delayq.conf import get_settings
    from django_delayq.store import stats

    for priority in (1, 0, -1, -1):
        schedule(add, args=[1, 1], priority=priority)
    assert Dispatcher().run(once=True).moved == 4
    settings = get_settings()
    [state] = stats.read_shards(
        redis_client, settings.key_prefix, [settings.queue("default")]
    )
    assert (state.ready, state.waiting, state.pending) == (4, 4, 0)
