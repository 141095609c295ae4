"""cancel() and reschedule(): transactional like schedule()."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from django_delayq import acancel, cancel, reschedule, schedule
from django_delayq.exceptions import (
    InvalidArgument,
    InvalidSchedule,
    InvalidTaskState,
    TaskNotFound,
)
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import expected_score, indexed_score
from tests.testapp.tasks import add, order_cancel

pytestmark = pytest.mark.django_db(transaction=True)


def test_cancel_marks_the_row_and_removes_the_member_after_commit(redis_client):
    task = schedule(order_cancel, delay=900, args=[1])
    with transaction.atomic():
        assert cancel(task) is True
        assert indexed_score(redis_client, task) is not None
    assert indexed_score(redis_client, task) is None
    row = DelayedTask.objects.get(pk=task.pk)
    assert row.status == Status.CANCELLED
    assert row.finished_at is not None
    assert task.status == Status.CANCELLED


def test_rolled_back_cancel_leaves_the_task_scheduled_and_indexed(redis_client):
    task = schedule(order_cancel, delay=900, args=[1])
    with pytest.raises(RuntimeError), transaction.atomic():
        cancel(task.pk)
        raise RuntimeError
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SCHEDULED
    assert indexed_score(redis_client, task) == expected_score(task)


def test_cancel_by_key_by_id_and_by_string_id(redis_client):
    a = schedule(add, delay=60, args=[1, 1], key="a")
    b = schedule(add, delay=60, args=[1, 1])
    c = schedule(add, delay=60, args=[1, 1])
    assert cancel(key="a") is True
    assert cancel(b.pk) is True
    assert cancel(str(c.pk)) is True
    for task in (a, b, c):
        assert DelayedTask.objects.get(pk=task.pk).status == Status.CANCELLED
        assert indexed_score(redis_client, task) is None


def test_cancel_returns_false_when_there_is_nothing_to_cancel(redis_client):
    task = schedule(add, delay=60, args=[1, 1], key="k")
    assert cancel(task) is True
    assert cancel(task) is False
    assert cancel(key="k") is False
    assert cancel(key="never-used") is False
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.SUCCEEDED)
    assert cancel(task.pk) is False  # finished
    assert DelayedTask.objects.get(pk=task.pk).status == Status.SUCCEEDED


def test_cancel_of_a_running_task_cancels_its_row(redis_client):
    """The row's side; the worker's is tests/worker/test_cancel_running.py."""
    task = schedule(add, delay=60, args=[1, 1], key="running-key")
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.RUNNING, attempts=2)
    assert cancel(key="running-key") is True
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (Status.CANCELLED, 2)
    assert row.last_error == "cancelled while running (attempt 2)"
    assert row.finished_at is not None
    assert cancel(task) is False  # already cancelled


def test_acancel_cancels_a_running_task_too(redis_client):
    task = schedule(add, delay=60, args=[1, 1])
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.RUNNING, attempts=1)
    assert async_to_sync(acancel)(task.pk) is True
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.status, row.last_error) == (
        Status.CANCELLED,
        "cancelled while running (attempt 1)",
    )


def test_cancel_needs_exactly_one_of_task_and_key():
    with pytest.raises(InvalidArgument, match="exactly one"):
        cancel()
    with pytest.raises(InvalidArgument, match="exactly one"):
        cancel("x", key="y")
    with pytest.raises(InvalidArgument, match="is not a task id"):
        cancel("not-a-uuid")
    with pytest.raises(TypeError, match="Expected a DelayedTask"):
        cancel(42)  # type: ignore[arg-type]


def test_reschedule_moves_the_row_and_the_score(redis_client):
    task = schedule(order_cancel, delay=900, args=[1])
    old_run_at, old_score = task.run_at, expected_score(task)
    with transaction.atomic():
        moved = reschedule(task, delay=30)
        assert indexed_score(redis_client, task) == old_score  # not yet committed
    assert moved.run_at < old_run_at
    assert task.run_at == moved.run_at
    assert DelayedTask.objects.get(pk=task.pk).run_at == moved.run_at
    assert indexed_score(redis_client, moved) == expected_score(moved)


def test_reschedule_later_by_key_with_an_eta(redis_client):
    schedule(add, delay=60, args=[1, 1], key="remind:7")
    eta = timezone.now() + datetime.timedelta(days=1)
    moved = reschedule(key="remind:7", eta=eta)
    assert abs(moved.run_at - eta) < datetime.timedelta(milliseconds=1)
    assert indexed_score(redis_client, moved) == expected_score(moved)


def test_rolled_back_reschedule_changes_nothing(redis_client):
    task = schedule(add, delay=60, args=[1, 1])
    run_at, score = task.run_at, expected_score(task)
    with pytest.raises(RuntimeError), transaction.atomic():
        reschedule(task.pk, delay=3600)
        raise RuntimeError
    assert DelayedTask.objects.get(pk=task.pk).run_at == run_at
    assert indexed_score(redis_client, task) == score


def test_reschedule_refuses_finished_running_and_unknown_tasks(redis_client):
    task = schedule(add, delay=60, args=[1, 1], key="k")
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.RUNNING)
    with pytest.raises(InvalidTaskState, match="running"):
        reschedule(task, delay=5)
    with pytest.raises(InvalidTaskState, match="running"):
        reschedule(key="k", delay=5)
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.SUCCEEDED)
    with pytest.raises(InvalidTaskState, match="succeeded"):
        reschedule(task, delay=5)
    with pytest.raises(TaskNotFound, match="key='k'"):
        reschedule(key="k", delay=5)


def test_the_callers_transaction_survives_a_refused_reschedule(redis_client):
    task = schedule(add, delay=60, args=[1, 1])
    DelayedTask.objects.filter(pk=task.pk).update(status=Status.SUCCEEDED)
    with transaction.atomic():
        with pytest.raises(InvalidTaskState):
            reschedule(task, delay=5)
        with pytest.raises(TaskNotFound):
            reschedule(key="nobody", delay=5)
        other = schedule(add, delay=60, args=[2, 2])
    assert DelayedTask.objects.get(pk=other.pk).status == Status.SCHEDULED


def test_reschedule_validates_the_new_time_before_writing(redis_client):
    task = schedule(add, delay=60, args=[1, 1])
    with pytest.raises(ValueError, match="cannot be negative"):
        reschedule(task, delay=-5)
    assert DelayedTask.objects.get(pk=task.pk).run_at == task.run_at


def test_reschedule_keeps_the_metadata_unless_given_new(redis_client):
    task = schedule(order_cancel, delay=900, args=[1], meta={"tenant": "acme"})
    moved = reschedule(task, delay=60)
    assert moved.meta == {"tenant": "acme"}
    replaced = reschedule(task, delay=60, meta={"reason": "paid later"})
    assert replaced.meta == task.meta == {"reason": "paid later"}
    assert DelayedTask.objects.get(pk=task.pk).meta == {"reason": "paid later"}
    # meta={} removes it: NULL, as a task scheduled without any.
    cleared = reschedule(key=None, task_or_id=task.pk, delay=60, meta={})
    assert cleared.meta is None
    assert DelayedTask.objects.filter(pk=task.pk, meta__isnull=True).exists()


def test_reschedule_checks_new_metadata_before_writing(redis_client):
    task = schedule(order_cancel, delay=900, args=[1], meta={"tenant": "acme"})
    with transaction.atomic():
        with pytest.raises(ValueError, match=r"meta\['ids'\] is a set"):
            reschedule(task, delay=5, meta={"ids": {1}})
        other = schedule(add, delay=60, args=[2, 2])
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.run_at, row.meta) == (task.run_at, {"tenant": "acme"})
    assert indexed_score(redis_client, row) == expected_score(task)
    assert DelayedTask.objects.get(pk=other.pk).status == Status.SCHEDULED


def test_reschedule_keeps_the_expiry_and_refuses_a_time_past_it(redis_client):
    task = schedule(add, delay=60, args=[1, 1], expires=600, key="exp")
    expires_at = task.expires_at
    moved = reschedule(key="exp", delay=300)
    assert moved.expires_at == expires_at
    score = indexed_score(redis_client, task)
    assert score == expected_score(moved)
    with transaction.atomic():
        with pytest.raises(InvalidSchedule) as caught:
            reschedule(task, delay=600)
        # Refused after its own block: the caller's transaction goes on.
        other = schedule(add, delay=60, args=[2, 2])
    assert re.fullmatch(
        rf"Task {task.pk} expires at {re.escape(expires_at.isoformat())}; "
        r"reschedule\(\) to \S+ would make it due then or later, so it could "
        r"never run\. Pass an earlier delay= or eta=, or schedule\(\) a new "
        r"task with a later expires=\.",
        str(caught.value),
    )
    row = DelayedTask.objects.get(pk=task.pk)
    assert (row.run_at, row.expires_at) == (moved.run_at, expires_at)
    assert indexed_score(redis_client, task) == score
    assert DelayedTask.objects.get(pk=other.pk).status == Status.SCHEDULED


def test_a_task_whose_expiry_has_passed_cannot_be_rescheduled(redis_client):
    task = schedule(add, delay=60, args=[1, 1], expires=120)
    passed = timezone.now() - datetime.timedelta(seconds=1)
    DelayedTask.objects.filter(pk=task.pk).update(expires_at=passed)
    with pytest.raises(InvalidSchedule, match=r"expired at .*: it can no longer"):
        reschedule(task, delay=0)
    # An eta in the past is due now: past the expiry all the same.
    with pytest.raises(InvalidSchedule, match="it can no longer run"):
        reschedule(task, eta=passed - datetime.timedelta(hours=1))
    assert DelayedTask.objects.get(pk=task.pk).run_at == task.run_at


def test_cancel_ids_cancels_a_batch_as_cancel_cancels_one(redis_client):
    """The batch form ``delayq_tasks cancel`` and the admin use: the scheduled
    and the running tasks among the ids, in one transaction, each left as
    ``cancel()`` leaves it; finished and unknown ids untouched."""
    from django_delayq import changes, signals

    scheduled = [schedule(order_cancel, delay=900, args=[i]) for i in range(3)]
    running = schedule(add, delay=60, args=[1, 1])
    DelayedTask.objects.filter(pk=running.pk).update(status=Status.RUNNING, attempts=2)
    finished = schedule(add, delay=60, args=[2, 2])
    assert cancel(finished)
    finished_at = DelayedTask.objects.get(pk=finished.pk).finished_at
    unknown = uuid.uuid4()
    heard: list[uuid.UUID] = []

    def on_cancel(sender: object, task: DelayedTask, **kwargs: object) -> None:
        heard.append(task.pk)

    signals.task_cancelled.connect(on_cancel, sender=DelayedTask)
    try:
        with transaction.atomic():
            got = changes.cancel_ids(
                [t.pk for t in [*scheduled, running, finished]] + [unknown]
            )
            # Redis and the signal wait for the commit.
            assert heard == []
            assert all(indexed_score(redis_client, t) is not None for t in scheduled)
    finally:
        signals.task_cancelled.disconnect(on_cancel)

    assert got == {t.pk for t in [*scheduled, running]}
    assert sorted(heard) == sorted(got)
    for task in scheduled:
        row = DelayedTask.objects.get(pk=task.pk)
        assert row.status == Status.CANCELLED
        assert row.finished_at is not None
        assert indexed_score(redis_client, task) is None
    row = DelayedTask.objects.get(pk=running.pk)
    assert (row.status, row.last_error) == (
        Status.CANCELLED,
        "cancelled while running (attempt 2)",
    )
    # Cancelled before: left as it was.
    assert DelayedTask.objects.get(pk=finished.pk).finished_at == finished_at
    assert changes.cancel_ids([t.pk for t in scheduled]) == set()  # already done
