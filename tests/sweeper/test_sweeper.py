"""The sweeper repairs whatever Redis lost or kept too long; the row decides."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_delayq import cancel, reschedule, schedule, signals, transitions
from django_delayq.conf import get_settings
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, OutboxEntry, Status
from django_delayq.signals import task_failed
from django_delayq.store import connection, streams
from django_delayq.store import inspect as store_inspect
from django_delayq.store.keys import shard_keys, sweeper_lock_key
from django_delayq.sweeper import Sweeper
from django_delayq.worker import Worker
from tests.support.helpers import claim, due_members, expected_score
from tests.testapp.tasks import add, order_cancel

pytestmark = pytest.mark.django_db(transaction=True)


def sweep(**kwargs):
    return Sweeper().sweep(**kwargs)


def test_tasks_redis_lost_are_indexed_again(redis_client):
    tasks = [schedule(order_cancel, args=[i], delay=60) for i in range(20)]
    overdue = schedule(add, args=[1, 1])
    redis_client.flushall()  # a restart without persistence
    result = sweep()
    assert result.reindexed == 21
    expected = {t.pk: expected_score(t) for t in [*tasks, overdue]}
    assert due_members(redis_client) == expected
    assert sweep().reindexed == 0  # idempotent


def test_lost_tasks_go_back_oldest_first_and_the_pass_line_says_so(redis_client):
    now = timezone.now()
    tasks = [
        schedule(add, args=[i, i], eta=now - datetime.timedelta(minutes=m))
        for i, m in enumerate([1, 30, 5])
    ]
    redis_client.flushall()
    result = sweep()
    assert result.reindexed == 3
    oldest = min(t.run_at for t in tasks)
    assert str(result).endswith(
        f"(the oldest reindexed task was due at "
        f"{oldest.isoformat(sep=' ', timespec='milliseconds')})"
    )
    assert str(result).startswith("replayed 0, reindexed 3, removed 0, corrected 0")


def _between_the_reads(monkeypatch, change) -> None:
    """Run ``change`` after the sweeper read the rows, before it reads Redis:
    what a worker or a user may do at that moment."""
    real = store_inspect.due_scores
    done: list[bool] = []

    def due_scores(*args, **kwargs):
        if not done:
            done.append(True)
            change()
        return real(*args, **kwargs)

    monkeypatch.setattr(store_inspect, "due_scores", due_scores)


def test_a_task_that_ran_to_its_end_between_the_reads_is_no_repair(
    redis_client, monkeypatch
):
    """The dispatcher moved it and a worker finished it after the sweeper
    read its row: gone from Redis, yet never lost."""
    task = schedule(add, args=[1, 1])

    def ran() -> None:
        Dispatcher().run(once=True)
        Worker().run(once=True)

    _between_the_reads(monkeypatch, ran)
    result = sweep()
    assert (result.reindexed, result.corrected) == (0, 0)
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED
    assert due_members(redis_client) == {}


def test_a_task_rescheduled_between_the_reads_keeps_its_new_time(
    redis_client, monkeypatch
):
    task = schedule(add, args=[1, 1], delay=60)
    _between_the_reads(monkeypatch, lambda: reschedule(task, delay=600))
    result = sweep()
    assert (result.reindexed, result.corrected) == (0, 0)
    task.refresh_from_db()
    assert due_members(redis_client) == {task.pk: expected_score(task)}


def test_a_task_already_in_its_ready_stream_is_not_added_again(redis_client):
    task = schedule(add, args=[1, 1])
    assert Dispatcher().run(once=True).moved == 1
    result = sweep()
    assert result.reindexed == 0
    assert due_members(redis_client) == {}
    assert redis_client.xlen(shard_keys("delayq", "default", 0).ready) == 1
    del task


def test_members_of_finished_cancelled_or_deleted_rows_are_removed(redis_client):
    done = schedule(add, args=[1, 1], delay=5)
    gone = schedule(add, args=[2, 2], delay=5)
    kept = schedule(add, args=[3, 3], delay=5)
    DelayedTask.objects.filter(pk=done.pk).update(status=Status.SUCCEEDED)
    DelayedTask.objects.filter(pk=gone.pk).delete()
    redis_client.zadd(shard_keys("delayq", "default", 0).due, {b"garbage": 1})
    result = sweep()
    assert result.removed == 3
    assert due_members(redis_client) == {kept.pk: expected_score(kept)}


def test_a_member_with_a_stale_score_is_corrected(redis_client):
    task = schedule(add, args=[1, 1], delay=30)
    redis_client.zadd(shard_keys("delayq", "default", 0).due, {task.pk.bytes: 5})
    assert sweep().corrected == 1
    assert due_members(redis_client) == {task.pk: expected_score(task)}


def test_the_window_bounds_the_work(redis_client):
    soon = schedule(add, args=[1, 1], delay=60)
    far = schedule(add, args=[2, 2], delay=3 * 3600)
    redis_client.flushall()
    assert sweep().reindexed == 1  # only what is due within the horizon
    assert set(due_members(redis_client)) == {soon.pk}
    # Once it comes within the horizon, the later one is repaired too, well
    # before it is due.
    five_minutes_before = far.run_at - datetime.timedelta(minutes=5)
    assert sweep(now=five_minutes_before).reindexed == 1
    assert set(due_members(redis_client)) == {soon.pk, far.pk}


def test_a_stuck_running_task_is_scheduled_again(redis_client):
    task = schedule(add, args=[1, 1])
    redis_client.flushall()  # its entry is gone with its worker
    row = DelayedTask.objects.get(pk=task.pk)
    assert claim(row, "1-0") == 1
    assert sweep().recovered == 0  # not stale yet
    later = timezone.now() + datetime.timedelta(seconds=301)
    assert sweep(now=later).recovered == 1
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert "worker lost" in row.last_error
    assert set(due_members(redis_client)) == {task.pk}


def test_a_stuck_task_out_of_attempts_is_failed(redis_client):
    task = schedule(add, args=[1, 1], max_attempts=1)
    redis_client.flushall()
    assert claim(DelayedTask.objects.get(pk=task.pk), "1-0") == 1
    failures = []

    def on_failed(sender, task, error, **kwargs):
        failures.append(error)

    task_failed.connect(on_failed)
    try:
        result = sweep(now=timezone.now() + datetime.timedelta(seconds=301))
    finally:
        task_failed.disconnect(on_failed)
    assert failures == [row_error := failures[0]]
    assert "worker lost" in row_error
    assert result.failed == 1
    row = DelayedTask.objects.get(pk=task.pk)
    assert row.status == Status.FAILED
    assert "worker lost during attempt 1 of 1" in row.last_error


def test_a_task_stuck_in_a_lost_batch_goes_back_without_losing_an_attempt(
    redis_client,
):
    tasks = [schedule(add, args=[i, i], max_attempts=1) for i in range(2)]
    redis_client.flushall()  # the entries are gone with their worker
    # Both due: run_at is rounded up to the millisecond, so "now" may not
    # have reached the second one yet.
    due = max(t.run_at for t in tasks)
    claimed = transitions.claim_due(
        [(t.pk, f"{n}-0") for n, t in enumerate(tasks)], due, "test-worker", "default"
    )
    assert len(claimed) == 2  # in one batch: nothing says which ever started
    later = timezone.now() + datetime.timedelta(seconds=301)
    assert sweep(now=later).recovered == 2
    for task in tasks:
        row = DelayedTask.objects.get(pk=task.pk)
        assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
    assert set(due_members(redis_client)) == {t.pk for t in tasks}


def test_a_running_task_whose_entry_is_pending_is_left_to_the_workers(
    redis_client,
):
    task = schedule(add, args=[1, 1])
    Dispatcher().run(once=True)
    ready = shard_keys("delayq", "default", 0).ready
    streams.ensure_groups(redis_client, [ready])
    streams.read(redis_client, "w-1", [ready], count=1, block_ms=None)
    assert claim(DelayedTask.objects.get(pk=task.pk), "1-0") == 1
    result = sweep(now=timezone.now() + datetime.timedelta(seconds=301))
    assert result.recovered == 0
    assert DelayedTask.objects.get(pk=task.pk).status == Status.RUNNING


def test_the_outbox_is_replayed(private_redis):
    private_redis.stop()
    task = schedule(add, args=[1, 1], delay=30)
    assert OutboxEntry.objects.count() == 1
    private_redis.start()
    connection.reset()
    assert sweep().replayed == 1
    assert not OutboxEntry.objects.exists()
    assert due_members(connection.get_client()) == {task.pk: expected_score(task)}


def test_finished_rows_are_pruned_after_their_retention(redis_client, settings):
    settings.DELAYQ = {
        **settings.DELAYQ,
        "RETAIN_SUCCEEDED": 3600,
        "RETAIN_FAILED": 86400,
    }
    old = timezone.now() - datetime.timedelta(hours=2)
    ok = schedule(add, args=[1, 1])
    failed = schedule(add, args=[2, 2])
    gone = schedule(add, args=[3, 3], delay=60)
    cancel(gone)
    recent = schedule(add, args=[4, 4])
    DelayedTask.objects.filter(pk=ok.pk).update(
        status=Status.SUCCEEDED, finished_at=old
    )
    DelayedTask.objects.filter(pk=failed.pk).update(
        status=Status.FAILED, finished_at=old
    )
    DelayedTask.objects.filter(pk=gone.pk).update(finished_at=old)
    DelayedTask.objects.filter(pk=recent.pk).update(
        status=Status.SUCCEEDED, finished_at=timezone.now()
    )
    assert sweep().pruned == 2
    assert set(DelayedTask.objects.values_list("pk", flat=True)) == {
        failed.pk,
        recent.pk,
    }


def test_concurrent_sweepers_take_turns(redis_client):
    redis_client.set("delayq:sweeper", "another-sweeper", px=60_000)
    assert sweep().skipped
    redis_client.delete("delayq:sweeper")
    assert not sweep().skipped


def test_the_command_prints_a_summary(redis_client, capsys):
    schedule(add, args=[1, 1], delay=60)
    redis_client.flushall()
    call_command("delayq_sweep", "--once")
    out = capsys.readouterr().out
    assert out.startswith("delayq_sweep: replayed 0, reindexed 1, removed 0")


def test_a_sweep_that_cannot_reach_redis_fails_the_once_command(private_redis):
    private_redis.stop()
    with pytest.raises(CommandError, match="sweep failed: ConnectionError"):
        call_command("delayq_sweep", "--once")


def test_a_looping_sweeper_survives_an_unreachable_redis(private_redis, caplog):
    private_redis.stop()
    sweeper = Sweeper()
    with caplog.at_level("WARNING", logger="django_delayq"):
        thread = threading.Thread(target=sweeper.run, kwargs={"interval": 0.05})
        thread.start()
        deadline = time.monotonic() + 10
        while caplog.text.count("ConnectionError") < 2:  # two failed passes
            assert time.monotonic() < deadline, "no failed pass was logged"
            time.sleep(0.05)
        assert thread.is_alive()
        sweeper.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_looping_sweeper_logs_idle_passes_after_the_first_at_debug(
    redis_client, caplog
):
    from django.db import connections

    sweeper = Sweeper()

    def sweep() -> None:
        try:
            sweeper.run(interval=0.05)
        finally:
            connections.close_all()  # this thread's own connections

    with caplog.at_level("DEBUG", logger="django_delayq"):
        thread = threading.Thread(target=sweep)
        thread.start()
        deadline = time.monotonic() + 10
        while caplog.text.count("sweep: replayed 0") < 3:  # three idle passes
            assert time.monotonic() < deadline, "no idle pass was logged"
            time.sleep(0.05)
        sweeper.stop()
        thread.join(timeout=10)
    passes = [r for r in caplog.records if r.getMessage().startswith("sweep: ")]
    # The first pass shows the sweeper is up; the idle ones after it are quiet.
    assert passes[0].levelname == "INFO"
    assert {r.levelname for r in passes[1:]} == {"DEBUG"}


def test_each_pass_sends_sweep_finished_with_its_result(redis_client):
    results = []

    def receiver(sender, result, **kwargs):
        results.append((sender, result))

    signals.sweep_finished.connect(receiver)
    try:
        done = Sweeper().sweep()
        # Another sweeper holds the lock: the pass is skipped, and said so.
        redis_client.set(
            sweeper_lock_key(get_settings().key_prefix), "other", px=10_000
        )
        skipped = Sweeper().sweep()
    finally:
        signals.sweep_finished.disconnect(receiver)
    assert not done.skipped
    assert skipped.skipped
    assert results == [(Sweeper, done), (Sweeper, skipped)]
