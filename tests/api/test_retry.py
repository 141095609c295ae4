"""retry(): a failed task is scheduled again, transactionally, with fresh attempts."""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import cancel, reschedule, retry, schedule, signals
from django_delayq.exceptions import (
    DuplicateTask,
    InvalidArgument,
    InvalidSchedule,
    InvalidTaskState,
    TaskNotFound,
)
from django_delayq.models import DelayedTask, Status
from tests.support.helpers import drain, expected_score, indexed_score, refresh
from tests.testapp.tasks import add, always_fails, fails_once, reads_meta

pytestmark = pytest.mark.django_db(transaction=True)


def failed_task(**options) -> DelayedTask:
    """A task that really failed: run by the worker until it gave up."""
    task = schedule(always_fails, args=["boom"], max_attempts=1, **options)
    drain()
    row = refresh(task)
    assert row.status == Status.FAILED
    return row


def test_retry_schedules_a_failed_task_now_with_its_attempts_reset(redis_client):
    task = failed_task()
    before = timezone.now()
    with transaction.atomic():
        retried = retry(task.pk)
        # Redis hears of it only once the transaction commits.
        assert indexed_score(redis_client, task) is None
    row = refresh(task)
    assert (retried.pk, row.status, row.attempts) == (task.pk, Status.SCHEDULED, 0)
    assert before <= row.run_at <= timezone.now() + datetime.timedelta(seconds=1)
    assert row.finished_at is None
    # The last failure stays visible until the next run replaces it.
    assert row.last_error == "RuntimeError: boom"
    assert "RuntimeError: boom" in row.last_traceback
    assert (row.name, row.args, row.queue) == (task.name, ["boom"], task.queue)
    assert indexed_score(redis_client, row) == expected_score(row)


def test_a_retried_task_gets_max_attempts_fresh_runs_and_can_succeed(redis_client):
    key = uuid.uuid4().hex  # fails_once fails on its first call per key
    task = schedule(fails_once, args=[key], max_attempts=1)
    drain()
    assert refresh(task).status == Status.FAILED
    retry(task)
    drain()
    row = refresh(task)
    assert (row.status, row.attempts, row.result) == (Status.SUCCEEDED, 1, key)
    assert row.last_error == row.last_traceback == ""


def test_a_retried_task_that_fails_again_is_failed_after_max_attempts(redis_client):
    task = failed_task()
    retry(task)
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert indexed_score(redis_client, row) is None


def test_retry_accepts_a_delay_or_an_eta_and_updates_the_instance(redis_client):
    task = failed_task()
    retry(task, delay=3600)
    assert task.status == Status.SCHEDULED
    assert task.attempts == 0
    assert task.run_at > timezone.now() + datetime.timedelta(minutes=59)
    assert indexed_score(redis_client, task) == expected_score(refresh(task))
    other = failed_task()
    eta = timezone.now() + datetime.timedelta(days=1)
    moved = retry(str(other.pk), eta=eta)
    assert abs(moved.run_at - eta) < datetime.timedelta(milliseconds=1)


def test_a_rolled_back_retry_leaves_the_task_failed_and_unindexed(redis_client):
    task = failed_task()
    with pytest.raises(RuntimeError), transaction.atomic():
        retry(task)
        raise RuntimeError
    assert refresh(task).status == Status.FAILED
    assert indexed_score(redis_client, task) is None


def test_retry_sends_task_scheduled_after_the_commit(redis_client):
    task = failed_task()
    seen = []

    def receiver(sender, task, **kwargs):
        seen.append((task.pk, task.status))

    signals.task_scheduled.connect(receiver)
    try:
        with transaction.atomic():
            retry(task)
            assert seen == []
        assert seen == [(task.pk, Status.SCHEDULED)]
    finally:
        signals.task_scheduled.disconnect(receiver)


def test_retry_refuses_tasks_that_are_not_failed(redis_client):
    task = schedule(add, args=[1, 1], delay=60)
    with pytest.raises(InvalidTaskState, match="is scheduled; only failed tasks"):
        retry(task)
    for status in (Status.RUNNING, Status.SUCCEEDED, Status.CANCELLED):
        DelayedTask.objects.filter(pk=task.pk).update(status=status)
        with pytest.raises(InvalidTaskState, match=f"is {status}; only failed"):
            retry(task.pk)
        assert refresh(task).status == status
    with pytest.raises(TaskNotFound, match="nothing to retry"):
        retry(uuid.uuid4())


def test_retry_validates_its_arguments_before_writing():
    with pytest.raises(InvalidArgument, match="needs the task"):
        retry(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="is not a task id"):
        retry("not-a-uuid")
    with pytest.raises(TypeError, match="Expected a DelayedTask"):
        retry(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be negative"):
        retry(uuid.uuid4(), delay=-1)


def test_retry_refuses_a_key_another_active_task_holds_and_writes_nothing(
    redis_client,
):
    task = failed_task(key="invoice:7")
    holder = schedule(add, args=[1, 1], delay=60, key="invoice:7")
    with pytest.raises(DuplicateTask) as caught:
        retry(task)
    assert caught.value.key == "invoice:7"
    assert caught.value.existing_id == holder.pk
    assert str(caught.value) == (
        f"Task {task.pk} cannot be retried: its key='invoice:7' is held by "
        f"scheduled task {holder.pk}. Cancel that task, or wait until it "
        f"finishes, then retry."
    )
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.FAILED, 1)
    assert indexed_score(redis_client, task) is None
    # Once the key is free again, the retry goes through.
    cancel(holder)
    assert retry(task).status == Status.SCHEDULED


def test_the_callers_transaction_survives_a_refused_retry(redis_client):
    task = failed_task(key="k")
    schedule(add, args=[1, 1], delay=60, key="k")
    done = schedule(add, args=[2, 2], delay=60)
    DelayedTask.objects.filter(pk=done.pk).update(status=Status.SUCCEEDED)
    with transaction.atomic():
        with pytest.raises(DuplicateTask):
            retry(task)
        with pytest.raises(InvalidTaskState):
            retry(done)
        other = schedule(add, args=[3, 3], delay=60)
    assert refresh(other).status == Status.SCHEDULED
    assert refresh(task).status == Status.FAILED


def test_a_task_keeps_its_metadata_through_its_retries(redis_client):
    """A retry, automatic or by retry(), runs the same row: the run sees the
    metadata the task was scheduled with."""
    key = f"retried-{uuid.uuid4()}"
    task = reads_meta.schedule(args=[key], kwargs={"fail_first": True})
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert row.meta == {"team": "billing", "tenant": "default"}
    reschedule(task, delay=0)  # the backoff, skipped
    drain()
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SUCCEEDED, 2)
    assert row.result["meta"] == {"team": "billing", "tenant": "default"}

    failed = failed_task(meta={"tenant": "acme"})
    assert retry(failed).meta == {"tenant": "acme"}


def test_retry_keeps_the_expiry_and_refuses_a_task_that_has_expired(redis_client):
    task = failed_task(expires=600)
    expires_at = task.expires_at
    with pytest.raises(InvalidSchedule, match="would make it due then or later"):
        retry(task, delay=900)
    assert refresh(task).status == Status.FAILED
    retried = retry(task, delay=5)
    assert (retried.status, retried.expires_at) == (Status.SCHEDULED, expires_at)

    expired = failed_task(expires=600)
    DelayedTask.objects.filter(pk=expired.pk).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    with transaction.atomic():
        with pytest.raises(InvalidSchedule) as caught:
            retry(expired)
        other = schedule(add, args=[3, 3], delay=60)
    assert "it can no longer run, so retry() would change nothing" in str(caught.value)
    assert refresh(expired).status == Status.FAILED
    assert indexed_score(redis_client, expired) is None
    assert refresh(other).status == Status.SCHEDULED
