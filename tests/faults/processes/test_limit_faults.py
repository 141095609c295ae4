"""Limits through faults: a worker SIGKILLed or frozen while it holds
slots, and Redis losing everything (FLUSHALL, or killed and restarted
empty) while tasks run and wait. Real processes on a private redis-server:
nothing lost, nothing run twice, and the limit never exceeded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from django_delayq import registry, schedule
from django_delayq.models import DelayedTask, Status
from tests.faults.harness import REDIS_LOSSES, Rig
from tests.support.helpers import most_at_once
from tests.testapp import limited
from tests.testapp.models import Run
from tools.procs import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

LIMIT = 2  # two_at_once


@pytest.fixture
def limited_rig(make_rig: Callable[..., Rig]) -> Iterator[Rig]:
    """A rig whose processes serve the queue "limited" and know its tasks."""
    rig = make_rig(QUEUES={"orders": {"shards": 4}, "reports": {}, "limited": {}})
    rig.env["DELAYQ_TEST_LIMITED"] = "{}"
    for task in limited.TASKS:
        registry.register(task)
    try:
        yield rig
    finally:
        for task in limited.TASKS:
            registry.unregister(task.name)


def running_rows() -> int:
    return DelayedTask.objects.filter(status=Status.RUNNING).count()


def schedule_slow(count: int, seconds: float) -> list[DelayedTask]:
    return [
        schedule(limited.two_at_once, args=[f"slow-{i}", seconds]) for i in range(count)
    ]


def all_done(tasks: list[DelayedTask]) -> bool:
    return DelayedTask.objects.filter(
        pk__in=[t.pk for t in tasks], status=Status.SUCCEEDED
    ).count() == len(tasks)


def test_the_slots_of_a_killed_worker_come_back_within_seconds(
    limited_rig: Rig,
) -> None:
    rig = limited_rig
    procs = [rig.sweeper(), rig.dispatcher()]
    doomed = rig.worker("--concurrency", "4", label="doomed")
    rig.wait_ready(*procs, doomed)
    tasks = schedule_slow(10, 1.5)
    # The doomed worker alone: it takes both slots.
    wait_for(lambda: running_rows() == LIMIT, 30, "two tasks running")
    survivor = rig.worker("--concurrency", "4", label="survivor")
    rig.wait_ready(survivor)
    rig.kill(doomed)
    killed_at = time.time()
    wait_for(
        lambda: Run.objects.filter(started__gt=killed_at).exists(),
        30,
        "a task started after the kill",
    )
    first_after = Run.objects.filter(started__gt=killed_at).order_by("started")[0]
    wait_for(lambda: all_done(tasks), 120, "every task succeeded")
    runs = list(Run.objects.all())
    assert most_at_once(runs) <= LIMIT
    # Each ran to its end once: the two killed mid-run ran again, once.
    assert sorted(r.key for r in runs) == sorted(f"slow-{i}" for i in range(10))
    # The killed worker's slots lapsed with their lease (4 s), not with the
    # visibility timeout: the survivor started a task soon after.
    assert first_after.started - killed_at < 8.0


def test_a_frozen_worker_loses_its_slots_and_its_late_run_is_discarded(
    limited_rig: Rig,
) -> None:
    rig = limited_rig
    procs = [rig.sweeper(), rig.dispatcher()]
    frozen = rig.worker("--concurrency", "4", label="frozen")
    rig.wait_ready(*procs, frozen)
    tasks = schedule_slow(6, 1.0)
    wait_for(lambda: running_rows() == LIMIT, 30, "two tasks running")
    rig.pause(frozen)
    paused_at = time.time()
    fresh = rig.worker("--concurrency", "4", label="fresh")
    rig.wait_ready(fresh)
    wait_for(lambda: all_done(tasks), 120, "every task succeeded")
    rig.resume(frozen)
    # Its two tasks were taken over (the rows' fence) once their slots and
    # their visibility lapsed; nothing ran beside them beyond the limit.
    started_after = [r for r in Run.objects.all() if r.started > paused_at]
    assert most_at_once(started_after) <= LIMIT
    assert sorted(r.key for r in Run.objects.all()) == sorted(
        f"slow-{i}" for i in range(6)
    )


@pytest.mark.parametrize(("fault", "inject"), REDIS_LOSSES)
def test_redis_loses_the_limits_while_tasks_run_and_wait(
    limited_rig: Rig, fault: str, inject: Callable[[Rig], None]
) -> None:
    rig = limited_rig
    procs = [rig.sweeper(), rig.dispatcher(), rig.worker("--concurrency", "4")]
    rig.wait_ready(*procs)
    tasks = schedule_slow(8, 1.0)
    wait_for(lambda: running_rows() == LIMIT, 30, "two tasks running")
    inject(rig)
    wait_for(lambda: all_done(tasks), 120, f"every task succeeded after {fault}")
    runs = list(Run.objects.all())
    # The rebuild took the running rows' slots again before admitting more.
    assert most_at_once(runs) <= LIMIT, fault
    assert sorted(r.key for r in runs) == sorted(f"slow-{i}" for i in range(8))
