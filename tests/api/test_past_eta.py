"""An ``eta`` in the past means "as soon as possible": kept as given, run at
once, and counted late only by the time the queue took. One before 2000 is
a placeholder for a missing time (a timestamp of 0), and refused."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from django_delayq import metrics, schedule
from django_delayq.exceptions import InvalidSchedule
from django_delayq.models import DelayedTask, OutboxEntry, Status
from tests.support.helpers import drain, due_members, refresh
from tests.testapp import django_tasks
from tests.testapp.tasks import add

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
EARLIEST = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


def lateness_sum_and_count(task: DelayedTask) -> tuple[float, float]:
    labels = {"queue": task.queue, "task": task.name}
    name = "delayq_task_lateness_seconds"
    return (
        REGISTRY.get_sample_value(f"{name}_sum", labels) or 0.0,
        REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0,
    )


def test_a_past_eta_is_kept_runs_at_once_and_is_not_counted_late_by_its_age(
    redis_client,
):
    metrics.enable()
    week_ago = timezone.now() - datetime.timedelta(days=7)
    task = schedule(add, args=[1, 2], eta=week_ago)
    assert refresh(task).run_at == week_ago  # the caller's moment, as given
    before_sum, before_count = lateness_sum_and_count(task)
    drain()
    assert refresh(task).status == Status.SUCCEEDED
    after_sum, after_count = lateness_sum_and_count(task)
    assert after_count == before_count + 1
    # Late by the moments drain() took since it was scheduled, not by a week.
    assert 0.0 <= after_sum - before_sum < 3600


def test_the_earliest_eta_is_the_first_moment_of_2000(redis_client):
    task = schedule(add, args=[1, 2], eta=EARLIEST)
    assert refresh(task).run_at == EARLIEST
    with pytest.raises(InvalidSchedule, match="is before 2000-01-01"):
        schedule(add, args=[1, 2], eta=EARLIEST - datetime.timedelta(microseconds=1))
    assert DelayedTask.objects.count() == 1


def test_a_django_task_run_after_1970_is_refused_and_writes_nothing(redis_client):
    with pytest.raises(ValueError, match=r"run_after\) 1970-01-01T00:00:00"):
        django_tasks.add.using(run_after=EPOCH).enqueue(1, 2)
    assert not DelayedTask.objects.exists()
    assert not OutboxEntry.objects.exists()
    assert due_members(redis_client) == {}
