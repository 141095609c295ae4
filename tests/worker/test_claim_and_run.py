"""``claim_and_run()``: the worker's public entry for a row that should run
now, which the testing toolkit runs a due row through instead of faking a
stream delivery."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from django_delayq import cancel, schedule
from django_delayq.models import DelayedTask, Status
from django_delayq.worker import Outcome, claim_and_run
from django_delayq.worker.execution import DONE
from tests.support.helpers import due_members, refresh
from tests.testapp.models import Order
from tests.testapp.tasks import always_fails, create_order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]


def _run(row: DelayedTask, claim_entry: str = "entry-1") -> Outcome:
    return claim_and_run(
        row, claim_entry=claim_entry, worker="test-worker", using="default"
    )


def test_a_due_row_is_claimed_run_and_recorded(redis_client):
    task = schedule(create_order, args=["entry"])
    outcome = _run(refresh(task))
    assert outcome == DONE
    row = refresh(task)
    [order] = Order.objects.all()
    assert (row.status, row.attempts, row.result) == (Status.SUCCEEDED, 1, order.pk)
    # What claimed it is recorded where a worker records its stream entry.
    assert (row.claim_entry, row.worker_ids) == ("entry-1", ["test-worker"])
    assert order.status == "entry"


def test_a_failed_attempt_is_retried_through_redis(redis_client, settings):
    settings.DELAYQ = {**settings.DELAYQ, "RETRY_BACKOFF": 0.0}
    task = schedule(always_fails, args=["boom"])
    _run(refresh(task))
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 1)
    assert "boom" in row.last_error
    # The retry waits in the due-set, as one a worker recorded.
    assert task.pk in due_members(redis_client)


def test_a_row_that_moved_on_since_it_was_read_runs_nothing(redis_client):
    task = schedule(create_order, args=["cancelled"])
    read = refresh(task)
    cancel(task)
    assert _run(read) == DONE
    assert refresh(task).status == Status.CANCELLED
    assert not Order.objects.exists()


def test_a_row_not_yet_due_is_not_claimed(redis_client):
    task = schedule(create_order, args=["early"], delay=60)
    assert refresh(task).run_at > timezone.now() + datetime.timedelta(seconds=30)
    assert _run(refresh(task)) == DONE
    row = refresh(task)
    assert (row.status, row.attempts) == (Status.SCHEDULED, 0)
    assert not Order.objects.exists()
