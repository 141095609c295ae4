"""A task over its limits waits unclaimed, and starts when a slot frees."""

from __future__ import annotations

import time

import pytest

from django_delayq import schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.store.keys import LIMITS_SHARD
from tests.limits.conftest import serving
from tests.support.helpers import most_at_once
from tests.testapp.limited import (
    five_a_second,
    one_per_order,
    one_per_tenant,
    two_at_once,
    unlimited_on_a_limited_queue,
)
from tests.testapp.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(condition, timeout=30.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_concurrency_limit_holds_over_every_thread(limited_queue):
    tasks = [schedule(two_at_once, args=[f"t{i}", 0.2]) for i in range(8)]
    assert {t.shard for t in tasks} == {LIMITS_SHARD}
    with serving(workers=2, threads=4):
        wait_for(lambda: Run.objects.count() == 8, what="8 runs")
    runs = list(Run.objects.all())
    assert most_at_once(runs) == 2
    assert set(
        DelayedTask.objects.filter(pk__in=[t.pk for t in tasks]).values_list(
            "status", flat=True
        )
    ) == {Status.SUCCEEDED}
    # Each ran once, with one attempt: waiting burnt none.
    assert sorted(r.key for r in runs) == sorted(f"t{i}" for i in range(8))
    assert set(
        DelayedTask.objects.filter(pk__in=[t.pk for t in tasks]).values_list(
            "attempts", flat=True
        )
    ) == {1}


def overlaps(runs):
    """Pairs of runs that ran at the same time."""
    runs = sorted(runs, key=lambda r: r.started)
    return [
        (a.key, b.key)
        for i, a in enumerate(runs)
        for b in runs[i + 1 :]
        if b.started < a.ended
    ]


def test_limit_by_holds_per_value_and_lets_other_values_run(limited_queue):
    for i in range(3):
        for order in (1, 2):
            schedule(one_per_order, args=[order, f"o{order}-{i}", 0.15])
    with serving(threads=6):
        wait_for(lambda: Run.objects.count() == 6, what="6 runs")
    runs = list(Run.objects.all())
    by_order = {o: [r for r in runs if r.key.startswith(f"o{o}-")] for o in (1, 2)}
    assert overlaps(by_order[1]) == []
    assert overlaps(by_order[2]) == []
    # The two orders' tasks ran side by side.
    assert most_at_once(runs) == 2


def test_a_rate_limit_holds_in_every_window(limited_queue):
    for i in range(15):
        schedule(five_a_second, args=[f"r{i}"])
    with serving(threads=4):
        wait_for(lambda: Run.objects.count() == 15, what="15 runs")
    starts = sorted(r.started for r in Run.objects.all())
    for i, start in enumerate(starts):
        in_window = [s for s in starts[i:] if s < start + 1.0]
        assert len(in_window) <= 5, starts
    # 15 at 5 a second: the last starts 2 s after the first at least.
    assert starts[-1] - starts[0] >= 2.0 - 0.05


def test_keys_take_turns(limited_queue):
    """A tenant with a backlog does not hold back another tenant's task
    beyond what that tenant's own limit imposes."""
    for i in range(25):
        schedule(one_per_tenant, args=["big", f"big-{i}", 0.2])
    with serving(threads=4):
        wait_for(lambda: Run.objects.count() >= 2, what="the backlog to start")
        scheduled_at = time.time()
        schedule(one_per_tenant, args=["small", "small-0", 0.0])
        wait_for(
            lambda: Run.objects.filter(key="small-0").exists(), what="small's task"
        )
        wait_for(lambda: Run.objects.count() == 26, what="every run")
    small = Run.objects.get(key="small-0")
    # Its own limit (one at a time) had room: it was admitted as soon as it
    # was due. At most the big task running then and the one admitted
    # before it started meanwhile, however long the backlog.
    big_between = Run.objects.filter(
        key__startswith="big-", started__gt=scheduled_at, started__lt=small.started
    ).count()
    assert big_between <= 2
    assert (
        Run.objects.filter(key__startswith="big-", started__gt=small.started).count()
        > 10
    )


def test_a_queue_limit_holds_over_its_tasks_with_or_without_limits(limited_queue):
    limited_queue["options"]["concurrency_limit"] = 1
    limited_queue["apply"]()
    for i in range(3):
        schedule(unlimited_on_a_limited_queue, args=[f"u{i}", 0.1])
        schedule(two_at_once, args=[f"t{i}", 0.1])
    with serving(threads=6):
        wait_for(lambda: Run.objects.count() == 6, what="6 runs")
    assert overlaps(list(Run.objects.all())) == []


def test_a_waiting_task_cancelled_never_runs(limited_queue):
    from django_delayq import cancel

    first = [schedule(two_at_once, args=[f"slow{i}", 0.5]) for i in range(2)]
    waiting = schedule(two_at_once, args=["cancelled", 0.0])
    schedule(two_at_once, args=["after", 0.0])
    with serving(threads=4):
        wait_for(lambda: Run.objects.count() == 0 and _running(first) == 2)
        assert cancel(waiting) is True
        wait_for(lambda: Run.objects.filter(key="after").exists(), what="after")
    assert not Run.objects.filter(key="cancelled").exists()
    assert DelayedTask.objects.get(pk=waiting.pk).status == Status.CANCELLED


def _running(tasks):
    return DelayedTask.objects.filter(
        pk__in=[t.pk for t in tasks], status=Status.RUNNING
    ).count()


def test_tasks_left_under_a_limit_removed_since_still_run(limited_queue):
    """A deploy removes every limit of a queue while tasks wait under them:
    the loops still serve its limits shard until it drains."""
    from django_delayq import registry
    from tests.testapp import limited

    limited_queue["options"]["concurrency_limit"] = 1
    limited_queue["apply"]()
    tasks = [
        schedule(unlimited_on_a_limited_queue, args=[f"left-{i}"]) for i in range(3)
    ]
    assert {t.shard for t in tasks} == {LIMITS_SHARD}
    # Indexed, as the commit of each schedule() did; then the limits go.
    del limited_queue["options"]["concurrency_limit"]
    limited_queue["apply"]()
    for task in limited.TASKS:
        if task.limit_rule:
            registry.unregister(task.name)
    with serving(threads=2):
        wait_for(lambda: Run.objects.count() == 3, what="the tasks left")
    assert sorted(Run.objects.values_list("key", flat=True)) == [
        "left-0",
        "left-1",
        "left-2",
    ]


def test_a_rate_window_survives_a_flushall(limited_queue, redis_client):
    """The starts of the tasks that ended within the period are taken again
    from their rows after Redis lost them, so the window still holds."""
    for i in range(5):
        schedule(five_a_second, args=[f"before-{i}"])
    with serving(threads=4):
        wait_for(lambda: Run.objects.count() == 5, what="the first five")
        redis_client.flushall()
        for i in range(5):
            schedule(five_a_second, args=[f"after-{i}"])
        wait_for(lambda: Run.objects.count() == 10, what="the next five")
    starts = sorted(r.started for r in Run.objects.all())
    for i, start in enumerate(starts):
        assert len([s for s in starts[i:] if s < start + 1.0]) <= 5, starts
