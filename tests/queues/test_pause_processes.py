"""A paused queue across real processes: two worker processes (under one
supervisor) start none of its tasks, also through a Redis ``FLUSHALL``, and
run them all once it is resumed."""

from __future__ import annotations

import datetime
import itertools
import re
import subprocess

import pytest
import redis
from django.utils import timezone

from django_delayq import pause_queue, resume_queue, schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.queues.watch import FRESH_FOR
from django_delayq.store import pauses
from django_delayq.store.keys import shard_keys
from tests.acceptance.processes import Processes
from tests.testapp.models import Ledger
from tests.testapp.tasks import record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

STARTED = re.compile(r"supervisor (\d+) started (\d+) worker process\(es\): ([\d, ]+)")
REPORTS = shard_keys("delayq", "reports", 0)
#: A pause reaches every worker within this (twice the cache of its view).
PAUSE_SEEN_WITHIN = datetime.timedelta(seconds=2 * FRESH_FOR)
_rounds = itertools.count()


def two_workers(processes: Processes) -> tuple[subprocess.Popen[bytes], set[int]]:
    supervisor = processes.start(
        "delayq_worker", "--processes", "2", "--concurrency", "1"
    )
    wait_for(
        lambda: STARTED.search(processes.log(supervisor)) is not None,
        30,
        "the supervisor's start line",
    )
    match = STARTED.search(processes.log(supervisor))
    assert match is not None
    return supervisor, {int(pid) for pid in match[3].split(", ")}


def schedule_paused_tasks(redis_client: redis.Redis) -> list[DelayedTask]:
    """Six tasks of the paused queue ``reports``, due once every worker must
    have seen the pause, and waiting in its ready stream."""
    eta = timezone.now() + PAUSE_SEEN_WITHIN + datetime.timedelta(seconds=0.5)
    tasks = [
        schedule(record, args=[f"paused-{i}"], queue="reports", eta=eta)
        for i in range(6)
    ]
    wait_for(
        lambda: (
            redis_client.zcard(REPORTS.due) == 0
            and redis_client.xlen(REPORTS.ready) >= len(tasks)
        ),
        30,
        "the paused queue's tasks moved to its ready stream",
    )
    return tasks


def each_worker_reads_again(workers: set[int]) -> None:
    """Wait until each worker process has run a task of another queue,
    scheduled now: it read the streams again after the paused queue's tasks
    were in theirs (and would have taken those, which are older, first)."""
    keys: list[str] = []

    def both_ran() -> bool:
        ran = set(Ledger.objects.filter(key__in=keys).values_list("pid", flat=True))
        if ran >= workers:
            return True
        # Slow enough that a busy worker leaves the next ones to the other.
        for _ in range(2):
            keys.append(f"other-{next(_rounds)}")
            schedule(record, args=[keys[-1]], kwargs={"seconds": 0.3})
        return False

    wait_for(both_ran, 60, "both worker processes ran a task of queue orders")


def assert_none_started(tasks: list[DelayedTask]) -> None:
    assert not Ledger.objects.filter(key__startswith="paused-").exists()
    rows = DelayedTask.objects.filter(pk__in=[t.pk for t in tasks])
    assert {(r.status, r.attempts) for r in rows} == {(Status.SCHEDULED, 0)}


def resume_and_run_all(tasks: list[DelayedTask]) -> None:
    resume_queue("reports")
    wait_for(
        lambda: (
            DelayedTask.objects.filter(
                pk__in=[t.pk for t in tasks], status=Status.SUCCEEDED
            ).count()
            == len(tasks)
        ),
        30,
        "the paused queue's tasks ran after the resume",
    )
    keys = Ledger.objects.filter(key__startswith="paused-").values_list(
        "key", flat=True
    )
    assert sorted(keys) == sorted(f"paused-{i}" for i in range(len(tasks)))


def test_two_worker_processes_start_nothing_of_a_paused_queue_until_its_resume(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    _, workers = two_workers(processes)
    assert len(workers) == 2
    pause_queue("reports")
    tasks = schedule_paused_tasks(redis_client)

    each_worker_reads_again(workers)

    assert_none_started(tasks)
    resume_and_run_all(tasks)


def test_a_pause_outlives_a_redis_flushall(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    processes.start("delayq_sweep", "--interval", "1")
    _, workers = two_workers(processes)
    pause_queue("reports")
    redis_client.flushall()  # the mirror is gone with the rest
    tasks = schedule_paused_tasks(redis_client)

    each_worker_reads_again(workers)

    assert_none_started(tasks)
    paused = pauses.read(redis_client, "delayq").paused
    assert paused is not None  # written again from the rows
    assert set(paused) == {"reports"}
    resume_and_run_all(tasks)
