"""``DelayedTask.objects.due(by=)`` and ``.overdue(by=, grace=)``: the one
definition of a due and a late task, which the claim, the sweeper, the
rebuild of a lost shard, the planner's catch-up and every report use."""

from __future__ import annotations

import datetime

import pytest
from django.db.models import Count

from django_delayq.models import DelayedTask, Status, due_by, overdue_by

pytestmark = pytest.mark.django_db

NOW = datetime.datetime(2026, 11, 26, 10, 0, 0, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)
GRACE = 5 * SECOND


@pytest.fixture
def rows() -> dict[str, DelayedTask]:
    """One task per case, named after it."""
    cases = {
        "long past": (Status.SCHEDULED, NOW - 60 * SECOND),
        "just past the grace": (Status.SCHEDULED, NOW - GRACE - SECOND),
        "at the grace": (Status.SCHEDULED, NOW - GRACE),
        "just past": (Status.SCHEDULED, NOW - SECOND),
        "now": (Status.SCHEDULED, NOW),
        "future": (Status.SCHEDULED, NOW + SECOND),
        "running": (Status.RUNNING, NOW - 60 * SECOND),
        "succeeded": (Status.SUCCEEDED, NOW - 60 * SECOND),
        "failed": (Status.FAILED, NOW - 60 * SECOND),
        "cancelled": (Status.CANCELLED, NOW - 60 * SECOND),
    }
    return {
        name: DelayedTask.objects.create(name=name, status=status, run_at=run_at)
        for name, (status, run_at) in cases.items()
    }


def names(queryset) -> set[str]:
    return set(queryset.values_list("name", flat=True))


def test_due_is_scheduled_and_run_at_not_after_the_moment(rows):
    assert names(DelayedTask.objects.due(by=NOW)) == {
        "long past",
        "just past the grace",
        "at the grace",
        "just past",
        "now",
    }
    assert names(DelayedTask.objects.due(by=NOW - 61 * SECOND)) == set()


def test_overdue_is_scheduled_and_more_than_the_grace_late(rows):
    assert names(DelayedTask.objects.overdue(by=NOW, grace=GRACE)) == {
        "long past",
        "just past the grace",
    }
    # Without a grace: late is strictly before the moment, unlike due.
    assert names(DelayedTask.objects.overdue(by=NOW)) == names(
        DelayedTask.objects.due(by=NOW)
    ) - {"now"}


def test_the_querysets_chain_with_using_and_other_filters(rows):
    tasks = DelayedTask.objects.using("default").filter(name__startswith="just")
    assert names(tasks.due(by=NOW)) == {"just past the grace", "just past"}
    assert names(tasks.overdue(by=NOW, grace=GRACE)) == {"just past the grace"}


def test_the_conditions_count_in_an_aggregate_as_the_querysets_filter(rows):
    counts = DelayedTask.objects.aggregate(
        due=Count("pk", filter=due_by(NOW)),
        overdue=Count("pk", filter=overdue_by(NOW, GRACE)),
    )
    assert counts == {
        "due": DelayedTask.objects.due(by=NOW).count(),
        "overdue": DelayedTask.objects.overdue(by=NOW, grace=GRACE).count(),
    }
