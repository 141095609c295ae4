"""Priorities: among due tasks, a higher band starts first, through a real
dispatcher and worker; the sweeper, cancel and the Django Tasks backend
keep each task's band. Each band has its due-set, which a release without
bands never reads; the members the release that introduced bands wrote in
the normal band's due-set (the id and a band byte) are still dispatched
into their band."""

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
from django_delayq.store.keys import legacy_member, shard_keys
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from tests.support.helpers import expected_score, indexed_score
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


def indexed(client: Any) -> dict[str, dict[bytes, float]]:
    """Each due-set of the shard: member -> score."""
    return {
        due: dict(client.zrange(due, 0, -1, withscores=True)) for due in KEYS.due_bands
    }


def in_streams(client: Any) -> dict[str, list[bytes]]:
    """Each ready stream of the shard: the ids of its entries, in order."""
    return {
        stream: [fields[b"id"] for _, fields in client.xrange(stream)]
        for stream in KEYS.ready_bands
    }


def test_the_row_keeps_its_priority_and_its_bands_due_set_its_id(redis_client):
    high = schedule(add, args=[1, 1], delay=60, priority=100)
    normal = schedule(add, args=[1, 1], delay=60)
    low = add.schedule(args=[1, 1], delay=60, priority=-1)
    assert [DelayedTask.objects.get(pk=t.pk).priority for t in (high, normal, low)] == [
        100,
        0,
        -1,
    ]
    # Bare ids, each in its band's due-set: the normal band's due-set (the
    # only one a release without bands reads) holds normal tasks only.
    assert indexed(redis_client) == {
        KEYS.due_hi: {high.pk.bytes: expected_score(high)},
        KEYS.due: {normal.pk.bytes: expected_score(normal)},
        KEYS.due_lo: {low.pk.bytes: expected_score(low)},
    }


def test_a_due_task_goes_to_its_bands_stream(redis_client):
    high = schedule(add, args=[1, 1], priority=3)
    normal = schedule(add, args=[1, 1])
    low = schedule(add, args=[1, 1], priority=-3)
    assert Dispatcher().run(once=True).moved == 3
    assert in_streams(redis_client) == {
        KEYS.ready_hi: [high.pk.bytes],
        KEYS.ready: [normal.pk.bytes],
        KEYS.ready_lo: [low.pk.bytes],
    }
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}


def as_legacy_members(client: Any, *tasks: DelayedTask) -> None:
    """Index ``tasks`` as the release that introduced bands did: every band
    in the normal band's due-set, a high or low task's member with its band
    byte."""
    for task in tasks:
        band = b"h" if task.priority > 0 else b"l" if task.priority < 0 else b""
        client.zrem(KEYS.due_of(task.priority), task.pk.bytes)
        client.zadd(KEYS.due, {legacy_member(task.pk, band): expected_score(task)})


def test_legacy_members_are_dispatched_into_their_band_and_run(redis_client):
    high = schedule(add, args=[1, 1], priority=3)
    normal = schedule(add, args=[1, 1])
    low = schedule(add, args=[1, 1], priority=-3)
    as_legacy_members(redis_client, high, normal, low)
    assert len(indexed(redis_client)[KEYS.due]) == 3
    assert Dispatcher().run(once=True).moved == 3
    # Bare ids in the streams, as the workers expect.
    assert in_streams(redis_client) == {
        KEYS.ready_hi: [high.pk.bytes],
        KEYS.ready: [normal.pk.bytes],
        KEYS.ready_lo: [low.pk.bytes],
    }
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}
    assert Worker(["default"]).run(once=True).processed == 3
    assert {DelayedTask.objects.get(pk=t.pk).status for t in (high, normal, low)} == {
        Status.SUCCEEDED
    }
    assert redis_client.xlen(KEYS.dead) == 0


def test_a_bare_duplicate_of_a_banded_task_goes_to_its_band_once(redis_client):
    # A sweeper of a release without bands reads only the normal band's
    # keys: it takes a high or low task for lost and indexes its bare id
    # there again. The dispatcher sends each such task to its band, once.
    high = schedule(add, args=[1, 1], priority=3)
    later = schedule(add, args=[1, 1], delay=60, priority=-3)
    # As the earlier sweeper would, at its own (earlier) idea of the due time.
    redis_client.zadd(KEYS.due, {high.pk.bytes: 1, later.pk.bytes: 2})
    assert Dispatcher().run(once=True).moved == 2
    assert in_streams(redis_client) == {
        KEYS.ready_hi: [high.pk.bytes],
        KEYS.ready: [],
        KEYS.ready_lo: [later.pk.bytes],
    }
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}
    # The low task came before its time: the worker indexes it again at its
    # run_at, in its band, and runs only the high one now.
    assert Worker(["default"]).run(once=True).processed == 2
    assert DelayedTask.objects.get(pk=high.pk).status == Status.SUCCEEDED
    assert DelayedTask.objects.get(pk=later.pk).status == Status.SCHEDULED
    assert indexed(redis_client) == {
        KEYS.due_hi: {},
        KEYS.due: {},
        KEYS.due_lo: {later.pk.bytes: expected_score(later)},
    }
    assert redis_client.xlen(KEYS.dead) == 0


def test_a_legacy_member_and_a_banded_one_of_one_task_make_one_entry(redis_client):
    task = schedule(add, args=[1, 1], priority=-3)
    redis_client.zadd(KEYS.due, {legacy_member(task.pk, b"l"): expected_score(task)})
    assert Dispatcher().run(once=True).moved == 1
    assert in_streams(redis_client)[KEYS.ready_lo] == [task.pk.bytes]
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}


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
    # Not indexed a second time.
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}
    assert indexed_score(redis_client, task) is None


def test_after_a_flushall_the_sweeper_indexes_each_task_in_its_band(redis_client):
    tasks = [schedule(add, args=[1, 1], delay=30, priority=p) for p in (9, 0, -9)]
    redis_client.flushall()
    assert Sweeper().sweep().reindexed == 3
    for task in tasks:
        assert indexed_score(redis_client, task) == expected_score(task)
    assert [len(members) for members in indexed(redis_client).values()] == [1, 1, 1]


def test_a_member_in_the_wrong_band_is_corrected(redis_client):
    task = schedule(add, args=[1, 1], delay=30, priority=-2)
    redis_client.zrem(KEYS.due_lo, task.pk.bytes)
    redis_client.zadd(KEYS.due_hi, {task.pk.bytes: expected_score(task)})
    assert Sweeper().sweep().corrected == 1
    assert indexed(redis_client) == {
        KEYS.due_hi: {},
        KEYS.due: {},
        KEYS.due_lo: {task.pk.bytes: expected_score(task)},
    }


def test_the_sweeper_moves_legacy_members_and_bare_duplicates_to_the_band(
    redis_client,
):
    legacy = schedule(add, args=[1, 1], delay=30, priority=-2)
    doubled = schedule(add, args=[1, 1], delay=30, priority=2)
    as_legacy_members(redis_client, legacy)
    # What a sweeper of a release without bands adds beside the right member.
    redis_client.zadd(KEYS.due, {doubled.pk.bytes: expected_score(doubled)})
    assert Sweeper().sweep().corrected == 2
    assert indexed(redis_client) == {
        KEYS.due_hi: {doubled.pk.bytes: expected_score(doubled)},
        KEYS.due: {},
        KEYS.due_lo: {legacy.pk.bytes: expected_score(legacy)},
    }


def test_cancel_removes_a_task_from_every_bands_due_set(redis_client):
    high = schedule(add, args=[1, 1], delay=60, priority=1)
    low = schedule(add, args=[1, 1], delay=60, priority=-100)
    legacy = schedule(add, args=[1, 1], delay=60, priority=7)
    as_legacy_members(redis_client, legacy)
    # A stray in another band's due-set goes too.
    redis_client.zadd(KEYS.due, {high.pk.bytes: expected_score(high)})
    assert [len(members) for members in indexed(redis_client).values()] == [1, 2, 1]
    for task in (high, low, legacy):
        assert cancel(task)
    assert indexed(redis_client) == {due: {} for due in KEYS.due_bands}


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
    [state], _ = stats.snapshot(
        redis_client, settings.key_prefix, [settings.queue("default")]
    )
    assert (state.ready, state.waiting, state.pending) == (4, 4, 0)


def test_the_due_count_and_the_head_cover_every_band(redis_client):
    from django_delayq.conf import get_settings
    from django_delayq.store import stats

    tasks = [
        schedule(add, args=[1, 1], delay=delay, priority=priority)
        for priority, delay in ((1, 30), (0, 60), (-1, 10), (-1, 90))
    ]
    settings = get_settings()
    [state], _ = stats.snapshot(
        redis_client, settings.key_prefix, [settings.queue("default")]
    )
    assert state.due == 4
    assert state.head_score == expected_score(tasks[2])  # the low band's
