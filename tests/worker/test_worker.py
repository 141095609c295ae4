"""The worker runs what the rows say, exactly once, and never forged input."""

from __future__ import annotations

import pickle
import time
import uuid

import pytest

from django_delayq import cancel, schedule, signals
from django_delayq.dispatcher import Dispatcher
from django_delayq.models import DelayedTask, Status
from django_delayq.outcomes import record_failure
from django_delayq.registry import get
from django_delayq.store import streams
from django_delayq.store.keys import shard_keys
from django_delayq.text import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS
from django_delayq.worker import Worker
from django_delayq.worker.execution import execute, run_alone
from tests.support.helpers import claim, drain, due_members, expected_score, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import (
    add,
    always_fails,
    create_order,
    raises_at_length,
    returns_a_set,
    returns_text,
)

pytestmark = pytest.mark.django_db(transaction=True)

READY = shard_keys("delayq", "default", 0).ready
DEAD = shard_keys("delayq", "default", 0).dead


def test_a_due_task_runs_once_with_its_arguments(redis_client):
    task = schedule(add, args=[2, 3])
    drain()
    row = refresh(task)
    assert row.status == Status.SUCCEEDED
    assert row.result == 5
    assert row.attempts == 1
    assert row.started_at >= row.run_at
    assert row.finished_at >= row.started_at
    assert redis_client.xlen(READY) == 0  # acknowledged and deleted
    assert due_members(redis_client) == {}


def test_each_outcome_is_logged_as_one_key_value_line(redis_client, caplog):
    task = schedule(add, args=[2, 3])
    with caplog.at_level("INFO", logger="django_delayq"):
        drain()
    [line] = [r.getMessage() for r in caplog.records if "succeeded" in r.getMessage()]
    assert line.startswith(f"task succeeded id={task.pk} name={add.name} ")
    assert "queue=default attempt=1/3 late_ms=" in line
    assert "duration_ms=" in line


def test_a_database_task_takes_effect_exactly_once(redis_client):
    task = schedule(create_order, args=["paid"])
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    assert list(Order.objects.values_list("status", flat=True)) == ["paid"]


def test_a_failing_task_is_retried_with_backoff_then_failed(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    retried: list[int] = []

    def on_retry(sender, task, error, run_at, **kwargs):
        retried.append(task.attempts)
        assert "boom" in error

    signals.task_retried.connect(on_retry)
    try:
        task = schedule(always_fails, args=["boom"])
        drain()
    finally:
        signals.task_retried.disconnect(on_retry)
    row = refresh(task)
    assert row.status == Status.FAILED
    assert row.attempts == 3
    assert row.last_error == "RuntimeError: boom"
    assert "raise RuntimeError(message)" in row.last_traceback
    assert retried == [1, 2]


def test_a_retry_waits_in_the_due_set(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 60.0}
    task = schedule(always_fails, args=["later"])
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.run_at > row.started_at
    # The backoff for attempt 1 is 60 s, with jitter between 0.5 and 1.
    assert 30 <= (row.run_at - row.started_at).total_seconds() <= 61
    assert due_members(redis_client) == {row.pk: expected_score(row)}


def test_a_cancelled_task_never_runs(redis_client):
    task = schedule(create_order, args=["cancelled?"])
    assert Dispatcher().run(once=True).moved == 1
    assert cancel(task) is True
    assert Worker().run(once=True).processed == 1
    assert refresh(task).status == Status.CANCELLED
    assert not Order.objects.exists()
    assert redis_client.xlen(READY) == 0


def test_an_entry_for_a_task_not_yet_due_is_put_back(redis_client):
    task = schedule(create_order, args=["early"], delay=3600)
    redis_client.zrem(shard_keys("delayq", "default", 0).due, task.pk.bytes)
    redis_client.xadd(READY, {"id": task.pk.bytes})
    Worker().run(once=True)
    assert refresh(task).status == Status.SCHEDULED
    assert not Order.objects.exists()
    assert due_members(redis_client) == {task.pk: expected_score(task)}


def test_forged_entries_are_dead_lettered_and_run_nothing(redis_client):
    streams.ensure_groups(redis_client, [READY])
    blob = pickle.dumps(("os.system", "touch /tmp/pwned"))
    redis_client.xadd(READY, {"id": blob})
    redis_client.xadd(READY, {"name": "os.system", "args": "[]"})
    redis_client.xadd(READY, {"id": uuid.uuid4().bytes})  # no such row
    stats = Worker().run(once=True)
    assert stats.dead_lettered == 3
    reasons = sorted(fields[b"reason"] for _, fields in redis_client.xrange(DEAD))
    assert reasons == [
        b"no task row has this id",
        b"not a task id entry",
        b"not a task id entry",
    ]
    assert redis_client.xlen(READY) == 0


def test_an_unregistered_task_name_is_retried_then_failed_and_dead_lettered(
    redis_client, settings
):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    row = DelayedTask.objects.create(
        name="shop.tasks.removed_in_this_release",
        run_at=add.schedule(args=[1, 2]).run_at,
    )
    redis_client.xadd(READY, {"id": row.pk.bytes})
    drain()
    row = refresh(row)
    # Retried (a newer worker may know it), then failed: no code ever ran.
    assert (row.status, row.attempts) == (Status.FAILED, 3)
    assert "is not registered in this worker" in row.last_error
    [(_, fields)] = redis_client.xrange(DEAD)
    assert b"not registered" in fields[b"reason"]


def test_the_claiming_entry_retried_after_a_database_error_runs_the_task(
    redis_client,
):
    task = schedule(create_order, args=["retried"])
    # Claimed by entry 1-0, then the database went away before the task ran;
    # the worker kept the entry and tries it again.
    assert claim(refresh(task), "1-0") == 1
    assert execute(
        task.pk, worker="test-worker", stream=READY, entry_id="1-0"
    ).disposition.value == ("done")
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 2)
    assert row.worker_ids == ["test-worker", "test-worker"]  # one per attempt
    assert Order.objects.count() == 1


def test_a_duplicate_entry_of_a_running_task_is_acknowledged_and_ignored(
    redis_client,
):
    task = schedule(create_order, args=["once"])
    assert claim(refresh(task), "1-0") == 1  # running, claimed by entry 1-0
    outcome = execute(task.pk, worker="test-worker", stream=READY, entry_id="2-0")
    assert outcome.disposition.value == "done"
    row = refresh(task)
    assert (row.status, row.attempts, row.claim_entry) == (Status.RUNNING, 1, "1-0")
    assert not Order.objects.exists()


def test_a_stale_workers_late_completion_is_discarded(redis_client):
    task = schedule(create_order, args=["stale"])
    row = refresh(task)
    assert claim(row, "1-0") == 1
    # The worker was paused past its visibility timeout; another took over.
    DelayedTask.objects.filter(pk=task.pk).update(attempts=2)
    assert run_alone(row, get(row.name)) is False  # fenced: leave the entry
    assert not Order.objects.exists()  # its writes were rolled back
    assert refresh(task).status == Status.RUNNING


def test_an_entry_left_by_a_dead_worker_is_reclaimed_and_run_once(redis_client):
    task = schedule(create_order, args=["reclaimed"])
    Dispatcher().run(once=True)
    # A worker read the entry, claimed the row, then died mid-task.
    streams.ensure_groups(redis_client, [READY])
    [entry] = streams.read(redis_client, "dead-worker", [READY], count=1, block_ms=None)
    assert claim(refresh(task), entry.entry_id.decode()) == 1
    time.sleep(0.3)
    stats = Worker(visibility_timeout=0.2).run(once=True)
    assert stats.reclaimed == 1
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 2)
    assert Order.objects.count() == 1
    assert redis_client.xpending(READY, streams.GROUP)["pending"] == 0


def test_a_return_value_json_cannot_hold_is_not_stored(redis_client):
    task = schedule(returns_a_set)
    drain()
    row = refresh(task)
    assert row.status == Status.SUCCEEDED
    assert row.result is None


def test_signals_follow_the_tasks_life(redis_client):
    seen: list[tuple[str, str]] = []

    def recorder(name: str):
        def receive(sender, task, **kwargs):
            seen.append((name, task.name))

        return receive

    names = ("task_scheduled", "task_started", "task_succeeded", "task_cancelled")
    receivers = {name: recorder(name) for name in names}
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver)
    try:
        schedule(add, args=[1, 1])
        gone = schedule(add, args=[2, 2], delay=60)
        cancel(gone)
        drain()
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver)
    name = add.name
    assert seen == [
        ("task_scheduled", name),
        ("task_scheduled", name),
        ("task_cancelled", name),
        ("task_started", name),
        ("task_succeeded", name),
    ]


def test_a_broken_signal_receiver_does_not_stop_the_worker(redis_client):
    def broken(sender, **kwargs):
        raise ValueError("receiver bug")

    signals.task_started.connect(broken)
    try:
        task = schedule(add, args=[1, 1])
        drain()
    finally:
        signals.task_started.disconnect(broken)
    assert refresh(task).status == Status.SUCCEEDED


def test_the_claiming_entry_id_in_another_stream_does_not_take_the_task_over(
    redis_client,
):
    task = schedule(create_order, args=["once"])
    assert claim(refresh(task), "1-0") == 1  # running, claimed by entry 1-0
    # The same entry id in another shard's stream: unique in its own stream
    # only, so it is not the delivery that claimed the attempt.
    other_shard = shard_keys("delayq", "orders", 1)
    elsewhere = other_shard.ready
    redis_client.xadd(elsewhere, {"id": task.pk.bytes}, id="1-0")
    drain()
    row = refresh(task)
    assert (row.status, row.attempts, row.claim_entry) == (Status.RUNNING, 1, "1-0")
    assert not Order.objects.exists()
    [(_, fields)] = redis_client.xrange(other_shard.dead)
    assert fields[b"reason"].decode().startswith(f"entry 1-0 of {elsewhere} names")
    assert redis_client.xlen(elsewhere) == 0


def test_execute_ignores_finished_and_missing_rows(redis_client):
    task = schedule(add, args=[1, 1])
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.SUCCEEDED)
    done = execute(task.pk, worker="test-worker", stream=READY, entry_id="1-0")
    assert done.disposition.value == "done"
    missing = execute(
        uuid.uuid4(),
        worker="test-worker",
        stream=READY,
        entry_id="2-0",
    )
    assert missing.disposition.value == "dead"


def test_worker_recreates_its_group_after_redis_lost_data(redis_client):
    schedule(add, args=[1, 1])
    drain()
    redis_client.flushall()
    task = schedule(add, args=[2, 2])
    drain()
    assert refresh(task).status == Status.SUCCEEDED


def test_a_worker_keeps_its_database_connection_between_tasks(redis_client, settings):
    from tests.testapp.tasks import connection_identity

    # Django's default: one connection per request. A worker is not one.
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    tasks = [schedule(connection_identity) for _ in range(3)]
    drain()
    sessions = {refresh(task).result for task in tasks}
    assert len(sessions) == 1
    assert None not in sessions


def test_a_worker_replaces_a_database_session_that_was_terminated(redis_client):
    """As when PostgreSQL restarts or an administrator ends the session."""
    from django.db import DatabaseError, connection, connections

    from django_delayq.db.connections import recycle_connections

    if connection.vendor == "sqlite":
        pytest.skip("an SQLite database is a file: it has no session to end")
    # The session's id, and how another session ends it.
    whoami, terminate = {
        "postgresql": ("SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%s)"),
        "mysql": ("SELECT CONNECTION_ID()", "KILL CONNECTION %s"),
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(whoami)
        [(pid,)] = cursor.fetchall()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(terminate, [pid])
    finally:
        other.close()
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    recycle_connections()
    with connection.cursor() as cursor:
        cursor.execute(whoami)
        [(new_pid,)] = cursor.fetchall()
    assert new_pid != pid


def test_a_paused_attempt_cannot_finish_the_run_that_retried_the_task(redis_client):
    from django_delayq import retry
    from django_delayq.outcomes import fail

    task = schedule(create_order, args=["stale"], max_attempts=1)
    stale = refresh(task)
    assert claim(stale, "1-0") == 1  # a worker starts attempt 1, then pauses
    # Meanwhile it is given up for lost, the task fails, an operator retries
    # it, and another worker starts the new run's attempt 1.
    assert fail(refresh(task), 1, "worker lost", "", expect=Status.RUNNING)
    retry(task)
    assert claim(refresh(task), "2-0") == 1
    # The paused worker wakes up and finishes: its outcome must not count.
    assert run_alone(stale, get(stale.name)) is False
    row = refresh(task)
    assert (row.status, row.attempts, row.claim_entry) == (Status.RUNNING, 1, "2-0")
    assert not Order.objects.filter(status="stale").exists()  # rolled back


def test_a_paused_attempts_failure_cannot_reschedule_a_task_that_moved_on(
    redis_client,
):
    from django_delayq.outcomes import fail

    task = schedule(add, args=[1, 1], max_attempts=3)
    stale = refresh(task)
    assert claim(stale, "1-0") == 1  # a worker starts attempt 1, then pauses
    # Meanwhile the attempt is given up for lost and the task fails.
    assert fail(refresh(task), 1, "worker lost", "", expect=Status.RUNNING)
    # The paused worker wakes up, and its attempt raised: no retry may follow.
    record_failure(stale, RuntimeError("late"), error="late", trace="")
    row = refresh(task)
    assert (row.status, row.last_error) == (Status.FAILED, "worker lost")


def test_a_huge_error_is_kept_clipped_with_its_type_and_its_end(redis_client):
    task = schedule(raises_at_length, args=[20_000_000])
    drain()
    row = refresh(task)
    assert row.status == Status.FAILED
    assert len(row.last_error) <= MAX_ERROR_CHARS
    assert row.last_error.startswith("ValueError: start xxx")
    assert row.last_error.endswith("xxx end")
    assert "characters cut ...]" in row.last_error
    assert len(row.last_traceback) <= MAX_TRACEBACK_CHARS
    assert row.last_traceback.startswith("Traceback (most recent call last):")
    assert row.last_traceback.rstrip().endswith("xxx end")


def test_a_return_value_over_max_result_bytes_is_not_stored(
    redis_client, settings, caplog
):
    settings.DELAYQ = {**settings.DELAYQ, "MAX_RESULT_BYTES": 1000}
    fits, too_large = (
        schedule(returns_text, args=[998]),
        schedule(returns_text, args=[999]),
    )
    drain()
    assert refresh(fits).result == "r" * 998  # 1,000 bytes with its quotes
    row = refresh(too_large)
    assert (row.status, row.result) == (Status.SUCCEEDED, None)
    assert (
        "succeeded; its return value is not stored: the return value encodes to "
        'more than 1000 bytes of JSON, over the DELAYQ["MAX_RESULT_BYTES"] limit '
        "of 1000. Return an id or a summary" in caplog.text
    )


def test_a_failed_task_is_logged_with_its_traceback(redis_client, caplog):
    task = schedule(raises_at_length, args=[3])
    drain()
    [line] = [r for r in caplog.records if r.getMessage().startswith("task failed")]
    assert line.levelname == "ERROR"
    text = line.getMessage()
    assert f"id={task.pk}" in text.splitlines()[0]
    assert "\nTraceback (most recent call last):\n" in text
    assert text.endswith("ValueError: start xxx end")


def test_each_dead_letter_sends_entry_dead_lettered(redis_client):
    sent = []

    def receiver(sender, stream, reason, **kwargs):
        sent.append((sender, stream, reason))

    streams.ensure_groups(redis_client, [READY])
    redis_client.xadd(READY, {"id": uuid.uuid4().bytes})  # no such row
    signals.entry_dead_lettered.connect(receiver)
    try:
        Worker().run(once=True)
    finally:
        signals.entry_dead_lettered.disconnect(receiver)
    assert sent == [(DelayedTask, READY, "no task row has this id")]
