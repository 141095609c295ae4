"""delayq_dispatch and delayq_worker as real processes: tasks run once, on
time, never when cancelled, and the processes stop the way operators expect."""

from __future__ import annotations

import datetime
import pickle
import signal
import subprocess

import pytest
import redis
from django.db.models import Count

from django_delayq import Call, cancel, reschedule, schedule, schedule_many
from django_delayq.models import DelayedTask, Status
from tests.acceptance.processes import Processes
from tests.testapp.models import Ledger
from tests.testapp.tasks import record
from tools.procs import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def status(task: DelayedTask) -> str:
    return DelayedTask.objects.get(pk=task.pk).status


def test_tasks_run_once_on_time_and_cancelled_ones_never(
    processes: Processes, redis_client: redis.Redis
) -> None:
    processes.start("delayq_dispatch")
    worker = processes.start("delayq_worker", "--concurrency", "2")

    on_time = schedule(record, args=["on-time"], delay=1)
    cancelled = schedule(record, args=["cancelled"], delay=1)
    earlier = schedule(record, args=["earlier"], delay=3600)
    later = schedule(record, args=["later"], delay=1)
    assert cancel(cancelled)
    reschedule(earlier, delay=0.5)
    reschedule(later, delay=3600)

    wait_for(lambda: status(on_time) == Status.SUCCEEDED, 30, "the 1 s task ran")
    wait_for(lambda: status(earlier) == Status.SUCCEEDED, 30, "the moved task ran")
    [ran] = Ledger.objects.filter(key="on-time")
    row = DelayedTask.objects.get(pk=on_time.pk)
    assert ran.at >= row.run_at  # never early
    assert row.result == "on-time"
    assert Ledger.objects.filter(key="earlier").count() == 1

    # A forged entry and an unknown task name are dead-lettered; the worker
    # carries on.
    redis_client.xadd("delayq:{orders:0}:ready", {"id": pickle.dumps("os.system")})
    bogus = DelayedTask.objects.create(
        name="not.a.registered.task",
        queue="orders",
        run_at=on_time.run_at,
    )
    redis_client.xadd(f"delayq:{{orders:{bogus.shard}}}:ready", {"id": bogus.pk.bytes})
    wait_for(lambda: status(bogus) == Status.FAILED, 30, "unknown name failed")
    wait_for(
        lambda: (
            sum(redis_client.xlen(f"delayq:{{orders:{n}}}:dead") for n in range(4)) == 2
        ),
        30,
        "two dead letters",
    )
    assert worker.poll() is None

    assert status(cancelled) == Status.CANCELLED
    assert status(later) == Status.SCHEDULED
    assert set(Ledger.objects.values_list("key", flat=True)) == {"on-time", "earlier"}


def test_two_dispatchers_and_three_workers_run_5000_tasks_exactly_once(
    processes: Processes, redis_client: redis.Redis
) -> None:
    now = datetime.timedelta
    calls = [
        Call(record, args=[f"task-{i}"], delay=now(milliseconds=i % 2000))
        for i in range(5000)
    ]
    tasks = schedule_many(calls)
    for _ in range(2):
        processes.start("delayq_dispatch", "--lease-ttl", "2")
    for _ in range(3):
        processes.start("delayq_worker", "--concurrency", "2")

    def done() -> int:
        return DelayedTask.objects.filter(status=Status.SUCCEEDED).count()

    wait_for(lambda: done() == len(tasks), 180, "all 5000 tasks succeeded")
    assert Ledger.objects.count() == 5000
    duplicates = (
        Ledger.objects.values("key").annotate(n=Count("id")).filter(n__gt=1).count()
    )
    assert duplicates == 0
    assert DelayedTask.objects.exclude(status=Status.SUCCEEDED).count() == 0
    assert DelayedTask.objects.filter(attempts__gt=1).count() == 0
    # Both dispatchers and more than one worker process took part.
    assert Ledger.objects.values("pid").distinct().count() > 1


def test_sigterm_lets_the_running_task_finish(processes: Processes) -> None:
    worker = processes.start("delayq_worker")
    dispatcher = processes.start("delayq_dispatch")
    task = schedule(record, args=["slow"], kwargs={"seconds": 2.0})
    wait_for(lambda: status(task) == Status.RUNNING, 30, "the task started")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert status(task) == Status.SUCCEEDED
    assert Ledger.objects.filter(key="slow").count() == 1
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=30) == 0


def test_a_second_sigterm_exits_at_once_and_rolls_the_task_back(
    processes: Processes,
) -> None:
    processes.start("delayq_dispatch")
    worker = processes.start("delayq_worker")
    task = schedule(record, args=["abandoned"], kwargs={"seconds": 30.0})
    wait_for(lambda: status(task) == Status.RUNNING, 30, "the task started")
    worker.send_signal(signal.SIGTERM)
    # Two signals in a row would coalesce; send the second once the first
    # was handled, as an impatient operator would.
    wait_for(
        lambda: "finishing what is in flight" in processes.log(worker),
        10,
        "the first SIGTERM was handled",
    )
    worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker ignored the second SIGTERM")
    assert code == 128 + signal.SIGTERM
    # Its transaction rolled back; the row waits to be reclaimed.
    assert not Ledger.objects.filter(key="abandoned").exists()
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.RUNNING, 1)


def test_a_stopped_dispatcher_hands_its_leases_back(
    processes: Processes, redis_client: redis.Redis
) -> None:
    dispatcher = processes.start("delayq_dispatch")
    wait_for(
        lambda: len(list(redis_client.scan_iter(match="delayq:*:lease"))) == 6,
        30,
        "leases of 6 shards (default 1 + orders 4 + reports 1)",
    )
    dispatcher.send_signal(signal.SIGTERM)
    assert dispatcher.wait(timeout=30) == 0
    assert list(redis_client.scan_iter(match="delayq:*:lease")) == []
