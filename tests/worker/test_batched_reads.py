"""The sweeper's and the rebuild's reads in batches (reconcile.reads): every
row once, the most overdue first, whatever the batch size and however many
rows share a due time, on each database."""

from __future__ import annotations

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_delayq.ids import uuid7
from django_delayq.models import DelayedTask, Status
from django_delayq.reconcile.reads import read_in_run_at_order

pytestmark = pytest.mark.django_db(transaction=True)


def rows(*due: datetime.datetime, status: str = Status.SCHEDULED) -> None:
    DelayedTask.objects.bulk_create(
        DelayedTask(id=uuid7(), name="x", run_at=at, status=status) for at in due
    )


def test_rows_sharing_a_due_time_across_batches_are_each_read_once_in_order():
    now = timezone.now()
    second = datetime.timedelta(seconds=1)
    # Seven rows due at the same moment straddle the batches of three.
    rows(*[now] * 7, now - second, now + second, now + 2 * second)
    rows(now, status=Status.SUCCEEDED)  # another status: not read

    with CaptureQueriesContext(connection) as queries:
        read = list(
            read_in_run_at_order(DelayedTask.objects.filter(status=Status.SCHEDULED), 3)
        )

    assert len(read) == 10
    assert len({row.pk for row in read}) == 10
    assert [row.run_at for row in read] == sorted(row.run_at for row in read)
    assert read[0].run_at == now - second
    # A query per batch, none through a cursor kept on the server.
    assert len(queries) == 4
    assert not any("DECLARE" in query["sql"] for query in queries)


def test_an_exact_multiple_of_the_batch_ends_with_an_empty_batch():
    now = timezone.now()
    rows(*[now + datetime.timedelta(milliseconds=i) for i in range(6)])

    read = list(
        read_in_run_at_order(DelayedTask.objects.filter(status=Status.SCHEDULED), 3)
    )

    assert [row.run_at for row in read] == [
        now + datetime.timedelta(milliseconds=i) for i in range(6)
    ]
